"""The BPE lesson's hidden graders, judged the way `python -m grader killrate --lesson bpe` judges them:
every catalogue mutant loses points in its own part only, fails its named test and gets its hint;
every correct variant gets full marks; and the students' visible tests agree with the hidden grading
on which parts are fully right (parity), for every mutant and variant.

The grading is the command itself, run once (trusted code only: the reference, its mutants, the
variants); the visible tests run as a student runs them, one pytest per mutant or variant."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.bpe.catalogue import BUGS
from grader.judging import mutants

from .helpers import ASSIGNMENT, REFERENCE, ROOT, VARIANTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from visible_run import visible_parts  # noqa: E402

PARTS = ("training", "tokenizer")


def _env():
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.fixture(scope="module")
def killrate_output():
    """What `python -m grader killrate --lesson bpe` prints (and its exit code): one verdict per mutant
    ("killed": it lost points in its own part and no other, failed its named test and got its hint) and
    one per correct variant ("full marks")."""
    done = subprocess.run([sys.executable, "-m", "grader", "killrate", "--lesson", "bpe"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout + done.stderr


def test_killrate_command_reports_every_mutant_killed_and_no_false_failure(killrate_output):
    code, said = killrate_output
    assert code == 0, said[-3000:]
    assert f"Kill rate: {len(BUGS)}/{len(BUGS)} = 100.0%" in said, said
    variants = len([p for p in VARIANTS.iterdir() if p.is_dir()])
    assert f"Correct implementations: {variants}" in said and "False failures: 0 of" in said, said
    for bug in BUGS:
        assert f"killed  {bug.id} " in said, bug.id


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, killrate_output):
    """(visible, hidden): part -> fully right, for every mutant and variant. The hidden side is the kill
    rate's verdict: a killed mutant lost points in its own part only; a variant with full marks lost none."""
    code, said = killrate_output
    assert code == 0, "the kill rate is not perfect (see the test above): no parity to check"
    root = tmp_path_factory.mktemp("bpe-cases")
    cases = {bug.id: mutants.write_patched(bug, REFERENCE, root / bug.id) for bug in BUGS}
    cases.update({f"correct/{p.name}": p for p in sorted(VARIANTS.iterdir()) if p.is_dir()})
    hidden = {bug.id: {part: part != bug.component for part in PARTS} for bug in BUGS}
    hidden.update({name: dict.fromkeys(PARTS, True) for name in cases if name.startswith("correct/")})
    work = tmp_path_factory.mktemp("bpe-visible")
    visible = {name: {part: seen for part, (seen, _) in visible_parts(folder, work / name.replace("/", "_"),
                                                                      assignment=ASSIGNMENT, parts=PARTS).items()}
               for name, folder in cases.items()}
    return visible, hidden


def test_visible_tests_and_hidden_grading_agree_on_every_part(verdicts):
    visible, hidden = verdicts
    assert len(visible) == len(BUGS) + len([p for p in VARIANTS.iterdir() if p.is_dir()])
    found = [f"{name} / {part}: visible {'all passed' if visible[name][part] else 'failed'}, hidden "
             f"{'full' if hidden[name][part] else 'points lost'}"
             for name in sorted(visible) for part in PARTS if visible[name][part] != hidden[name][part]]
    assert not found, f"{len(found)} disagreements:\n" + "\n".join(found)

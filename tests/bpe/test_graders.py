"""The BPE lesson's hidden graders, judged the way `python -m grader killrate --lesson bpe` judges them:
every catalogue mutant loses points in its own part only, fails its named test and gets its hint;
every correct variant gets full marks. The grading is the command itself (trusted code only: the
reference, its mutants, the variants). That the students' visible tests agree with it on every part
(parity) is every lesson's test: tests/engine/test_visible_parity.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grader.bpe.catalogue import BUGS

from .helpers import ROOT, VARIANTS


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


def test_ties_broken_by_the_token_a_pair_makes_fail_the_ties_test_and_are_named(tmp_path):
    """Held-out s38 (ota_tie_concat): ties broken by the token a pair makes, max(key=(count, a + b)). The visible test
    of the rule failed; the hidden ties test passed (none of its cases told the two rules apart), so the points went
    from `reference` with no word about ties."""
    import shutil

    from grader.admin import killrate
    from grader.lesson import load_lesson

    from .helpers import REFERENCE

    sub = tmp_path / "sub"
    shutil.copytree(REFERENCE, sub, ignore=shutil.ignore_patterns("__pycache__"))
    text = (sub / "training.py").read_text()
    rule = "key=lambda pair: (pairs[pair], pair))"
    assert text.count(rule) == 1, "the reference changed: update this edit"
    (sub / "training.py").write_text(text.replace(rule, "key=lambda pair: (pairs[pair], pair[0] + pair[1]))"))
    result = killrate.grade(sub, "tie_by_merged_token", lesson=load_lesson("bpe"))
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed.get("training.ties", "passed") == "train.tie_by_merged_token", failed

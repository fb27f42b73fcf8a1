"""The BPE lesson's hidden graders, judged the way `python -m grader killrate --lesson bpe` judges them:
every catalogue mutant loses points in its own part only, fails its named test and gets its hint;
every correct variant gets full marks; and the students' visible tests agree with the hidden grading
on which parts are fully right (parity), for every mutant and variant.

The grading runs in a subprocess with the lesson chosen (`--lesson bpe`, $GRADER_LESSON), as a
command would: trusted code only (the reference, its mutants, the variants)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
import shutil

import pytest

from grader.bpe.catalogue import BUGS
from grader.judging import mutants

from .helpers import ASSIGNMENT, REFERENCE, ROOT, VARIANTS

PARTS = ("training", "tokenizer")
# Grades each folder given (name=path) and prints {name: {part: score}} and the full marks, as JSON.
GRADE = """
import json, sys
from grader.admin import killrate
full = killrate.full_marks()
out = {}
for arg in sys.argv[1:]:
    name, _, folder = arg.partition("=")
    out[name] = killrate.grade(__import__("pathlib").Path(folder), name).component_scores()
print(json.dumps({"full": full, "scores": out}))
"""


def _env():
    return {**os.environ, "GRADER_LESSON": "bpe", "PYTHONDONTWRITEBYTECODE": "1"}


def test_killrate_command_reports_every_mutant_killed_and_no_false_failure():
    done = subprocess.run([sys.executable, "-m", "grader", "killrate", "--lesson", "bpe"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"Kill rate: {len(BUGS)}/{len(BUGS)} = 100.0%" in done.stdout, done.stdout
    variants = len([p for p in VARIANTS.iterdir() if p.is_dir()])
    assert f"Correct implementations: {variants}" in done.stdout and "False failures: 0 of" in done.stdout


def visible_parts(folder: Path, work: Path) -> dict[str, bool]:
    """part -> every visible test of that part passed, with pytest run as a student runs it."""
    work.mkdir(parents=True)
    for path in folder.glob("*.py"):
        shutil.copyfile(path, work / path.name)
    shutil.copytree(ASSIGNMENT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ASSIGNMENT / "pytest.ini", work / "pytest.ini")
    report = work / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}"], cwd=work,
                   capture_output=True, text=True, timeout=300,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    parts = dict.fromkeys(PARTS, True)
    for case in ET.parse(report).getroot().iter("testcase"):
        if any(child.tag in ("failure", "error") for child in case):
            parts[case.get("classname").removeprefix("tests.test_")] = False
    return parts


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe-cases")
    cases = {bug.id: mutants.write_patched(bug, REFERENCE, root / bug.id) for bug in BUGS}
    cases.update({f"correct/{p.name}": p for p in sorted(VARIANTS.iterdir()) if p.is_dir()})
    done = subprocess.run([sys.executable, "-c", GRADE, *(f"{name}={folder}" for name, folder in cases.items())],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    graded = json.loads(done.stdout.strip().splitlines()[-1])
    hidden = {name: {part: graded["scores"][name][part] == graded["full"][part] for part in PARTS} for name in cases}
    work = tmp_path_factory.mktemp("bpe-visible")
    visible = {name: visible_parts(folder, work / name.replace("/", "_")) for name, folder in cases.items()}
    return visible, hidden


def test_visible_tests_and_hidden_grading_agree_on_every_part(verdicts):
    visible, hidden = verdicts
    assert len(visible) == len(BUGS) + len([p for p in VARIANTS.iterdir() if p.is_dir()])
    found = [f"{name} / {part}: visible {'all passed' if visible[name][part] else 'failed'}, hidden "
             f"{'full' if hidden[name][part] else 'points lost'}"
             for name in sorted(visible) for part in PARTS if visible[name][part] != hidden[name][part]]
    assert not found, f"{len(found)} disagreements:\n" + "\n".join(found)


def test_every_mutant_loses_its_own_part_and_every_variant_gets_full_marks(verdicts):
    _, hidden = verdicts
    for bug in BUGS:
        assert hidden[bug.id] == {part: part != bug.component for part in PARTS}, bug.id
    for name, parts in hidden.items():
        if name.startswith("correct/"):
            assert all(parts.values()), name

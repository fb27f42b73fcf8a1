"""Parity: the students' visible tests and the hidden grading agree on which parts are fully right.

For every bug-catalogue mutant and every correct variant (tests/fixtures/correct/), a part's visible
tests all pass exactly when the hidden grading gives that part full points. The hidden grading runs
in this process (trusted code only: the reference and its mutants); the visible tests run as a
student runs them, with pytest in a folder holding the four files, two folders at a time.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader import killrate

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = ROOT / "assignments" / "day13"
PARTS = ("self_attention", "multihead", "positional", "block")


def _visible_parts(folder: Path, work: Path) -> dict[str, tuple[bool, list[str]]]:
    """part -> (every visible test passed, the failing tests with the first line of their message)."""
    work.mkdir(parents=True)
    for path in folder.glob("*.py"):
        shutil.copyfile(path, work / path.name)
    shutil.copytree(ASSIGNMENT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ASSIGNMENT / "pytest.ini", work / "pytest.ini")
    report = work / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}"], cwd=work,
                   capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    parts = {part: (True, []) for part in PARTS}
    for case in ET.parse(report).getroot().iter("testcase"):
        part = case.get("classname").removeprefix("tests.test_")
        problem = next((child for child in case if child.tag in ("failure", "error")), None)
        if problem is not None:
            first = (problem.get("message") or "").splitlines()[:1]
            parts[part] = (False, parts[part][1] + [f"{case.get('name')}: {first[0][:160] if first else ''}"])
    return parts


def _hidden_parts(folder: Path, name: str) -> dict[str, bool]:
    full = killrate.full_marks()
    scores = killrate.grade(folder, name).component_scores()
    return {part: scores[part] == full[part] for part in PARTS}


def _cases() -> dict[str, Path]:
    cases = {bug.id: killrate.catalogue().mutant_dir(bug.id) for bug in killrate.catalogue().bugs if not bug.forbidden}
    cases.update({f"correct/{p.name}": p for p in killrate.variants()})
    return cases


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    cases = _cases()
    work = tmp_path_factory.mktemp("parity")
    with ThreadPoolExecutor(max_workers=2) as pool:
        visible = dict(zip(cases, pool.map(lambda item: _visible_parts(item[1], work / item[0].replace("/", "_")),
                                           cases.items())))
    hidden = {name: _hidden_parts(folder, name) for name, folder in cases.items()}
    return visible, hidden


def test_visible_tests_and_hidden_grading_agree_on_every_part(verdicts):
    visible, hidden = verdicts
    assert len(visible) >= 60
    found = {}
    for name in sorted(visible):
        for part in PARTS:
            seen, why = visible[name][part]
            if seen != hidden[name][part]:
                verdict = "visible: all passed, hidden: points lost" if seen else "visible: failed, hidden: full"
                found[(name, part)] = f"{name} / {part}: {verdict} {why[:3]}"
    assert not found, f"{len(found)} disagreements:\n" + "\n".join(found.values())

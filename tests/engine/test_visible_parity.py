"""Parity, for every lesson whose students get visible tests: the visible tests and the hidden grading agree
on which parts are fully right.

A student whose part passes every visible test must get that part's full hidden points, and a part the
hidden grading docks must fail a visible test. Judged on every bug-catalogue mutant of the lesson (except
those that only reach a forbidden library: the visible tests do not scan for libraries the way the grader
does) and every correct variant it declares (lesson.toml [killrate] variants). The lessons are found through
grader.lesson, never named here: a new lesson with visible tests is checked as soon as it exists.

The hidden grading runs in this process (trusted code only: the reference's mutants and the variants); the
visible tests run as a student runs them (tests/fixtures/visible_run.py), two folders at a time. A lesson's
other correct layouts (Day 13's contract freedoms) are checked at full marks, hidden and visible, by that
lesson's own tests.
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.admin import killrate
from grader.lesson import lesson_names, load_lesson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from visible_run import visible_parts  # noqa: E402


def _with_visible_tests() -> list[str]:
    """Every lesson under grader/ whose student folder holds visible tests."""
    return [name for name in lesson_names() if any((load_lesson(name).assignment / "tests").glob("test_*.py"))]


def _cases(lesson) -> dict[str, Path]:
    cases = {bug.id: lesson.catalogue.mutant_dir(bug.id) for bug in lesson.catalogue.bugs
             if not getattr(bug, "forbidden", False)}
    cases.update({f"correct/{p.name}": p for p in killrate.variants(lesson=lesson)})
    return cases


@pytest.mark.parametrize("name", _with_visible_tests())
def test_visible_tests_and_hidden_grading_agree_on_every_part(name, tmp_path):
    lesson = load_lesson(name)
    parts = lesson.modules
    cases = _cases(lesson)
    assert len(cases) >= len(parts), f"{name}: too few mutants and variants to judge parity on"
    with ThreadPoolExecutor(max_workers=2) as pool:
        visible = dict(zip(cases, pool.map(
            lambda item: visible_parts(item[1], tmp_path / item[0].replace("/", "_"), assignment=lesson.assignment,
                                       parts=parts),
            cases.items())))
    full = killrate.full_marks(lesson=lesson)
    found = []
    for case, folder in cases.items():
        scores = killrate.grade(folder, case, lesson=lesson).component_scores(lesson.components)
        for part in parts:
            seen, why = visible[case][part]
            if seen != (scores[part] == full[part]):
                verdict = "visible: all passed, hidden: points lost" if seen else "visible: failed, hidden: full"
                found.append(f"{case} / {part}: {verdict} {why[:3]}")
    assert not found, f"{name}: {len(found)} disagreements:\n" + "\n".join(found)

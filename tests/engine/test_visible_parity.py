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

A lesson's cases are judged CASES_PER_TEST at a time, each slice its own test, so that a parallel run
(tests/conftest.py, LongestFirst) spreads a long catalogue over every worker instead of waiting on one.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grader.admin import killrate
from grader.lesson import lesson_names, load_lesson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from visible_run import visible_parts_of_each  # noqa: E402


# Enough cases that a slice outlasts its start-up, few enough that a lesson's slices spread over the workers.
CASES_PER_TEST = 8


def _with_visible_tests() -> list[str]:
    """Every lesson under grader/ whose student folder holds visible tests."""
    return [name for name in lesson_names() if any((load_lesson(name).assignment / "tests").glob("test_*.py"))]


def _case_names(lesson) -> list[str]:
    """Every catalogue mutant that does not only reach a forbidden library, then every correct variant."""
    return ([bug.id for bug in lesson.catalogue.bugs if not getattr(bug, "forbidden", False)]
            + [f"correct/{p.name}" for p in killrate.variants(lesson=lesson)])


def _case_folder(lesson, case: str) -> Path:
    if case.startswith("correct/"):
        return next(p for p in killrate.variants(lesson=lesson) if p.name == case.removeprefix("correct/"))
    return lesson.catalogue.mutant_dir(case)


def _slices() -> list:
    """(lesson, first case, past the last case) for every slice of every lesson's cases."""
    found = []
    for name in _with_visible_tests():
        count = len(_case_names(load_lesson(name)))
        for start in range(0, max(count, 1), CASES_PER_TEST):
            end = min(start + CASES_PER_TEST, count)
            found.append(pytest.param(name, start, end, id=f"{name}-cases-{start + 1}-{end}-of-{count}"))
    return found


@pytest.mark.parametrize(("name", "start", "end"), _slices())
def test_visible_tests_and_hidden_grading_agree_on_every_part(name, start, end, tmp_path):
    lesson = load_lesson(name)
    parts = lesson.modules
    names = _case_names(lesson)
    assert len(names) >= len(parts), f"{name}: too few mutants and variants to judge parity on"
    cases = {case: _case_folder(lesson, case) for case in names[start:end]}
    assert cases, f"{name}: no case in slice {start}-{end} of {len(names)}"
    visible = visible_parts_of_each(cases, {case: tmp_path / case.replace("/", "_") for case in cases},
                                    assignment=lesson.assignment, parts=parts)
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

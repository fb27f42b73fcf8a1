"""Parity: the students' visible tests and the hidden grading agree on which parts are fully right.

For every bug-catalogue mutant, every correct variant (tests/fixtures/correct/) and every variant generated
from the contract's freedoms (grader/day13/freedoms.py, one per freedom and their combinations), a part's visible
tests all pass exactly when the hidden grading gives that part full points. The hidden grading runs
in this process (trusted code only: the reference and its mutants); the visible tests run as a
student runs them, with pytest in a folder holding the four files, two folders at a time.
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.admin import killrate

from grader.judging import mutants
from grader.day13 import freedoms
from grader.lesson import load_lesson

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from visible_run import PARTS, visible_parts  # noqa: E402


def _hidden_parts(folder: Path, name: str) -> dict[str, bool]:
    full = killrate.full_marks(lesson=DAY13)
    scores = killrate.grade(folder, name, lesson=DAY13).component_scores(DAY13.components)
    return {part: scores[part] == full[part] for part in PARTS}


def _freedom_variants(root: Path) -> dict[str, Path]:
    """One submission per freedom of the contract, and one per combination (grader/day13/freedoms.py)."""
    made = list(freedoms.FREEDOMS) + [freedoms.combined(ids) for ids in freedoms.COMBINATIONS]
    return {f"freedom/{f.id}": mutants.write_patched(f, killrate.catalogue(lesson=DAY13).solutions, root / f"freedom{i}")
            for i, f in enumerate(made)}


def _cases(root: Path) -> dict[str, Path]:
    cases = {bug.id: killrate.catalogue(lesson=DAY13).mutant_dir(bug.id) for bug in killrate.catalogue(lesson=DAY13).bugs if not bug.forbidden}
    cases.update({f"correct/{p.name}": p for p in killrate.variants(lesson=DAY13)})
    cases.update(_freedom_variants(root))
    return cases


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    cases = _cases(tmp_path_factory.mktemp("freedoms"))
    work = tmp_path_factory.mktemp("parity")
    with ThreadPoolExecutor(max_workers=2) as pool:
        visible = dict(zip(cases, pool.map(lambda item: visible_parts(item[1], work / item[0].replace("/", "_")),
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


def test_every_freedom_of_the_contract_gets_full_marks_hidden_and_visible(verdicts):
    """A layout the contract allows is never a false "wrong": each generated variant passes every visible
    test and gets every hidden point."""
    visible, hidden = verdicts
    names = [name for name in visible if name.startswith("freedom/")]
    assert len(names) == len(freedoms.FREEDOMS) + len(freedoms.COMBINATIONS)
    lost = {name: ([p for p in PARTS if not hidden[name][p]], [w for p in PARTS for w in visible[name][p][1]])
            for name in names if not all(hidden[name].values()) or not all(v[0] for v in visible[name].values())}
    assert not lost, "\n".join(f"{name}: hidden lost {parts}, visible failed {why[:3]}" for name, (parts, why) in lost.items())


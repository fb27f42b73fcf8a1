"""A catalogue bug may carry its own matching tolerance (Bug.match): a mistake that moves the numbers only a few
times past the tests' tolerance is named only for answers that close to its mutant's, where the lesson's MATCH
would also take a student who is just past the tolerance for another reason.

Through the toy lesson: one of its mutants, and a submission whose answers are that mutant's off by 3e-4 of
each value (within MATCH's rtol of 1e-3), all trusted code run in this process."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from grader.judging.mutants import Catalogue
from grader.judging.tolerances import Tol
from grader.lesson import load_lesson
from grader.running.calls import InProcessTransport

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY  # noqa: E402

LESSON = load_lesson(str(TOY))
WRONG_DIM = "act.wrong_dim"
LAST = "    return exps / exps.sum(dim=0, keepdim=True)"


def _submission(tmp_path: Path, factor: str) -> Path:
    """The wrong-axis mutant's activations.py, its answer multiplied by `factor`."""
    catalogue = Catalogue.of(LESSON)
    folder = tmp_path / f"times_{factor}"
    folder.mkdir()
    for name, text in catalogue.apply(catalogue.by_id[WRONG_DIM]).items():
        assert name != "activations.py" or text.count(LAST) == 1
        (folder / name).write_text(text.replace(LAST, f"{LAST} * {factor}"))
    return folder


def _named(folder: Path, match: Tol | None) -> str | None:
    student = LESSON.adapter()(InProcessTransport(folder, lesson=LESSON), record=True)
    student.current_test = "activations.reference"
    student.softmax(np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32), -1)
    catalogue = Catalogue.of(LESSON)
    catalogue.bugs = tuple(dataclasses.replace(b, match=match) if b.id == WRONG_DIM else b for b in catalogue.bugs)
    try:
        return catalogue.identify("activations", "activations.reference", student.calls)
    finally:
        catalogue.cleanup()


def test_a_bug_with_its_own_tolerance_is_named_only_within_it(tmp_path):
    near = _submission(tmp_path, "1.0003")
    assert _named(near, None) == WRONG_DIM  # within the lesson's MATCH: named
    assert _named(near, Tol(1e-6, 0.0)) is None  # outside the bug's own tolerance: not this bug
    assert _named(_submission(tmp_path, "1.0"), Tol(1e-6, 0.0)) == WRONG_DIM  # the mistake itself still is

"""An answer whose dtype the contract leaves to the submission (a lesson adapter's `free_dtypes`) names a
catalogued mistake by its values: 0/1 entries returned as bool, integers or floats are the same answer. Any
other output's dtype stays part of the answer: float64 where the mistake gives float32 is another mistake.

Through the toy lesson: its reference, one of its catalogue's mutants and a submission with that mutant's
numbers in another dtype, all trusted code run in this process."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from grader.judging.mutants import Catalogue, results_match
from grader.lesson import load_lesson
from grader.running.calls import InProcessTransport

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY  # noqa: E402

LESSON = load_lesson(str(TOY))
ToyAdapter = LESSON.adapter()
WRONG_DIM = "act.wrong_dim"


class Declared(ToyAdapter):
    """The toy's requests, as a contract that leaves softmax's dtype to the submission would declare them."""

    free_dtypes = {"activations.softmax": (0,)}


def _submission(tmp_path: Path, cast: str) -> Path:
    """The wrong-axis mutant's activations.py, its answer cast to `cast` (torch's name of a dtype)."""
    catalogue = Catalogue.of(LESSON)
    folder = tmp_path / cast
    folder.mkdir()
    for name, text in catalogue.apply(catalogue.by_id[WRONG_DIM]).items():
        last = "    return exps / exps.sum(dim=0, keepdim=True)"
        (folder / name).write_text(text.replace(last, f"{last}.to(torch.{cast})") if last in text else text)
    return folder


def _identify(adapter_class, folder: Path):
    student = adapter_class(InProcessTransport(folder, lesson=LESSON), record=True)
    x = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    student.current_test = "activations.reference"
    result = student.softmax(x, -1)
    catalogue = Catalogue.of(LESSON)
    try:
        return result, catalogue.identify("activations", "activations.reference", student.calls)
    finally:
        catalogue.cleanup()


def test_a_declared_output_names_the_mistake_whatever_its_dtype(tmp_path):
    result, found = _identify(Declared, _submission(tmp_path, "float64"))
    assert result.outputs[0]["dtype"] == "float64" and result.error is None
    assert found == WRONG_DIM


def test_an_undeclared_output_keeps_its_dtype_in_the_answer(tmp_path):
    result, found = _identify(ToyAdapter, _submission(tmp_path, "float64"))
    assert result.outputs[0]["dtype"] == "float64" and found is None


def test_the_declaration_travels_with_the_call_and_only_with_its_own():
    calls = Declared(InProcessTransport(LESSON.solutions, lesson=LESSON), record=True)
    calls.softmax(np.ones((2, 3), np.float32))
    calls.classifier(np.ones((2, 3), np.float32), {"linear.weight": np.ones((2, 3), np.float32),
                                                     "linear.bias": np.zeros(2, np.float32)})
    assert [c.header.get("free_dtypes") for c in calls.calls] == [[0], None]


@pytest.mark.parametrize(("declared", "matches"), [((0,), True), ((), False)])
def test_values_are_compared_as_numbers_only_where_declared(tmp_path, declared, matches):
    reference = InProcessTransport(LESSON.solutions, lesson=LESSON)
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    as_float = ToyAdapter(reference).softmax(x)
    as_double = ToyAdapter(InProcessTransport(_double_reference(tmp_path), lesson=LESSON)).softmax(x)
    assert as_double.outputs[0]["dtype"] == "float64"
    assert results_match(as_float, as_double, Catalogue.of(LESSON).match, free_dtypes=declared) is matches


def _double_reference(tmp_path: Path) -> Path:
    folder = tmp_path / "double"
    folder.mkdir()
    for path in LESSON.solutions.glob("*.py"):
        text = path.read_text()
        last = "    return exps / exps.sum(dim=dim, keepdim=True)"
        (folder / path.name).write_text(text.replace(last, f"{last}.double()") if last in text else text)
    return folder

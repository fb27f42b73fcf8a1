"""What a student is told about the grader's stand-ins (grader/judging/score.py), through the toy lesson.

- A part graded over the grader's stand-in of another part (the lesson's [always_standin]) that fails, when the
  student's own version of that other part was shown in the same grading to differ from the contract (a fact of
  its tests, about the one name a test called), gets the lesson's words for that fact ([facts."over_standin.<id>"]),
  told once for the tests it lost, even when they are grouped under one error; never without that evidence.
- The note on a caller graded over a stand-in because the function it called raised says what that cost, and
  names the caller's failed tests in which it ran on the student's own function (which a note of "only" would hide).
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.admin import killrate
from grader.judging import score
from grader.results import feedback

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY, make_submission  # noqa: E402

TWICE = ("import torch\n\n\ndef softmax(x, dim=-1):\n"
         "    return 2 * torch.softmax(x, dim=dim)\n")  # every answer twice the contract's
SOLUTION = (TOY / "solutions" / "classifier.py").read_text()
HALVES = SOLUTION.replace("return softmax(logits, dim=-1)", "return softmax(logits, dim=-1) / 2")
assert HALVES != SOLUTION  # the classifier undoes the twice: right over its own softmax, wrong over the grader's
WORDS = ('\n[facts."over_standin.scaled"]\n'
         'text = "{file} is graded with the grader\'s {graded_with}; your own gives {name} times its answer (see {see})."\n')
SAID = "classifier.py is graded with the grader's softmax; your own gives 2 times its answer (see activations)."


@pytest.fixture(scope="module")
def worded(toy, tmp_path_factory):
    """The toy, its rubric with words for a fact about the student's own softmax."""
    rubric = tmp_path_factory.mktemp("rubric") / "rubric.toml"
    rubric.write_text(toy.rubric_path.read_text() + WORDS)
    return replace(toy, rubric_path=rubric)


def _graded(lesson, folder: Path, files: dict) -> tuple:
    make_submission(folder, files, solutions=lesson.solutions)
    result = killrate.grade(folder, folder.name, lesson=lesson)
    return result, {t.name: t for t in result.tests}


def test_a_part_over_a_stand_in_is_told_what_the_students_own_version_was_shown_to_do(worded, tmp_path):
    result, tests = _graded(worded, tmp_path / "amy", {"activations.py": TWICE, "classifier.py": HALVES})
    assert tests["activations.reference"].status == "failed"
    assert tests["classifier.shape"].status == "passed" and tests["classifier.reference"].status == "failed"
    lent = [f for f in tests["classifier.reference"].facts if f["id"] == "over_standin.scaled"]
    assert lent and lent[0]["graded_with"] == "softmax" and lent[0]["see"] == "activations", lent
    assert lent[0]["file"] == "classifier.py" and lent[0]["factor"] == pytest.approx(2, rel=1e-3)
    words = feedback.lesson_words(worded)
    text = feedback.feedback_markdown(result, words, "all", lesson=worded)
    assert text.count(SAID) == 1, text
    assert SAID in feedback.student_output(tests["classifier.reference"], words)
    # The student's own part is not told it: its tests show the numbers themselves.
    assert not any(f["id"].startswith("over_standin.") for t in tests.values() if t.component == "activations"
                   for f in t.facts)


def test_never_without_the_evidence_nor_words_the_lesson_does_not_have(worded, toy, tmp_path):
    # The student's softmax is the contract's: the classifier's own bug, nothing about the stand-in to say.
    result, tests = _graded(worded, tmp_path / "bob", {"classifier.py": HALVES})
    assert tests["classifier.reference"].status == "failed"
    assert not any(f["id"].startswith("over_standin.") for f in tests["classifier.reference"].facts)
    assert "is graded with the grader's" not in feedback.feedback_markdown(result, None, "all", lesson=worded)
    # A lesson without words for it keeps no such fact.
    _, tests = _graded(toy, tmp_path / "cat", {"activations.py": TWICE, "classifier.py": HALVES})
    assert not any(f["id"].startswith("over_standin.") for f in tests["classifier.reference"].facts)


def test_a_raised_error_grouped_over_several_tests_keeps_the_words(worded, tmp_path):
    raises = SOLUTION.replace("return softmax(logits, dim=-1)", "return softmax(logits, dim=-1).view(-1, 999)")
    result, tests = _graded(worded, tmp_path / "dan", {"activations.py": TWICE, "classifier.py": raises})
    failed = [t for t in tests.values() if t.component == "classifier" and t.status == "failed"]
    assert len(failed) == 2 and all(t.advice == "raised" for t in failed), [(t.name, t.advice) for t in failed]
    text = feedback.feedback_markdown(result, None, "all", lesson=worded)
    assert "(the same message for 2 tests)" in text and text.count(SAID) == 1, text


# -- the note on a caller graded over a stand-in ------------------------------------------------------------
def _call(test: str, caller: str, over=None):
    return SimpleNamespace(test=test, header={"op": "session", "module": "m", "cls": caller},
                           result=SimpleNamespace(header={"over_standins": over} if over else {}))


def test_the_note_says_only_when_every_call_of_the_caller_that_failed_was_over_the_stand_in():
    calls = [_call("m.a", "Caller", ["helper"]), _call("m.a", "Caller"), _call("m.b", "Caller", ["helper"])]
    (note,) = score._standin_notes(calls, failed={"m.b"})
    assert "Caller was graded over the grader's helper" in note and "cost only the tests of helper" in note
    assert "m.a" not in note and "m.b" not in note  # m.a passed on the student's own helper; m.b ran over the stand-in


def test_the_note_names_the_failed_tests_where_the_caller_ran_on_the_students_own_function():
    calls = [_call("m.a", "Caller", ["helper"]), _call("m.a", "Caller"), _call("m.b", "Caller", ["helper"]),
             _call("m.c", "Other")]
    (note,) = score._standin_notes(calls, failed={"m.a", "m.b", "m.c"})
    assert "Caller was graded over the grader's helper" in note
    assert "m.a" in note and "m.b" not in note and "m.c" not in note, note
    assert "in its other calls Caller ran on yours" in note, note

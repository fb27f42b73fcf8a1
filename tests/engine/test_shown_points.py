"""Points a person reads have at most two decimals (tools/ci_feedback.py's summary, results.json's score
line); the values stored keep their precision. A part's points shared among seven tests once printed
"93.7142 / 100"."""
from __future__ import annotations

import types

from grader.results import feedback

from grader.release import notebook

from grader.release import student_release as release
from grader.results import records


def _ci_feedback(lesson):
    module = types.ModuleType("ci_feedback_under_test")
    module.__file__ = str(notebook.CI_FEEDBACK)
    exec(compile(release.ci_feedback_source(lesson=lesson), str(notebook.CI_FEEDBACK), "exec"), module.__dict__)  # noqa: S102
    return module


def test_the_ci_summary_shows_two_decimals_and_the_result_keeps_four(toy):
    ci = _ci_feedback(toy)
    result = {"max_score": 100.0, "tests": [
        {"name": "classifier: a", "status": "pass", "score": 30 / 7, "message": ""},
        {"name": "classifier: b", "status": "fail", "score": 0.0, "message": "wrong"},
        {"name": "activations: c", "status": "pass", "score": 89.4285714, "message": ""}]}
    text = ci.summary_markdown(result)
    assert "**93.71 / 100** feedback points" in text
    assert "| classifier | 1/2 | 4.29 |" in text and "| activations | 1/1 | 89.43 |" in text
    assert ci.shown_points(12.5) == "12.5" and ci.shown_points(30.0) == "30" and ci.shown_points(-0.001) == "0"
    tests = {"tests/test_activations.py::test_x": {"part": "activations", "passed": True, "message": "", "seconds": 0.0}}
    shared = ci.classroom_result(tests, [], {"activations": 20 / 3})
    assert shared["tests"][0]["score"] == round(20 / 3, 4)  # the result Classroom reads keeps its digits


def test_the_score_line_a_student_reads_shows_two_decimals(toy):
    result = records.SubmissionResult(submission="ada", tests=[
        records.TestResult("activations.worked_values", "activations", 20 / 3, 10.0, "passed"),
        records.TestResult("activations.reference", "activations", 0.0, 10.0, "failed")])
    line = feedback._summary_line(result, lesson=toy)
    assert "6.67/20" in line and "6.6667" not in line

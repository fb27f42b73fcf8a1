"""The release policy: each test's visibility from the rubric, carried per test in results.json as
Gradescope reads it, and honoured by feedback.md through --release; execution_time of a Gradescope
run is that run's wall time."""
import json
import os
from pathlib import Path

import pytest

from grader.results import classreport

from grader.results import feedback

from grader.release import gradescope
from grader.__main__ import build_parser
from grader.results.records import SubmissionResult
from grader.results.records import TestResult as Outcome

SECRET = "expected 0.2689 got 0.5"


def _result() -> SubmissionResult:
    return SubmissionResult(submission="ana", source="ana/", tests=[
        Outcome(name="activations.worked_values", component="activations", score=0, max_score=4,
                status="failed", output=SECRET),
        Outcome(name="classifier.shape", component="classifier", score=0, max_score=2, status="failed",
                output="the output has 12 columns; write one per class"),
    ])


@pytest.fixture
def rubric(tmp_path, toy):
    """A lesson whose rubric's [visibility] the test writes: the toy lesson with that rubric."""
    from dataclasses import replace

    lesson = toy

    def write(table: str):
        path = tmp_path / f"rubric{len(list(tmp_path.glob('rubric*.toml')))}.toml"
        shipped = lesson.rubric_path.read_text(encoding="utf-8")
        kept = shipped.replace('\n[visibility]\ndefault = "after_due_date"\n', "\n")
        assert kept != shipped, "the shipped rubric's [visibility] table changed: update this fixture"
        path.write_text(kept + "\n" + table, encoding="utf-8")
        return replace(lesson, rubric_path=path)  # a new value: nothing derived from the old rubric
    return write


def test_a_rubric_visibility_table_resolves_by_test_then_part_then_default(rubric):
    """A lesson's own shipped table is checked with the lesson (tests/<lesson>/)."""
    visibility = rubric('[visibility]\ndefault = "after_due_date"\nclassifier = "visible"\n'
                        '"activations.reference" = "hidden"\n').visibility
    assert feedback.visibility_of("activations.worked_values", "activations", visibility) == "after_due_date"
    assert feedback.visibility_of("activations.reference", "activations", visibility) == "hidden"
    assert feedback.visibility_of("classifier.shape", "classifier", visibility) == "visible"
    assert feedback.visibility_of("classifier.shape", "classifier", {}) == "visible", "no table: all visible"


def test_results_json_carries_each_tests_visibility(rubric):
    lesson = rubric('[visibility]\ndefault = "after_due_date"\nclassifier = "visible"\n'
                    '"activations.worked_values" = "after_published"\n')
    tests = {t["name"]: t for t in feedback.gradescope_json(_result(), lesson=lesson)["tests"]}
    assert tests["activations.worked_values"]["visibility"] == "after_published"
    assert tests["classifier.shape"]["visibility"] == "visible"
    lesson = rubric('[visibility]\ndefault = "sometimes"\n')  # not one of Gradescope's: shown, never lost
    assert {t["visibility"] for t in feedback.gradescope_json(_result(), lesson=lesson)["tests"]} == {"visible"}


@pytest.mark.parametrize("release, shown", [("now", False), ("after_due_date", True), ("published", True),
                                            ("all", True)])
def test_feedback_shows_a_tests_details_only_once_released(rubric, release, shown):
    lesson = rubric('[visibility]\ndefault = "after_due_date"\nclassifier = "visible"\n')
    text = feedback.feedback_markdown(_result(), feedback.Words(), release, lesson=lesson)
    assert (SECRET in text) is shown
    assert "write one per class" in text  # a part made visible is shown at once
    assert ("shown after the due date" in text) is not shown
    assert "Score: 0 / 6" in text  # points are never withheld, only expected and got


def test_a_hidden_test_is_shown_only_to_the_staff(rubric):
    lesson = rubric('[visibility]\ndefault = "hidden"\n')
    assert SECRET not in feedback.feedback_markdown(_result(), feedback.Words(), "published", lesson=lesson)
    assert "shown only to the teaching staff" in feedback.feedback_markdown(_result(), feedback.Words(), "published", lesson=lesson)
    assert SECRET in feedback.feedback_markdown(_result(), feedback.Words(), "all", lesson=lesson)


def test_grade_and_merge_take_release_and_the_class_files_honour_it(rubric, tmp_path):
    lesson = rubric('[visibility]\ndefault = "after_due_date"\n')
    assert build_parser().parse_args(["grade", "s", "--out", "o", "--release", "now"]).release == "now"
    assert build_parser().parse_args(["merge", "a", "--out", "o"]).release == "after_due_date"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["grade", "s", "--out", "o", "--release", "tomorrow"])
    out = tmp_path / "out"
    feedback.write_submission(out, _result(), lesson=lesson)
    assert SECRET in (out / "ana" / "feedback.md").read_text()
    classreport.write_class(out, release="now", lesson=lesson)
    assert SECRET not in (out / "ana" / "feedback.md").read_text()
    classreport.write_class(out, release="all", lesson=lesson)
    assert SECRET in (out / "ana" / "feedback.md").read_text()


def test_execution_time_is_the_wall_time_of_the_autograder_run(tmp_path):
    """A stand-in engine that takes a second and claims 0.01 s: results.json says the run's time."""
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "submission" / "activations.py").write_text("# work\n")
    engine = tmp_path / "engine"
    engine.write_text("#!/bin/sh\n"
                      "# called as: ENGINE -m grader grade SUBS --out OUT --jobs 1\n"
                      "sleep 1.2\n"
                      f"mkdir -p \"$6/{gradescope.ROW}\"\n"
                      f"printf '{{\"score\": 1, \"execution_time\": 0.01, \"output\": \"\", \"tests\": []}}' "
                      f"> \"$6/{gradescope.ROW}/results.json\"\n")
    os.chmod(engine, 0o755)
    assert gradescope.run_autograder(root=root, python=str(engine)) == 0
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["execution_time"] >= 1.2 and data["score"] == 1

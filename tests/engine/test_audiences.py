"""Two audiences: what a student receives never holds a staff note, a classmate's name, a similarity
pair or an integrity detail; what the staff read (grades.csv, the report, the review page) holds them
all. Built from records (no grading), so it runs in a second."""
import json
import re
from pathlib import Path

import pytest

from grader.results import classreport

from grader.results import feedback

from grader.admin import overrides
from grader.results.records import SubmissionResult
from grader.results.records import TestResult as Outcome

STUDENT_FILES = ("feedback.md", "feedback.html", "results.json")


def _result(name: str, passed: bool = True, flags=()) -> SubmissionResult:
    tests = [
        Outcome(name="activations.worked_values", component="activations", score=2 if passed else 0,
                max_score=2, status="passed" if passed else "failed", output="" if passed else "got 2"),
        Outcome(name="activations.reference", component="activations", score=2, max_score=2, status="passed"),
        Outcome(name="classifier.shape", component="classifier", score=1, max_score=1, status="passed"),
        Outcome(name="classifier.reference", component="classifier", score=3, max_score=3, status="passed"),
    ]
    return SubmissionResult(submission=name, tests=tests, source=f"{name}/", flags=list(flags))


@pytest.fixture
def out(tmp_path, toy):
    folder = tmp_path / "out"
    feedback.write_submission(folder, _result("ada_reference"), lesson=toy)
    feedback.write_submission(folder, _result("noah_cheater", False), lesson=toy)
    classreport.write_class(folder, lesson=toy)
    return folder


def _student_text(out: Path, name: str) -> str:
    return "\n".join((out / name / f).read_text(encoding="utf-8") for f in STUDENT_FILES)


def test_the_issues_old_style_similarity_row_never_reaches_the_student(out, toy):
    # The row exactly as an instructor wrote it in the one-comment-column file of before.
    (out / "overrides.csv").write_text(
        "submission,test,points,comment,by,at\n"
        "noah_cheater,similarity:ada_reference,,heatmap identical to ada_reference; student admitted copying,ta,\n",
        encoding="utf-8")
    classreport.write_class(out, lesson=toy)
    text = _student_text(out, "noah_cheater")
    assert not re.search(r"\bada_reference\b", text), "a classmate's name reached noah's files"
    assert "admitted copying" not in text
    # The staff still see the decision, with its words.
    assert "admitted copying" in (out / "report.html").read_text()
    assert "similarity:ada_reference reviewed" in (out / "grades.csv").read_text()


def test_an_old_files_comment_stays_student_visible(out, toy):
    (out / "overrides.csv").write_text(
        "submission,test,points,comment,by,at\nnoah_cheater,classifier.reference,1,cite the handout,ta,\n",
        encoding="utf-8")
    classreport.write_class(out, lesson=toy)
    assert "cite the handout" in (out / "noah_cheater" / "feedback.md").read_text()


def test_a_staff_note_and_a_student_comment_go_to_their_own_readers(out, toy):
    (out / "overrides.csv").write_text(
        "submission,test,points,comment,staff_note,by,at\n"
        "noah_cheater,classifier.reference,1,your analysis repeats the handout,same words as ada_reference,ta,\n"
        "noah_cheater,*,2,for the clear README,checked with the lead,ta,\n"
        "noah_cheater,integrity,,you may resubmit,fake results.json planted,ta,\n",
        encoding="utf-8")
    classreport.write_class(out, lesson=toy)
    text = _student_text(out, "noah_cheater")
    assert "your analysis repeats the handout" in text and "for the clear README" in text
    for staff in ("same words as ada_reference", "checked with the lead", "fake results.json planted",
                  "you may resubmit"):  # an integrity decision is staff-only, whatever its comment says
        assert staff not in text, staff
    assert not re.search(r"\bada_reference\b", text)
    page = (out / "report.html").read_text()
    for staff in ("same words as ada_reference", "checked with the lead", "fake results.json planted"):
        assert staff in page, staff


def test_integrity_flags_are_for_the_staff_only(tmp_path, toy):
    folder = tmp_path / "out"
    flag = "classifier.py line 9: writes results.json (a result file the grader writes)"
    feedback.write_submission(folder, _result("noah_cheater", False, flags=[flag]), lesson=toy)
    classreport.write_class(folder, lesson=toy)
    assert "results.json (a result file" not in _student_text(folder, "noah_cheater")
    assert flag in (folder / "report.html").read_text() and flag in (folder / "summary.md").read_text()


def test_append_writes_the_staff_note_column(tmp_path):
    path = tmp_path / "o.csv"
    overrides.append(path, {"submission": "a", "test": "*", "points": 1.0, "comment": "well done",
                            "staff_note": "agreed in the meeting", "by": "ta"})
    assert path.read_text().splitlines()[0] == ",".join(overrides.COLUMNS)
    [row] = overrides.read(path)
    assert (row.comment, row.staff_note) == ("well done", "agreed in the meeting")

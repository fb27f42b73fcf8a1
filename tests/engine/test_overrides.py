"""grader/admin/overrides.py: a TA's decisions in OUT/overrides.csv, applied by grade and merge to
grades.csv, feedback.md, results.json and the class report."""
import csv
import io
import json
from pathlib import Path

import pytest

from grader.results import classreport

from grader.results import feedback

from grader.admin import overrides

from grader.running import grade as run
from grader.admin.merge import merge
from grader.results.records import SubmissionResult
from grader.results.records import TestResult as Outcome
from grader.lesson import load_lesson

from engine_helpers import TOY

LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage: the toy's


def _result(name: str, passed: bool = True) -> SubmissionResult:
    tests = [
        Outcome(name="activations.worked_values", component="activations", score=4 if passed else 0,
                max_score=4, status="passed" if passed else "failed", output="" if passed else "got 2"),
        Outcome(name="activations.large_inputs", component="activations", score=3, max_score=3, status="passed"),
        Outcome(name="classifier.shape", component="classifier", score=2, max_score=2, status="passed"),
        Outcome(name="classifier.reference", component="classifier", score=2, max_score=2, status="passed"),
    ]
    return SubmissionResult(submission=name, tests=tests, source=f"{name}/")


@pytest.fixture
def out(tmp_path):
    folder = tmp_path / "out"
    for name, passed in (("alice", True), ("bob", False)):
        feedback.write_submission(folder, _result(name, passed), lesson=LESSON)
    classreport.write_class(folder, lesson=LESSON)
    return folder


def _write(path: Path, *rows: str) -> None:
    path.write_text("submission,test,points,comment,by,at\n" + "".join(r + "\n" for r in rows), encoding="utf-8")


def _grades(out: Path) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


def test_a_test_override_reaches_every_file(out):
    _write(out / "overrides.csv",
           "alice,classifier.shape,0.5,the shapes are copied from the handout,ta-jo,2026-12-02T10:00:00+00:00")
    classreport.write_class(out, lesson=LESSON)
    row = _grades(out)["alice"]
    assert row["total"] == "9.5" and row["classifier"] == "2.5"
    assert row["overrides"] == "classifier.shape 2->0.5"
    assert list(_grades(out)["alice"])[-5:-2] == ["status", "source", "overrides"]
    text = (out / "alice" / "feedback.md").read_text()
    assert "**Score: 9.5 / 11**" in text
    assert "## Reviewed by your instructor" in text and "the shapes are copied from the handout" in text
    results = json.loads((out / "alice" / "results.json").read_text())
    assert results["score"] == 9.5
    shape = next(t for t in results["tests"] if "classifier.shape" in t["name"])
    assert shape["score"] == 0.5 and "Reviewed by ta-jo: the shapes are copied from the handout" in shape["output"]
    assert results["extra_data"]["overrides"][0]["automated"] == 2
    page = (out / "report.html").read_text()
    assert "Reviewed by hand" in page and "the shapes are copied from the handout" in page
    # The record stays the automated result: removing the row restores the grade.
    assert json.loads((out / "alice" / "record.json").read_text())["total"] == 11
    (out / "overrides.csv").unlink()
    classreport.write_class(out, lesson=LESSON)
    assert _grades(out)["alice"]["total"] == "11" and "Reviewed" not in (out / "alice" / "feedback.md").read_text()


def test_most_specific_wins_last_row_wins_and_star_adds(out):
    _write(out / "overrides.csv",
           "bob,activations,5,first look,ta",
           "bob,activations,6,second look,ta",   # same key: the last row wins
           "bob,activations.large_inputs,1,,ta",  # its own row beats the part's
           "bob,*,-1.5,late without an extension,lead",
           "bob,similarity:alice,,talked to both: independent work,lead")
    classreport.write_class(out, lesson=LESSON)
    row = _grades(out)["bob"]
    # activations: large_inputs 1 (own row) + worked_values gets the part's 6; classifier 4; bonus -1.5
    assert row["activations"] == "7" and row["total"] == "9.5"
    assert row["overrides"] == ("activations 3->6; activations.large_inputs 3->1; "
                                "similarity:alice reviewed; * -1.5")
    text = (out / "bob" / "feedback.md").read_text()
    assert "-1.5 points on the total" in text
    # A decision on a similarity pair is the staff's: it names a classmate, so the student never reads it.
    assert "independent work" not in text and "similarity:alice" not in text
    assert "independent work" in (out / "report.html").read_text()
    results = json.loads((out / "bob" / "results.json").read_text())
    assert results["score"] == 9.5
    assert results["tests"][-1]["name"] == "Instructor's adjustment" and results["tests"][-1]["score"] == -1.5
    assert sum(t["score"] for t in results["tests"]) == 9.5


@pytest.mark.parametrize("line, named", [
    ("zed,classifier.shape,1,,ta", "no submission named 'zed'"),
    ("alice,classifier.nothing,1,,ta", "has no test or part 'classifier.nothing'"),
    ("alice,classifier.shape,3,,ta", "3 points for alice classifier.shape is outside 0..2"),
    ("alice,classifier.shape,lots,,ta", "points 'lots' is not a number"),
])
def test_an_unknown_or_impossible_row_is_an_error_naming_it(out, line, named):
    _write(out / "overrides.csv", line)
    before = (out / "grades.csv").read_text()
    with pytest.raises(overrides.OverrideError, match=named):
        classreport.write_class(out, lesson=LESSON)
    assert (out / "grades.csv").read_text() == before


def test_grade_refuses_an_unknown_name_before_grading(out, tmp_path, capsys):
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    _write(out / "overrides.csv", "zed,*,1,,ta")
    assert run.main(submissions=subs, out=out, lesson=LESSON) == 2
    assert "no submission named 'zed'" in capsys.readouterr().err


def test_merge_applies_the_merged_folders_file_and_another_one(out, tmp_path):
    merged = tmp_path / "merged"
    merged.mkdir()
    _write(merged / "overrides.csv", "bob,*,2,bonus for the write-up,ta")
    assert merge(shards=[str(out)], out=str(merged), lesson=LESSON) == 0
    assert _grades(merged)["bob"]["total"] == "9"
    elsewhere = tmp_path / "decisions.csv"
    _write(elsewhere, "bob,classifier,0,,ta")
    assert merge(shards=[str(out)], out=str(merged), overrides_path=str(elsewhere), lesson=LESSON) == 0
    rows = _grades(merged)
    assert rows["bob"]["total"] == "3" and rows["bob"]["classifier"] == "0"
    _write(elsewhere, "nobody,*,1,,ta")
    assert merge(shards=[str(out)], out=str(merged), overrides_path=str(elsewhere), lesson=LESSON) == 2


def test_append_writes_one_plain_line_per_decision(tmp_path):
    path = tmp_path / "o.csv"
    overrides.append(path, {"submission": "alice", "test": "*", "points": 2.0, "comment": "a\nb, \"c\"", "by": "=cmd"})
    overrides.append(path, {"submission": "bob", "test": "classifier", "points": None, "comment": "", "by": "ta"})
    rows = overrides.read(path)
    assert [(r.submission, r.test, r.points, r.comment, r.by) for r in rows] == [
        ("alice", "*", 2.0, 'a b, "c"', "'=cmd"), ("bob", "classifier", None, "", "ta")]
    assert all(r.at for r in rows)


def test_points_a_person_reads_have_at_most_two_decimals_in_every_file(out):
    # 5 points over tests worth 4 and 3 gives shares of 2.857142...; a written 1.2345 bonus.
    _write(out / "overrides.csv", "bob,activations,5,,,", "alice,*,-1.2345,,,")
    classreport.write_class(out, lesson=LESSON)
    texts = {"grades.csv": (out / "grades.csv").read_text()}
    for name in ("alice", "bob"):
        for file in ("feedback.md", "feedback.html", "results.json"):
            texts[f"{name}/{file}"] = (out / name / file).read_text()
    import re

    for where, text in texts.items():
        if where.endswith("results.json"):
            data = json.loads(text)
            numbers = [data["score"]] + [t["score"] for t in data["tests"]] + [t["max_score"] for t in data["tests"]]
            assert all(round(n, 2) == n for n in numbers), (where, numbers)
        else:
            assert not re.search(r"(?<![\w.])\d+\.\d{3,}", text), (where, re.findall(r"\d+\.\d{3,}", text))
    assert _grades(out)["bob"]["activations"] == "5" and _grades(out)["alice"]["total"] == "9.77"


def test_a_persons_comment_is_data_and_follows_the_rubrics_words():
    """A comment on a test is kept beside it ({"by", "comment"}), never written into what the test said:
    the student reads the test's output, the rubric's words for it, then the person's comment."""
    from grader.results import feedback
    from grader.results.records import SubmissionResult, TestResult

    result = SubmissionResult(submission="alice", tests=[
        TestResult(name="classifier.shape", component="classifier", score=0, max_score=2, status="failed",
                   output="the output has shape (2, 4), not (2, 3)", advice="hint")])
    row = overrides.Override(submission="alice", test="classifier.shape", points=1.0,
                             comment="fair try", by="ta-jo")
    changed = overrides.apply(result, {"classifier.shape": row})
    assert changed.tests[0].output == "the output has shape (2, 4), not (2, 3)"
    assert changed.tests[0].review == {"by": "ta-jo", "comment": "fair try"}
    words = feedback.Words(tests={"classifier.shape": {"hint": "Map (..., d_in) to (..., n_classes)."}})
    assert feedback.student_output(changed.tests[0], words) == \
        "the output has shape (2, 4), not (2, 3)\n\nHint: Map (..., d_in) to (..., n_classes).\n\nReviewed by ta-jo: fair try"
    assert result.tests[0].review == {}  # the record is as graded


def test_a_decision_made_for_an_earlier_version_still_counts_and_the_staff_are_told(tmp_path):
    """A row carries the version (the submission digest's head) it was made on: after a resubmission it is
    named for the staff in grades.csv, the report and the review page, and the student's files never say so."""
    folder = tmp_path / "out"
    alice = _result("alice", passed=False)
    alice.digests = {"submission": "b" * 64}
    feedback.write_submission(folder, alice, lesson=LESSON)
    _write_with_version(folder / "overrides.csv",
                        "alice,activations.worked_values,4,checked by hand,ta,2026-12-02T10:00:00+00:00," + "a" * 12,
                        "alice,classifier.shape,1,,ta,2026-12-02T10:00:00+00:00," + "b" * 12)
    classreport.write_class(folder, lesson=LESSON)
    row = _grades(folder)["alice"]
    assert row["total"] == "10"  # the decision still counts until a person sets it again or deletes it
    assert row["overrides"] == ("activations.worked_values 0->4 (made for an earlier version); "
                                "classifier.shape 2->1")
    assert "made for an earlier version" in (folder / "report.html").read_text()
    for student_file in ("feedback.md", "results.json", "feedback.html"):
        assert "earlier version" not in (folder / "alice" / student_file).read_text()
    # Points set on an earlier version never take from what the new version earns by itself: set aside, and said.
    _write_with_version(folder / "overrides.csv",
                        "alice,activations.worked_values,4,checked by hand,ta,2026-12-02T10:00:00+00:00," + "a" * 12,
                        "alice,classifier,1,partial credit,ta,2026-12-02T10:00:00+00:00," + "a" * 12)
    classreport.write_class(folder, lesson=LESSON)
    row = _grades(folder)["alice"]
    assert row["total"] == "11" and row["classifier"] == "4"
    assert "classifier 4->1 (made for an earlier version; set aside: the new version earns more by itself)" in \
        row["overrides"]
    assert "partial credit" not in (folder / "alice" / "feedback.md").read_text()
    assert "partial credit" not in (folder / "alice" / "results.json").read_text()
    stale = overrides.earlier_versions(overrides.read(folder / "overrides.csv"),
                                       [alice], previous={})
    assert [(r.submission, r.test) for r in stale] == [("alice", "activations.worked_values"), ("alice", "classifier")]
    # A row without a version is judged only when the run itself sees the submission change.
    _write(folder / "overrides.csv", "alice,classifier.shape,1,,ta")
    rows = overrides.read(folder / "overrides.csv")
    assert overrides.earlier_versions(rows, [alice], previous={"alice": "b" * 64}) == []
    assert [r.test for r in overrides.earlier_versions(rows, [alice], previous={"alice": "c" * 64})] == \
        ["classifier.shape"]


def test_a_row_written_without_a_version_gets_the_one_graded_when_it_was_written(tmp_path):
    """Held-out s61: a row written by hand, with no version, took points from a resubmission that earned more by
    itself (30 -> 24), and was named once, on one run's console. The first run that sees such a row stamps it with
    the version its submission was graded at then (beside the file, which stays as the person wrote it); after a
    resubmission the row is one made for an earlier version, set aside where the new version earns more."""
    folder = tmp_path / "out"
    alice = _result("alice", passed=False)
    alice.digests = {"submission": "a" * 64}
    feedback.write_submission(folder, alice, lesson=LESSON)
    _write(folder / "overrides.csv", "alice,classifier,1,partial credit,ta")
    written = (folder / "overrides.csv").read_text()
    overrides.stamp_versions(folder / "overrides.csv", {"alice": "a" * 64})  # as `grade` does before it grades
    assert (folder / "overrides.csv").read_text() == written
    assert [r.version for r in overrides.read(folder / "overrides.csv")] == ["a" * 12]
    # Alice hands in again and now passes everything: the row may not take from it, and every staff file says so.
    better = _result("alice", passed=True)
    better.digests = {"submission": "c" * 64}
    feedback.write_submission(folder, better, lesson=LESSON)
    overrides.stamp_versions(folder / "overrides.csv", {"alice": "c" * 64})  # the next run keeps the first stamp
    classreport.write_class(folder, lesson=LESSON)
    row = _grades(folder)["alice"]
    assert row["classifier"] == "4" and "made for an earlier version; set aside" in row["overrides"], row
    assert [r.test for r in overrides.earlier_versions(overrides.read(folder / "overrides.csv"), [better],
                                                       previous={})] == ["classifier"]
    # A row the person changes is a new decision, on the version graded when it changed.
    _write(folder / "overrides.csv", "alice,classifier,3,looked again,ta")
    overrides.stamp_versions(folder / "overrides.csv", {"alice": "c" * 64})
    classreport.write_class(folder, lesson=LESSON)
    assert _grades(folder)["alice"]["classifier"] == "3"


def test_a_row_without_a_time_decides_the_requests_made_before_grade_first_saw_it(tmp_path):
    """Held-out s61: a hand-written row with no `at` decided no regrade request; the student read the row's comment
    and "open" side by side. The first run that sees the row stamps it with its time, as it stamps its version."""
    from grader.admin import regrade_requests

    folder = tmp_path / "out"
    folder.mkdir()
    _write(folder / "overrides.csv", "alice,classifier,3,looked again,ta")
    overrides.stamp_versions(folder / "overrides.csv", {"alice": "a" * 64}, now="2026-12-02T10:00:00+00:00")
    rows = overrides.read(folder / "overrides.csv")
    assert [(r.at, r.version) for r in rows] == [("2026-12-02T10:00:00+00:00", "a" * 12)]
    before = regrade_requests.Request("alice", "classifier", "why?", "2026-12-02T09:00:00Z")
    after = regrade_requests.Request("alice", "classifier", "and now?", "2026-12-02T11:00:00Z")
    assert [s.state for s in regrade_requests.standings([before, after], rows)] == ["accepted", "open"]


def test_a_set_aside_decision_is_not_told_to_the_student_as_points_given(tmp_path):
    """Held-out s61: a request accepted on an earlier version with 24 points, set aside since the new version earns
    30 by itself: the student read "Score 100" and "accepted (30 → 24 points)"."""
    from grader.admin import regrade_requests

    alice = _result("alice", passed=True)
    alice.digests = {"submission": "c" * 64}
    asked = regrade_requests.Request("alice", "classifier", "why?", "2026-12-02T09:00:00Z")
    row = overrides.Override("alice", "classifier", 1.0, "partly", "ta", "2026-12-02T10:00:00+00:00",
                             version="a" * 12)
    found = regrade_requests.standings([asked], [row], [alice])
    assert found[0].set_aside and not found[0].lowered
    words = regrade_requests.points_words(found[0].for_student())
    assert "→" not in words and "earlier version" in words, words


def _write_with_version(path: Path, *rows: str) -> None:
    path.write_text("submission,test,points,comment,by,at,version\n" + "".join(r + "\n" for r in rows),
                    encoding="utf-8")


@pytest.mark.parametrize("file, row, named", [
    ("regrade_requests.csv", "zed,classifier.shape,why,2026-12-01T10:00:00Z", "no student named 'zed'"),
    ("regrade_requests.csv", "carl,classifier.shap,why,2026-12-01T10:00:00Z", "has no test or part 'classifier.shap'"),
    ("comments.csv", "zed,activations.py,1,x,look here,,ta,", "zed"),
])
def test_grade_refuses_a_bad_request_or_comment_row_before_grading(out, tmp_path, capsys, monkeypatch, file, row,
                                                                   named):
    """carl is not graded yet: his tests are the rubric's, so a typo waits for no class run."""
    subs = tmp_path / "subs"
    for name in ("alice", "bob", "carl"):
        (subs / name).mkdir(parents=True)
    header = {"regrade_requests.csv": "student,test,reason,time",
              "comments.csv": "submission,file,line,code,comment,staff_note,by,at"}[file]
    (out / file).write_text(f"{header}\n{row}\n")
    monkeypatch.setattr(run, "Zygote", lambda *a, **k: pytest.fail("nothing may be graded"))
    assert run.main(submissions=subs, out=out, lesson=LESSON) == 2
    err = capsys.readouterr().err
    assert named in err and f"{file}:2" in err


def test_a_request_on_any_rubric_test_of_a_submission_not_graded_yet_passes_the_early_check(out, tmp_path):
    subs = tmp_path / "subs"
    (subs / "carl").mkdir(parents=True)
    rows = "".join(f"carl,{test},why,2026-12-01T10:00:00Z\n" for test in (*LESSON.test_ids, *LESSON.components))
    (out / "regrade_requests.csv").write_text("student,test,reason,time\n" + rows)
    from grader.intake import submissions as intake

    run._check_requests_and_comments(out, [], intake.discover(subs), LESSON)  # raises on any row it refuses
    assert set(LESSON.test_ids) == {t.name for t in _result("x").tests} | {"activations.reference"}


def test_a_request_may_name_the_student_by_their_roster_identity(out, tmp_path, monkeypatch):
    (out / "roster.csv").write_text("identifier,submission,name\ns1008,bob,Bob\ns1009,alice,Alice\n")
    (out / "regrade_requests.csv").write_text("student,test,reason,time\ns1008,classifier.shape,why,2026-12-01T10:00:00Z\n")
    classreport.write_class(out, lesson=LESSON)
    assert "Your regrade requests" in (out / "bob" / "feedback.md").read_text()
    subs = tmp_path / "subs"
    for name in ("alice", "bob"):
        (subs / name).mkdir(parents=True)
    (out / "regrade_requests.csv").write_text("student,test,reason,time\ns1010,classifier.shape,why,2026-12-01T10:00:00Z\n")
    monkeypatch.setattr(run, "Zygote", lambda *a, **k: pytest.fail("nothing may be graded"))
    assert run.main(submissions=subs, out=out, lesson=LESSON) == 2

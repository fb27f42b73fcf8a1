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
from grader.lesson import load_lesson  # noqa: E402

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage


def _result(name: str, passed: bool = True) -> SubmissionResult:
    tests = [
        Outcome(name="self_attention.worked_values", component="self_attention", score=4 if passed else 0,
                max_score=4, status="passed" if passed else "failed", output="" if passed else "got 2"),
        Outcome(name="self_attention.causal_mask", component="self_attention", score=3, max_score=3, status="passed"),
        Outcome(name="deliverables.analysis", component="deliverables", score=2, max_score=2, status="passed"),
        Outcome(name="deliverables.heatmap_png", component="deliverables", score=2, max_score=2, status="passed"),
    ]
    return SubmissionResult(submission=name, tests=tests, source=f"{name}/")


@pytest.fixture
def out(tmp_path):
    folder = tmp_path / "out"
    for name, passed in (("alice", True), ("bob", False)):
        feedback.write_submission(folder, _result(name, passed), lesson=DAY13)
    classreport.write_class(folder, lesson=DAY13)
    return folder


def _write(path: Path, *rows: str) -> None:
    path.write_text("submission,test,points,comment,by,at\n" + "".join(r + "\n" for r in rows), encoding="utf-8")


def _grades(out: Path) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


def test_a_test_override_reaches_every_file(out):
    _write(out / "overrides.csv",
           "alice,deliverables.analysis,0.5,the analysis restates the handout,ta-jo,2026-12-02T10:00:00+00:00")
    classreport.write_class(out, lesson=DAY13)
    row = _grades(out)["alice"]
    assert row["total"] == "9.5" and row["deliverables"] == "2.5"
    assert row["overrides"] == "deliverables.analysis 2->0.5"
    assert list(_grades(out)["alice"])[-5:-2] == ["status", "source", "overrides"]
    text = (out / "alice" / "feedback.md").read_text()
    assert "**Score: 9.5 / 11**" in text
    assert "## Reviewed by your instructor" in text and "the analysis restates the handout" in text
    results = json.loads((out / "alice" / "results.json").read_text())
    assert results["score"] == 9.5
    analysis = next(t for t in results["tests"] if "deliverables.analysis" in t["name"])
    assert analysis["score"] == 0.5 and "Reviewed by ta-jo: the analysis restates the handout" in analysis["output"]
    assert results["extra_data"]["overrides"][0]["automated"] == 2
    page = (out / "report.html").read_text()
    assert "Reviewed by hand" in page and "the analysis restates the handout" in page
    # The record stays the automated result: removing the row restores the grade.
    assert json.loads((out / "alice" / "record.json").read_text())["total"] == 11
    (out / "overrides.csv").unlink()
    classreport.write_class(out, lesson=DAY13)
    assert _grades(out)["alice"]["total"] == "11" and "Reviewed" not in (out / "alice" / "feedback.md").read_text()


def test_most_specific_wins_last_row_wins_and_star_adds(out):
    _write(out / "overrides.csv",
           "bob,self_attention,5,first look,ta",
           "bob,self_attention,6,second look,ta",   # same key: the last row wins
           "bob,self_attention.causal_mask,1,,ta",  # its own row beats the part's
           "bob,*,-1.5,late without an extension,lead",
           "bob,similarity:alice,,talked to both: independent work,lead")
    classreport.write_class(out, lesson=DAY13)
    row = _grades(out)["bob"]
    # self_attention: causal_mask 1 (own row) + worked_values gets the part's 6; deliverables 4; bonus -1.5
    assert row["self_attention"] == "7" and row["total"] == "9.5"
    assert row["overrides"] == ("self_attention 3->6; self_attention.causal_mask 3->1; "
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
    ("zed,deliverables.analysis,1,,ta", "no submission named 'zed'"),
    ("alice,deliverables.nothing,1,,ta", "has no test or part 'deliverables.nothing'"),
    ("alice,deliverables.analysis,3,,ta", "3 points for alice deliverables.analysis is outside 0..2"),
    ("alice,deliverables.analysis,lots,,ta", "points 'lots' is not a number"),
])
def test_an_unknown_or_impossible_row_is_an_error_naming_it(out, line, named):
    _write(out / "overrides.csv", line)
    before = (out / "grades.csv").read_text()
    with pytest.raises(overrides.OverrideError, match=named):
        classreport.write_class(out, lesson=DAY13)
    assert (out / "grades.csv").read_text() == before


def test_grade_refuses_an_unknown_name_before_grading(out, tmp_path, capsys):
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    _write(out / "overrides.csv", "zed,*,1,,ta")
    assert run.main(submissions=subs, out=out, lesson=DAY13) == 2
    assert "no submission named 'zed'" in capsys.readouterr().err


def test_merge_applies_the_merged_folders_file_and_another_one(out, tmp_path):
    merged = tmp_path / "merged"
    merged.mkdir()
    _write(merged / "overrides.csv", "bob,*,2,bonus for the write-up,ta")
    assert merge(shards=[str(out)], out=str(merged), lesson=DAY13) == 0
    assert _grades(merged)["bob"]["total"] == "9"
    elsewhere = tmp_path / "decisions.csv"
    _write(elsewhere, "bob,deliverables,0,,ta")
    assert merge(shards=[str(out)], out=str(merged), overrides_path=str(elsewhere), lesson=DAY13) == 0
    rows = _grades(merged)
    assert rows["bob"]["total"] == "3" and rows["bob"]["deliverables"] == "0"
    _write(elsewhere, "nobody,*,1,,ta")
    assert merge(shards=[str(out)], out=str(merged), overrides_path=str(elsewhere), lesson=DAY13) == 2


def test_append_writes_one_plain_line_per_decision(tmp_path):
    path = tmp_path / "o.csv"
    overrides.append(path, {"submission": "alice", "test": "*", "points": 2.0, "comment": "a\nb, \"c\"", "by": "=cmd"})
    overrides.append(path, {"submission": "bob", "test": "deliverables", "points": None, "comment": "", "by": "ta"})
    rows = overrides.read(path)
    assert [(r.submission, r.test, r.points, r.comment, r.by) for r in rows] == [
        ("alice", "*", 2.0, 'a b, "c"', "'=cmd"), ("bob", "deliverables", None, "", "ta")]
    assert all(r.at for r in rows)


def test_points_a_person_reads_have_at_most_two_decimals_in_every_file(out):
    # 5 points over tests worth 4 and 3 gives shares of 2.857142...; a written 1.2345 bonus.
    _write(out / "overrides.csv", "bob,self_attention,5,,,", "alice,*,-1.2345,,,")
    classreport.write_class(out, lesson=DAY13)
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
    assert _grades(out)["bob"]["self_attention"] == "5" and _grades(out)["alice"]["total"] == "9.77"


def test_a_persons_comment_is_data_and_follows_the_rubrics_words():
    """A comment on a test is kept beside it ({"by", "comment"}), never written into what the test said:
    the student reads the test's output, the rubric's words for it, then the person's comment."""
    from grader.results import feedback
    from grader.results.records import SubmissionResult, TestResult

    result = SubmissionResult(submission="alice", tests=[
        TestResult(name="deliverables.analysis", component="deliverables", score=0, max_score=2, status="failed",
                   output="the analysis is 12 words long", advice="hint")])
    row = overrides.Override(submission="alice", test="deliverables.analysis", points=1.0,
                             comment="fair try", by="ta-jo")
    changed = overrides.apply(result, {"deliverables.analysis": row})
    assert changed.tests[0].output == "the analysis is 12 words long"
    assert changed.tests[0].review == {"by": "ta-jo", "comment": "fair try"}
    words = feedback.Words(tests={"deliverables.analysis": {"hint": "Write 4-5 lines."}})
    assert feedback.student_output(changed.tests[0], words) == \
        "the analysis is 12 words long\n\nHint: Write 4-5 lines.\n\nReviewed by ta-jo: fair try"
    assert result.tests[0].review == {}  # the record is as graded

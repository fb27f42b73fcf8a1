"""Deadlines: a roster line's own deadline (an extension), the rubric's late policy (grace, penalty
per day, last day), lateness from the push time where the roster has one, else the commit time;
late_days and penalty in grades.csv and a line in the feedback. Without a policy nothing changes."""
from dataclasses import replace
import csv
import io
import json
from pathlib import Path

import pytest

from grader.results import classreport

from grader.intake import collect

from grader.results import feedback

from grader.judging import late

from grader.admin import regrade
from grader.results.records import SubmissionResult
from grader.results.records import TestResult as Outcome
from test_collect import LESSON, StudentRepo, manifest  # LESSON: the toy's (its rubric has no late policy)

DUE = "2026-02-10T12:00:00+00:00"
POLICY = "\n[late]\ngrace_minutes = 30\npenalty_per_day = 10\nmax_days = 3\n"


@pytest.fixture
def rubric(tmp_path):
    path = tmp_path / "rubric.toml"
    path.write_text(regrade.rubric_path(lesson=LESSON).read_text() + POLICY)
    return path


def test_collect_takes_late_work_up_to_the_last_day_and_measures_it(tmp_path, rubric):
    ann, bea, cyd = (StudentRepo(tmp_path, n) for n in ("ann", "bea", "cyd"))
    ann.commit("2026-02-10T12:20:00+00:00", {"a.py": "# within the grace\n"})
    bea.commit("2026-02-11T18:00:00+00:00", {"a.py": "# a day and a quarter late\n"})
    cyd.commit("2026-02-09T09:00:00+00:00", {"a.py": "# on time\n"})
    cyd.commit("2026-02-20T09:00:00+00:00", {"a.py": "# after the last day\n"})
    dan = StudentRepo(tmp_path, "dan")
    dan.commit("2026-02-12T09:00:00+00:00", {"a.py": "# with an extension\n"})
    roster = tmp_path / "roster.txt"
    roster.write_text(f"ann {ann.bare}\nbea {bea.bare}\ncyd {cyd.bare}\ndan {dan.bare} 2026-02-13T12:00:00+00:00\n")
    out = tmp_path / "subs"
    assert collect.main(roster=str(roster), out=str(out), deadline=DUE, rubric=str(rubric), lesson=LESSON) == 0
    rows = manifest(out)
    assert {n: rows[n]["late_days"] for n in rows} == {"ann": "0", "bea": "2", "cyd": "0", "dan": "0"}
    assert (out / "cyd" / "a.py").read_text() == "# on time\n"
    assert rows["dan"]["deadline"] == "2026-02-13T12:00:00+00:00"
    assert rows["bea"]["late_basis"].startswith("commit time (written by the student's machine)")
    # Without a policy: the deadline cuts as before, and no lateness is recorded.
    plain = tmp_path / "plain"
    no_policy = tmp_path / "plain.toml"
    no_policy.write_text(regrade.rubric_path(lesson=LESSON).read_text())
    assert collect.main(roster=str(roster), out=str(plain), deadline=DUE, rubric=str(no_policy), lesson=LESSON) == 0
    rows = manifest(plain)
    assert rows["bea"]["status"] == "no commit before the deadline" and rows["ann"]["late_days"] == ""


def test_a_classroom_push_time_is_preferred_to_the_commit_time(tmp_path, rubric):
    eve = StudentRepo(tmp_path, "eve")
    eve.commit("2026-02-10T11:00:00+00:00", {"a.py": "# backdated\n"})
    export = tmp_path / "export.csv"
    export.write_text("github_username,student_repository_url,submission_timestamp\n"
                      f"eve,{eve.bare},2026-02-12 13:00:00 UTC\n")
    out = tmp_path / "subs"
    assert collect.main(roster=str(export), out=str(out), deadline=DUE, rubric=str(rubric), lesson=LESSON) == 0
    row = manifest(out)["eve"]
    assert row["late_days"] == "3" and row["late_basis"] == "push time"


def _record(name: str) -> SubmissionResult:
    return SubmissionResult(submission=name, source=f"{name}/", tests=[
        Outcome(name="activations.reference", component="activations", score=40, max_score=50, status="failed"),
        Outcome(name="classifier.reference", component="classifier", score=50, max_score=50, status="passed")])


def _grades(out: Path) -> dict:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


def test_the_penalty_reaches_the_gradebook_and_the_feedback(tmp_path, rubric):
    out = tmp_path / "out"
    for name in ("ann", "bea", "cyd"):
        feedback.write_submission(out, _record(name), lesson=LESSON)
    collected = tmp_path / "collected.csv"
    collected.write_text("name,source,commit,committed,status,deadline,late_days,late_basis\n"
                         f"ann,x,c,t,ok,{DUE},0,push time\nbea,x,c,t,ok,{DUE},2,commit time (written by the "
                         f"student's machine)\ncyd,x,c,t,ok,{DUE},9,push time\n")
    late.write_lateness(out, collected, {"ann", "bea", "cyd"})
    classreport.write_class(out, lesson=replace(LESSON, rubric_path=rubric))  # the late policy is the lesson's
    rows = _grades(out)
    assert list(rows["ann"])[-3:] == ["overrides", "late_days", "penalty"]
    assert (rows["ann"]["late_days"], rows["ann"]["penalty"], rows["ann"]["total"]) == ("0", "0", "90")
    assert (rows["bea"]["late_days"], rows["bea"]["penalty"], rows["bea"]["total"]) == ("2", "20", "70")
    assert rows["cyd"]["penalty"] == "30"  # capped at max_days
    text = (out / "bea" / "feedback.md").read_text()
    assert "Handed in 2 days late" in text and "commit time" in text and "-20 points" in text
    assert json.loads((out / "bea" / "results.json").read_text())["score"] == 70


def test_a_penalty_takes_at_most_what_the_submission_has(tmp_path, rubric):
    """Held-out s61: a late submission with 0 points got -20/100 in grades.csv, the report and the LMS export."""
    out = tmp_path / "out"
    for name, earned in (("dee", 0), ("eve", 15)):
        record = _record(name)
        record.tests[0].score, record.tests[1].score = 0, earned
        feedback.write_submission(out, record, lesson=LESSON)
    collected = tmp_path / "collected.csv"
    collected.write_text("name,source,commit,committed,status,deadline,late_days,late_basis\n"
                         f"dee,x,c,t,ok,{DUE},2,push time\neve,x,c,t,ok,{DUE},2,push time\n")
    late.write_lateness(out, collected, {"dee", "eve"})
    classreport.write_class(out, lesson=replace(LESSON, rubric_path=rubric))
    rows = _grades(out)
    assert (rows["dee"]["penalty"], rows["dee"]["total"]) == ("0", "0")
    assert (rows["eve"]["penalty"], rows["eve"]["total"]) == ("15", "0")
    assert json.loads((out / "dee" / "results.json").read_text())["score"] == 0


def test_late_days_follow_the_rubrics_grace_as_it_is_now(tmp_path, rubric):
    """Held-out s61: `collect` counted a hand-in 20 minutes after the deadline as a day late under 15 minutes' grace;
    the rubric's grace then became 30 minutes, and the late day stayed. Late days are measured again from the
    times collect copied, with the policy as it is."""
    out = tmp_path / "out"
    feedback.write_submission(out, _record("dev"), lesson=LESSON)
    collected = tmp_path / "collected.csv"
    collected.write_text("name,source,commit,committed,status,deadline,late_days,late_basis,handed_in\n"
                         f"dev,x,c,t,ok,{DUE},1,push time,2026-02-10T12:20:00+00:00\n")
    late.write_lateness(out, collected, {"dev"})
    classreport.write_class(out, lesson=replace(LESSON, rubric_path=rubric))  # grace_minutes = 30
    row = _grades(out)["dev"]
    assert (row["late_days"], row["penalty"], row["total"]) == ("0", "0", "90"), row


def test_without_a_policy_nothing_changes(tmp_path):
    out = tmp_path / "out"
    feedback.write_submission(out, _record("bea"), lesson=LESSON)
    (out / "bea" / late.FILE).write_text(json.dumps({"late_days": 2, "deadline": DUE, "measured_from": "x"}))
    classreport.write_class(out, lesson=LESSON)
    row = _grades(out)["bea"]
    assert (row["total"], row["late_days"], row["penalty"]) == ("90", "", "")
    assert "late" not in (out / "bea" / "feedback.md").read_text().lower()


def test_a_penalty_is_in_hundredths_of_a_point():
    policy = late.Policy(grace_minutes=0, penalty_per_day=7.5, max_days=3)
    assert late.penalty(1, 84.4443, policy) == 6.33 and late.penalty(5, 100 / 3, policy) == 7.5

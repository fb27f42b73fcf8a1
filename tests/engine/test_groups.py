"""Pair work: a roster says who handed in what. A group's one submission gives each member a row in
grades.csv and the export, with the group's points and the member's own lateness (an extension counts);
partners who each hand in the pair's work are never flagged as similar to each other."""
from __future__ import annotations

from dataclasses import replace

import csv
import io
import json
import shutil
import sys
from pathlib import Path

from grader.results import classreport

from grader.admin import export

from grader.results import feedback

from grader.admin import regrade

from grader.admin import similarity

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import make_submission  # noqa: E402
from report_records import LESSON, make_record  # noqa: E402

POLICY = "\n[late]\ngrace_minutes = 0\npenalty_per_day = 10\nmax_days = 3\n"
DUE = "2026-02-10T12:00:00+00:00"
EXTENDED = "2026-02-12T12:00:00+00:00"
ROSTER = f"""identifier,submission,name,group,deadline
bo@uni.edu,team7,Bo Chen,team7,{DUE}
cy@uni.edu,team7,Cy Diaz,team7,{EXTENDED}
di@uni.edu,di,Di Eze,,{DUE}
"""


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_a_pair_gets_a_row_each_with_its_own_late_days(tmp_path, monkeypatch):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(regrade.rubric_path(lesson=LESSON).read_text() + POLICY)
    out = tmp_path / "out"
    feedback.write_submission(out, make_record("team7"), lesson=LESSON)
    feedback.write_submission(out, make_record("di"), lesson=LESSON)
    # collect measured the group's push 20 hours after the class deadline
    (out / "team7" / "late.json").write_text(json.dumps(
        {"late_days": 1, "deadline": DUE, "measured_from": "push time", "handed_in": "2026-02-11T08:00:00+00:00"}))
    (out / "roster.csv").write_text(ROSTER)
    classreport.write_class(out, lesson=replace(LESSON, rubric_path=rubric))  # the late policy is the lesson's
    grades = {r["student"]: r for r in _rows((out / "grades.csv").read_text())}
    assert set(grades) == {"bo@uni.edu", "cy@uni.edu", "di@uni.edu"}
    bo, cy = grades["bo@uni.edu"], grades["cy@uni.edu"]
    assert bo["submission"] == cy["submission"] == "team7" and bo["group"] == cy["group"] == "team7"
    assert (bo["late_days"], bo["penalty"], bo["total"]) == ("1", "1", "9")
    assert (cy["late_days"], cy["penalty"], cy["total"]) == ("0", "0", "10")  # the extension
    assert grades["di@uni.edu"]["late_days"] == ""  # on time, no lateness recorded
    assert export.main(out=str(out), format="csv", lesson=LESSON) == 0  # the roster in OUT is used
    exported = {r["identity"]: r for r in _rows((out / "export-csv.csv").read_text())}
    assert (exported["bo@uni.edu"]["total"], exported["cy@uni.edu"]["total"]) == ("9", "10")
    assert exported["cy@uni.edu"]["late_days"] == "0"


def test_partners_are_never_flagged_as_similar_but_others_are(tmp_path):
    """Submissions handing in the same code are one group and one row: a row that stands for partners of
    one group alone is never flagged, and one with a classmate besides is, naming that classmate."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    for name in ("bo", "cy", "zed"):  # the same code three times: bo and cy are partners
        make_submission(subs / name, solutions=LESSON.solutions)
    out.mkdir()
    (out / "roster.csv").write_text("identifier,submission,group\nbo@x,bo,duo\ncy@x,cy,duo\nzed@x,zed,\n")

    def compared() -> list[dict]:
        assert similarity.main(submissions=str(subs), out=str(out), lesson=LESSON) == 0
        return _rows((out / "similarity.csv").read_text())

    flagged = [r for r in compared() if r["flagged"] == "yes"]
    assert [(r["a"], r["b"], r["members"]) for r in flagged] == [("bo", "zed", "bo cy zed")]
    assert "bo, cy are partners in group duo" in flagged[0]["detail"]
    assert {n: {p["other"] for p in similarity.flagged_pairs(out, n)} for n in ("bo", "cy", "zed")} == \
        {"bo": {"zed"}, "cy": {"bo"}, "zed": {"bo"}}
    # zed's own code beside the same files: a pair between zed and the partners' group, whose first member
    # stands for both partners, so each of them sees it.
    make_submission(subs / "zed", {"extra.py": EXTRA}, solutions=LESSON.solutions)
    rows = compared()
    assert [(r["a"], r["b"], r["flagged"], r["members"]) for r in rows if r["kind"] == "code"] == [
        ("bo", "zed", "yes", ""), ("bo", "cy", "no", "bo cy")]
    assert "bo stands for the 2 submissions" in rows[0]["detail"]
    assert "partners in group duo: their pair work, not evidence" in rows[1]["detail"]
    assert {n: {p["other"] for p in similarity.flagged_pairs(out, n)} for n in ("bo", "cy", "zed")} == \
        {"bo": {"zed"}, "cy": {"zed"}, "zed": {"bo"}}
    assert "code: bo, cy, zed (each paired with zed:" in (out / "similarity.html").read_text()
    # The partners alone: nothing flagged, and the row says why.
    shutil.rmtree(subs / "zed")
    assert [(r["a"], r["b"], r["flagged"]) for r in compared()] == [("bo", "cy", "no")]


EXTRA = """
    def running_mean(values, window):
        totals, out = 0.0, []
        for index, value in enumerate(values):
            totals += value
            if index >= window:
                totals -= values[index - window]
            out.append(totals / min(index + 1, window))
        return out
"""


def test_a_roster_that_cannot_be_read_stops_grade_saying_where(tmp_path):
    from grader.running import grade as run

    subs, out = tmp_path / "subs", tmp_path / "out"
    make_submission(subs / "bo", solutions=LESSON.solutions)
    bad = tmp_path / "roster.csv"
    bad.write_text("github_username\nbo\n")
    assert run.main(submissions=str(subs), out=str(out), roster=str(bad), lesson=LESSON) == run.EXIT_USAGE
    assert not (out / "grades.csv").exists()


def test_the_report_shows_the_groups(tmp_path, monkeypatch):
    out = tmp_path / "out"
    feedback.write_submission(out, make_record("team7"), lesson=LESSON)
    (out / "roster.csv").write_text(ROSTER)
    classreport.write_class(out, lesson=LESSON)
    for page in ("summary.md", "report.html"):
        text = (out / page).read_text()
        assert "Groups (roster.csv)" in text and "Bo Chen (team7), Cy Diaz (team7)" in text


def test_similarity_after_merge_rewrites_the_merged_report(tmp_path):
    """The instructor workflow merges shards, then compares the whole class: the report it uploads
    must carry the similarity section, not "No similarity report"."""
    from grader.admin.merge import merge

    subs, shard1, shard2, out = (tmp_path / n for n in ("subs", "s1", "s2", "gradebook"))
    for name in ("bo", "zed"):
        make_submission(subs / name, solutions=LESSON.solutions)
    feedback.write_submission(shard1, make_record("bo"), lesson=LESSON)
    feedback.write_submission(shard2, make_record("zed"), lesson=LESSON)
    assert merge(shards=[str(shard1), str(shard2)], out=str(out), lesson=LESSON) == 0
    assert "No similarity report" in (out / "report.html").read_text()
    from grader.__main__ import main as cli

    assert cli(["similarity", str(subs), "--out", str(out), "--lesson", LESSON.ref]) == 0
    report = (out / "report.html").read_text()
    assert "No similarity report" not in report and "similarity.html" in report


def test_the_instructor_workflow_compares_the_class_after_merging():
    import yaml

    from grader.release import student_release as release

    data = yaml.safe_load((release.TEMPLATES / "instructor-grade.yml").read_text())
    runs = [s.get("run", "") for s in data["jobs"]["merge"]["steps"]]
    merged = next(i for i, r in enumerate(runs) if "grader merge" in r)
    compared = next(i for i, r in enumerate(runs) if "grader similarity" in r)
    assert compared > merged and "--out gradebook" in runs[compared] and "--out gradebook" in runs[merged]
    downloads = [s["with"]["name"] for s in data["jobs"]["merge"]["steps"]
                 if s.get("uses", "").startswith("actions/download-artifact@") and "name" in s.get("with", {})]
    assert "submissions" in downloads


def test_a_students_own_deadline_is_the_one_every_output_states(tmp_path):
    """An extension in the roster: the student's feedback, results.json and the gradebook state the same lateness.
    A group whose members' deadlines differ is measured, where the members share an output, against the latest,
    and says so; each member's gradebook row keeps their own."""
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(regrade.rubric_path(lesson=LESSON).read_text() + POLICY)
    out = tmp_path / "out"
    handed_in = "2026-02-11T08:00:00+00:00"  # after the class deadline, before the extension
    for name in ("team7", "ed"):
        feedback.write_submission(out, make_record(name), lesson=LESSON)
        (out / name / "late.json").write_text(json.dumps(
            {"late_days": 1, "deadline": DUE, "measured_from": "push time", "handed_in": handed_in}))
    (out / "roster.csv").write_text(ROSTER + f"ed@uni.edu,ed,Ed Fox,,{EXTENDED}\n")
    classreport.write_class(out, lesson=replace(LESSON, rubric_path=rubric))
    grades = {r["student"]: r for r in _rows((out / "grades.csv").read_text())}
    assert (grades["ed@uni.edu"]["late_days"], grades["ed@uni.edu"]["total"]) == ("0", "10")
    ed = (out / "ed" / "feedback.md").read_text(encoding="utf-8")
    assert f"Handed in on time (deadline {EXTENDED})" in ed and "different deadlines" not in ed
    assert json.loads((out / "ed" / "results.json").read_text())["score"] == 10
    team = (out / "team7" / "feedback.md").read_text(encoding="utf-8")
    assert "Handed in on time. Your group's members have different deadlines" in team and EXTENDED not in team
    assert (grades["bo@uni.edu"]["late_days"], grades["cy@uni.edu"]["late_days"]) == ("1", "0")


def test_a_roster_student_with_nothing_graded_has_a_row_at_zero(tmp_path):
    out = tmp_path / "out"
    feedback.write_submission(out, make_record("team7"), lesson=LESSON)
    (out / "roster.csv").write_text(ROSTER, encoding="utf-8")  # di handed nothing in
    classreport.write_class(out, lesson=LESSON)
    grades = {r["student"]: r for r in _rows((out / "grades.csv").read_text())}
    assert set(grades) == {"bo@uni.edu", "cy@uni.edu", "di@uni.edu"}
    di = grades["di@uni.edu"]
    assert (di["submission"], di["total"], di["status"]) == ("di", "0", "no submission")
    assert float(di["max_total"]) == sum(LESSON.points.values()) == float(grades["bo@uni.edu"]["max_total"])


def test_a_member_without_an_extension_keeps_the_class_deadline_and_no_file_shows_a_partners(tmp_path):
    """Only Cy has an extension: Bo's row is late against the class deadline, not Cy's, and the pair's shared feedback
    names neither deadline (an extension may be a confidential accommodation)."""
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(regrade.rubric_path(lesson=LESSON).read_text() + POLICY)
    out = tmp_path / "out"
    feedback.write_submission(out, make_record("team7"), lesson=LESSON)
    (out / "team7" / "late.json").write_text(json.dumps(
        {"late_days": 1, "deadline": DUE, "measured_from": "push time", "handed_in": "2026-02-11T08:00:00+00:00"}))
    (out / "roster.csv").write_text("identifier,submission,name,group,deadline\n"
                                    "bo@uni.edu,team7,Bo Chen,team7,\n"
                                    f"cy@uni.edu,team7,Cy Diaz,team7,{EXTENDED}\n")
    lesson = replace(LESSON, rubric_path=rubric)
    classreport.write_class(out, lesson=lesson)
    grades = {r["student"]: r for r in _rows((out / "grades.csv").read_text())}
    assert (grades["bo@uni.edu"]["late_days"], grades["bo@uni.edu"]["total"]) == ("1", "9")
    assert (grades["cy@uni.edu"]["late_days"], grades["cy@uni.edu"]["total"]) == ("0", "10")
    assert export.main(out=str(out), format="csv", lesson=lesson) == 0
    exported = {r["identity"]: r for r in _rows((out / "export-csv.csv").read_text())}
    assert (exported["bo@uni.edu"]["total"], exported["cy@uni.edu"]["total"]) == ("9", "10")
    for name in ("feedback.md", "feedback.html", "results.json"):
        shared = (out / "team7" / name).read_text(encoding="utf-8")
        assert EXTENDED not in shared and "2026-02-12" not in shared, name
    assert "members have different deadlines" in (out / "team7" / "feedback.md").read_text(encoding="utf-8")


def test_the_staff_are_told_of_rows_no_roster_names_and_of_a_group_with_two_graded_submissions():
    from grader.intake import roster

    people = roster.Roster([roster.Student("bo@uni.edu", submission="team7", group="team7"),
                            roster.Student("cy@uni.edu", submission="cy_alone", group="team7"),
                            roster.Student("di@uni.edu", submission="di")])
    said = roster.warnings(people, ["cy_alone", "di", "stray", "team7"])
    assert said[0].startswith("graded, named by no roster row: stray (")
    assert said[1].startswith("group team7 has 2 graded submissions (cy_alone, team7)")
    assert roster.warnings(people, ["team7", "di"]) == []

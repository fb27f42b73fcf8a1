"""grader/admin/export.py: the final grades in the columns each school gradebook's import reads, keyed by the
roster's identity; a pair's submission gives each partner a row; nobody is dropped on either side."""
from __future__ import annotations

from dataclasses import replace

import csv
import io
import json
import sys
from pathlib import Path

import pytest

from grader.results import classreport

from grader.admin import export

from grader.results import feedback

from grader.admin import regrade

from grader.intake import roster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from report_records import LESSON, make_record  # noqa: E402

POLICY = "\n[late]\ngrace_minutes = 0\npenalty_per_day = 10\nmax_days = 3\n"
ROSTER = """identifier,github_username,name,section,group
ada@uni.edu,ada,Ada Lovelace,A,
bo@uni.edu,pair_bo_cy,Bo Chen,A,team7
cy@uni.edu,,Cy Diaz,B,team7
zed@uni.edu,zed,Zed Null,B,
=cmd@uni.edu,=cmd,=HYPERLINK(1),A,
"""


@pytest.fixture
def graded(tmp_path, monkeypatch):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(regrade.rubric_path(lesson=LESSON).read_text() + POLICY)
    out = tmp_path / "out"
    for record in (make_record("ada"), make_record("pair_bo_cy", buggy=True), make_record("stray"),
                   make_record("=cmd")):
        feedback.write_submission(out, record, lesson=LESSON)
    (out / "pair_bo_cy" / "late.json").write_text(json.dumps({"late_days": 1, "deadline": "2026-02-10T12:00:00+00:00"}))
    (out / "overrides.csv").write_text("submission,test,points,comment,staff_note,by,at\n"
                                       "ada,*,-1,,copied the README template,ta,\n"
                                       "=cmd,integrity,,looked at its flags,,ta,\n")
    classreport.write_class(out, lesson=replace(LESSON, rubric_path=rubric))  # the late policy is the lesson's
    (tmp_path / "roster.csv").write_text(ROSTER)
    return out, tmp_path / "roster.csv"


def _read(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text())))


def _grades(out: Path) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


def test_each_format_has_its_documented_columns_and_the_final_totals(graded, capsys):
    out, people = graded
    final = _grades(out)
    assert final["ada"]["total"] == "9"  # the override applied
    assert float(final["pair_bo_cy"]["penalty"]) > 0  # the late penalty applied
    for fmt in export.FORMATS:
        assert export.main(out=str(out), format=fmt, roster=str(people), lesson=LESSON) == 0
    canvas = _read(out / "export-canvas.csv")
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Toy lesson"]
    assert canvas[1][0] == "Points Possible" and canvas[1][5] == "10"
    body = {r[2]: r for r in canvas[2:]}
    assert body["ada@uni.edu"] == ["Lovelace, Ada", "", "ada@uni.edu", "ada@uni.edu", "A", "9"]
    # the pair: one submission, a row for each partner, the group's (late) grade on both
    assert body["bo@uni.edu"][5] == body["cy@uni.edu"][5] == final["pair_bo_cy"]["total"]
    assert body["cy@uni.edu"][4] == "B"
    assert body["zed@uni.edu"][5] == ""  # on the roster, nothing graded: kept, empty
    assert body["stray"][5] == final["stray"]["total"]  # graded, on no roster row: kept by its name
    moodle = _read(out / "export-moodle.csv")
    assert moodle[0] == ["Email address", "ID number", "First name", "Last name", "Toy lesson", "Toy lesson (feedback)"]
    rows = {r[1]: r for r in moodle[1:]}
    assert rows["bo@uni.edu"][4] == final["pair_bo_cy"]["total"] and "1 day late" in rows["bo@uni.edu"][5]
    assert "copied" not in (out / "export-moodle.csv").read_text(), "a staff note never leaves in an export"
    assert rows["ada@uni.edu"][5] == "reviewed by hand"
    # A look at the integrity flags alone is the staff's: the column a student reads does not count it.
    assert rows["'=cmd@uni.edu"][5] == "" and "integrity reviewed" in final["'=cmd"]["overrides"]
    blackboard = _read(out / "export-blackboard.csv")
    assert blackboard[0] == ["Last Name", "First Name", "Username", "Student ID", "Toy lesson [Total Pts: 10 Score]"]
    assert ["Lovelace", "Ada", "ada@uni.edu", "ada@uni.edu", "9"] in blackboard
    plain = {r["identity"]: r for r in csv.DictReader(io.StringIO((out / "export-csv.csv").read_text()))}
    assert plain["cy@uni.edu"]["group"] == "team7" and plain["cy@uni.edu"]["late_days"] == "1"
    assert plain["zed@uni.edu"]["status"] == "no submission"
    err = capsys.readouterr().err
    assert "not graded: zed@uni.edu" in err and "not on the roster: stray" in err


def test_a_formula_in_a_roster_or_submission_name_stays_text(graded):
    out, people = graded
    assert export.main(out=str(out), format="csv", roster=str(people), lesson=LESSON) == 0
    text = (out / "export-csv.csv").read_text()
    assert "'=cmd@uni.edu" in text and "'=HYPERLINK(1)" in text
    assert not any(cell.startswith("=") for row in _read(out / "export-csv.csv") for cell in row)


def test_without_a_roster_the_export_says_so_and_keys_by_submission(graded, capsys):
    out, _ = graded
    assert export.main(out=str(out), format="canvas", lesson=LESSON) == 0
    assert "no roster given" in capsys.readouterr().err
    rows = _read(out / "export-canvas.csv")[2:]
    assert {r[2] for r in rows} == {"ada", "pair_bo_cy", "stray", "'=cmd"}


def test_parts_on_request(graded):
    out, people = graded
    assert export.main(out=str(out), format="csv", roster=str(people), parts=True, lesson=LESSON) == 0
    header = _read(out / "export-csv.csv")[0]
    assert header[6:8] == list(LESSON.components) == ["activations", "classifier"]


def test_a_roster_without_identity_or_with_a_twice_listed_student_says_what_to_write(tmp_path):
    bad = tmp_path / "r.csv"
    bad.write_text("github_username,name\nada,Ada\n")
    with pytest.raises(roster.RosterError, match="identifier"):
        roster.read(bad)
    bad.write_text("identifier,github_username\nada@x,ada\nADA@x,ada2\n")
    with pytest.raises(roster.RosterError, match="listed twice"):
        roster.read(bad)


def test_a_classroom_roster_works_as_it_is(tmp_path):
    path = tmp_path / "classroom_roster.csv"
    path.write_text('"identifier","github_username","github_id","name"\n"s123","ada-l","42","Ada Lovelace"\n'
                    '"s124","","",""\n')
    people = roster.read(path)
    assert [(s.identity, s.submission, s.name) for s in people.students] == [
        ("s123", "ada-l", "Ada Lovelace"), ("s124", "s124", "")]


def test_an_unknown_grading_folder_says_to_grade_first(tmp_path, capsys):
    assert export.main(out=str(tmp_path), format="csv", lesson=LESSON) == 2
    assert "grade the class first" in capsys.readouterr().err

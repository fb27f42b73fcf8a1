"""`grader export OUT --format canvas|moodle|blackboard|csv`: the final grades, keyed by who each
student is in the school's gradebook, in the columns that gradebook's own import reads.

The grades are OUT/grades.csv's (overrides, the capped bonus and the late penalty already applied:
grader/judging/totals.py), so the export can never say another total than the class files. A roster
(grader/intake/roster.py) maps submission names to students; a submission shared by a group gives each member a
row with the group's grade. Students on the roster with no graded submission, and graded submissions no
roster row claims, are listed on the console and kept in the file (never dropped): the first with an
empty grade, the second keyed by their submission name. Without a roster the export says so and keys
every row by its submission name.

The columns, from each system's import documentation:
    canvas      Gradebook import: "Student", "ID", "SIS User ID", "SIS Login ID", "Section", then one
                column per assignment, named by its title; a second row "Points Possible" gives its
                maximum. Canvas matches students on ID, SIS User ID or SIS Login ID (ID, Canvas's own
                number, is left empty: the roster does not know it).
    moodle      Grader report CSV import: one column per identifier the import can map from ("Email
                address", "ID number"), the grade item's column, and a feedback column beside it.
    blackboard  Grade Center upload: "Last Name", "First Name", "Username" (the key Blackboard matches
                students on), "Student ID", then the column "<title> [Total Pts: <max> Score]"; a column
                with no "|<id>" after its name is created as a new Grade Center column.
    csv         every field: identity, name, submission, group, total, max_total, late days, penalty,
                status (and each part's points with --parts).
"""
from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from grader.admin import overrides
from grader.intake import roster as roster_module
from grader.results.storage import write_atomic
from grader.results.classreport import NOT_HANDED_IN

FORMATS = ("canvas", "moodle", "blackboard", "csv")


def _grades(out_dir: Path) -> tuple[list[dict], list[str]]:
    path = out_dir / "grades.csv"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        raise FileNotFoundError(f"{path} does not exist: grade the class first (python -m grader grade "
                                f"SUBMISSIONS --out {out_dir})") from None
    reader = csv.DictReader(io.StringIO(text))
    rows = [{k: (v[1:] if v[:1] == "'" and v[1:2] in ("=", "+", "-", "@") else v) for k, v in r.items()}
            for r in reader]
    return rows, list(reader.fieldnames or [])


def _parts(fields: list[str]) -> list[str]:
    """The per-part columns of grades.csv: those between max_total and status."""
    try:
        return fields[fields.index("max_total") + 1: fields.index("status")]
    except ValueError:
        return []


def rows_for(grades: list[dict], roster: roster_module.Roster | None) -> tuple[list[dict], list[str], list[str]]:
    """One row per student: (rows, roster students with no grade, graded submissions with no student)."""
    if roster is None:
        return [{"student": None, "grade": g} for g in grades], [], []
    by_name = {g["submission"].casefold(): g for g in grades}
    # grades.csv made with this roster has a row per student, with that student's own lateness.
    by_student = {g["student"].casefold(): g for g in grades if g.get("student")}
    rows, missing = [], []
    for student in roster.students:
        grade = by_student.get(student.identity.casefold()) or by_name.get(student.submission.casefold())
        if grade is not None and grade.get("status") == NOT_HANDED_IN:
            grade = None  # the gradebook's row at 0 for a roster student: left blank in the school's, and said
        if grade is None:
            missing.append(f"{student.identity} ({student.name or 'no name'}): no graded submission "
                           f"named {student.submission!r}")
        rows.append({"student": student, "grade": grade})
    claimed = {s.submission.casefold() for s in roster.students}
    strays = [g for g in grades if g["submission"].casefold() not in claimed and not g.get("student")]
    unclaimed = [g["submission"] for g in strays]
    rows += [{"student": None, "grade": g} for g in strays]
    return rows, missing, unclaimed


def _who(row: dict) -> dict[str, str]:
    s, g = row["student"], row["grade"]
    if s is None:  # keyed by the submission's own name
        name = g["submission"]
        return {"identity": name, "name": name, "first": "", "last": name, "login": name, "email": "",
                "section": "", "submission": name, "group": ""}
    last = s.last_name or (s.name.rsplit(" ", 1)[-1] if s.name else s.identity)
    first = s.first_name or (s.name.rsplit(" ", 1)[0] if " " in s.name else "")
    return {"identity": s.identity, "name": s.name or s.identity, "first": first, "last": last,
            "login": s.login, "email": s.email or (s.identity if "@" in s.identity else ""),
            "section": s.section, "submission": s.submission, "group": s.group}


def _total(row: dict) -> str:
    return row["grade"]["total"] if row["grade"] else ""


def render(fmt: str, rows: list[dict], *, title: str, max_total: str, parts: list[str] | None = None) -> str:
    buffer = io.StringIO()
    w = csv.writer(buffer, lineterminator="\n")
    if fmt == "canvas":
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", title])
        w.writerow(["Points Possible", "", "", "", "", max_total])
        for row in rows:
            who = _who(row)
            student = f"{who['last']}, {who['first']}" if who["first"] else who["name"]
            w.writerow([_safe(student), "", _safe(who["identity"]), _safe(who["login"]), _safe(who["section"]),
                        _total(row)])
    elif fmt == "moodle":
        w.writerow(["Email address", "ID number", "First name", "Last name", title, f"{title} (feedback)"])
        for row in rows:
            who = _who(row)
            why = _why(row["grade"]) if row["grade"] else "no submission graded"
            w.writerow([_safe(who["email"]), _safe(who["identity"]), _safe(who["first"]), _safe(who["last"]),
                        _total(row), _safe(why)])
    elif fmt == "blackboard":
        w.writerow(["Last Name", "First Name", "Username", "Student ID", f"{title} [Total Pts: {max_total} Score]"])
        for row in rows:
            who = _who(row)
            w.writerow([_safe(who["last"]), _safe(who["first"]), _safe(who["login"]), _safe(who["identity"]),
                        _total(row)])
    elif fmt == "csv":
        part_columns = list(parts or [])
        w.writerow(["identity", "name", "submission", "group", "total", "max_total", *part_columns,
                    "late_days", "penalty", "status"])
        for row in rows:
            who, g = _who(row), row["grade"] or {}
            w.writerow([_safe(who["identity"]), _safe(who["name"]), _safe(who["submission"]), _safe(who["group"]),
                        g.get("total", ""), g.get("max_total", max_total), *(g.get(p, "") for p in part_columns),
                        g.get("late_days", ""), g.get("penalty", ""), g.get("status", "no submission")])
    else:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return buffer.getvalue()


def _why(grade: dict) -> str:
    days = grade.get("late_days") or "0"
    reasons = [f"{days} day{'' if days == '1' else 's'} late: -{grade.get('penalty', '')}" if days != "0" else "",
               "reviewed by hand" if _student_decisions(grade.get("overrides") or "") else ""]
    return "; ".join(r for r in reasons if r)


def _student_decisions(cell: str) -> list[str]:
    """The decisions of grades.csv's `overrides` cell a student may know of: a look at a similarity pair or an
    integrity flag is the staff's alone (grader/admin/overrides.py), so the column a student reads never counts it."""
    return [item for item in cell.split("; ") if item and not overrides.staff_only(item.split(" ", 1)[0])]


def _safe(text: str) -> str:
    """A spreadsheet runs a cell starting with = + - @ as a formula; a student's name must not."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def main(*, out: str, format: str, lesson, roster: str | None = None, dest: str | None = None,
         parts: bool = False, title: str | None = None) -> int:
    out_dir = Path(out)
    if format not in FORMATS:
        print(f"export: unknown format {format!r}; choose one of {', '.join(FORMATS)}", file=sys.stderr)
        return 2
    try:
        grades, fields = _grades(out_dir)
        people = roster_module.read(Path(roster)) if roster else roster_module.in_out(out_dir)
    except (FileNotFoundError, roster_module.RosterError) as error:
        print(f"export: {error}", file=sys.stderr)
        return 2
    if title is None:
        title = lesson.label or lesson.title
    max_total = next((g["max_total"] for g in grades if g.get("max_total")), "")
    rows, missing, unclaimed = rows_for(grades, people)
    target = Path(dest) if dest else out_dir / f"export-{format}.csv"
    write_atomic(target, render(format, rows, title=title, max_total=max_total,
                                parts=_parts(fields) if parts else None))
    print(f"export: {len(rows)} rows ({format}) -> {target}")
    if people is None:
        print("export: no roster given (--roster FILE, or OUT/roster.csv from grade --roster): rows are keyed by submission name, which the school's "
              "gradebook may not know", file=sys.stderr)
    for line in missing:
        print(f"export: on the roster, not graded: {line} (kept, with an empty grade)", file=sys.stderr)
    for name in unclaimed:
        print(f"export: graded, not on the roster: {name} (kept, keyed by its submission name)", file=sys.stderr)
    return 0

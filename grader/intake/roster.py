"""Who a submission belongs to: the class roster, as the school's gradebook knows each student.

A roster is a CSV file with a header row. Column names are matched ignoring case and spaces; the first
column present in each list below is used:

    identity     identifier, roster_identifier, student_id, sis_user_id, id, email
                 (GitHub Classroom's roster export has `identifier`, its grades export `roster_identifier`)
    submission   submission, github_username, login, student_repository_name
                 (the row name the submission has in OUT: its folder, zip, notebook or GitHub user name;
                 without one, the identity is the submission name)
    group        group, group_name (students who share one submission: each gets the group's grade)
    name         name, display_name, full_name, or first_name + last_name
    login        sis_login_id, username, login, email (what Canvas and Blackboard match on; the identity
                 when there is none)
    email        email, email_address
    section      section
    deadline     deadline (this student's own, for an extension: ISO time; a partner in a group keeps
                 theirs, measured from the time the group handed in)

A Classroom roster CSV works as it is: `identifier` is the identity, `github_username` the
submission. A member of a group whose own row names no submission takes the group's.
Standard library only.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

IDENTITY = ("identifier", "roster_identifier", "student_id", "sis_user_id", "id", "email")
SUBMISSION = ("submission", "github_username", "login", "student_repository_name")
GROUP = ("group", "group_name")
NAME = ("name", "display_name", "full_name")
LOGIN = ("sis_login_id", "username", "login", "email")
EMAIL = ("email", "email_address")
SECTION = ("section",)
DEADLINE = ("deadline", "due")
FILE = "roster.csv"  # in OUT: `grade --roster FILE` puts it there; export, the report and similarity read it


class RosterError(ValueError):
    """A roster that cannot be read: the message says which file, line and what to write."""


@dataclass(frozen=True)
class Student:
    identity: str
    name: str = ""
    first_name: str = ""
    last_name: str = ""
    login: str = ""
    email: str = ""
    section: str = ""
    submission: str = ""  # the row name in OUT
    group: str = ""
    deadline: str = ""


@dataclass
class Roster:
    students: list[Student] = field(default_factory=list)

    def members(self, submission: str) -> list[Student]:
        """The students a submission belongs to (a group's members: several), in roster order."""
        key = submission.casefold()
        return [s for s in self.students if s.submission.casefold() == key]

    def groups(self) -> dict[str, list[Student]]:
        """Submissions that belong to more than one student: submission -> its members."""
        found: dict[str, list[Student]] = {}
        for s in self.students:
            found.setdefault(s.submission, []).append(s)
        return {k: v for k, v in found.items() if len(v) > 1}

    def group_of(self, submission: str) -> str:
        """The group a submission belongs to ("" for one student's own)."""
        return next((s.group for s in self.members(submission) if s.group), "")

    def partners(self, a: str, b: str) -> bool:
        """Whether two submissions are partners' (one group's members, each handing in a copy): their
        likeness is the pair work itself, never evidence of copying."""
        group = self.group_of(a)
        return bool(group) and group == self.group_of(b)


def warnings(people: Roster, graded: list[str]) -> list[str]:
    """What the staff should look at before the gradebook goes out (the console says it): graded rows no roster
    student names (their rows have no student), and groups whose members name different graded submissions (one
    group, two grades)."""
    names = {s.submission.casefold() for s in people.students}
    found = []
    unclaimed = [g for g in graded if g.casefold() not in names]
    if unclaimed:
        found.append(f"graded, named by no roster row: {', '.join(unclaimed[:10])}{' ...' if len(unclaimed) > 10 else ''}"
                     " (each keeps a gradebook row without a student: name it in roster.csv's submission column, "
                     "or delete its folder in OUT)")
    graded_keys = {g.casefold(): g for g in graded}
    handed: dict[str, set[str]] = {}
    for s in people.students:
        if s.group and s.submission.casefold() in graded_keys:
            handed.setdefault(s.group, set()).add(graded_keys[s.submission.casefold()])
    for group, subs in sorted(handed.items()):
        if len(subs) > 1:
            found.append(f"group {group} has {len(subs)} graded submissions ({', '.join(sorted(subs))}): each member's "
                         "row takes the one the roster names for them; look at both")
    return found


def in_out(out_dir: Path) -> "Roster | None":
    """OUT/roster.csv if the instructor put one there; None without one. A roster that cannot be read
    is an error the caller reports (never silently ignored: rows would lose their students)."""
    path = Path(out_dir) / FILE
    return read(path) if path.is_file() else None


def _norm(column: str) -> str:
    return column.strip().lower().replace(" ", "_").replace("-", "_")


def read(path: Path) -> Roster:
    """The roster at `path`; RosterError names what is missing."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as error:
        raise RosterError(f"{path}: cannot read the roster ({error.strerror or error})") from None
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise RosterError(f"{path}: the roster is empty; write a header row, e.g. identifier,github_username,name")
    header = [_norm(c) for c in rows[0]]

    def column(names: tuple[str, ...]) -> int | None:
        return next((header.index(n) for n in names if n in header), None)

    at = {key: column(names) for key, names in (("identity", IDENTITY), ("submission", SUBMISSION),
                                                ("group", GROUP), ("name", NAME), ("login", LOGIN),
                                                ("email", EMAIL), ("section", SECTION),
                                                ("deadline", DEADLINE))}
    at["first_name"], at["last_name"] = column(("first_name",)), column(("last_name",))
    if at["identity"] is None:
        raise RosterError(f"{path}: no column says who each student is; name one of "
                          f"{', '.join(IDENTITY)} (found: {', '.join(header)})")
    students, seen = [], set()
    for number, row in enumerate(rows[1:], start=2):
        def cell(key: str) -> str:
            i = at[key]
            return row[i].strip() if i is not None and i < len(row) else ""
        identity = cell("identity")
        if not identity:
            raise RosterError(f"{path}:{number}: this row has no {header[at['identity']]}; every student needs one")
        if identity.casefold() in seen:
            raise RosterError(f"{path}:{number}: {identity!r} is listed twice; keep one row per student")
        seen.add(identity.casefold())
        first, last = cell("first_name"), cell("last_name")
        name = cell("name") or " ".join(p for p in (first, last) if p)
        group = cell("group")
        students.append(Student(identity=identity, name=name, first_name=first, last_name=last,
                                login=cell("login") or identity, email=cell("email"), section=cell("section"),
                                submission=cell("submission") or group or identity, group=group,
                                deadline=cell("deadline")))
    # A member whose own row names no submission shares the one a groupmate's row names.
    by_group: dict[str, str] = {}
    for s in students:
        if s.group and s.submission != s.group and s.submission != s.identity:
            by_group.setdefault(s.group, s.submission)
    students = [Student(**{**s.__dict__, "submission": by_group[s.group]})
                if s.group in by_group and s.submission in (s.group, s.identity) else s for s in students]
    return Roster(students)

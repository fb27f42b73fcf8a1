"""Students' requests to look at a test again: OUT/regrade_requests.csv, and where each one stands.

The instructor collects the requests (a form, an e-mail, an issue) into one file beside
overrides.csv, one row a request, columns `student,test,reason,time`:

    student   the row name in grades.csv
    test      a test id (`<part>.<test>`, as grades.csv's report names it) or a part (`<part>`)
    reason    the student's words
    time      when it was asked, ISO 8601 (`2026-12-01T15:00:00+00:00`; no zone means UTC)

A request is decided by an override (overrides.csv) on what it names (the test, or the part),
written at or after the request's time: with points, the request is *accepted*; without points (a row that
marks the test reviewed), it is *declined*. The override's comment is the reason the student reads.
Until then the request is *open*. The state is derived, never stored, so the file the instructor
collects is never rewritten and the decision lives in one place: overrides.csv.
"""
from __future__ import annotations

import csv
import dataclasses
import io
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grader.admin import overrides
from grader.admin.overrides import Override, OverrideError

COLUMNS = ("student", "test", "reason", "time")
FILE = "regrade_requests.csv"
MAX_FILE_BYTES = 5 << 20
STATES = ("open", "accepted", "declined")


class RequestError(OverrideError):
    """The requests file cannot be read; the message names the row and what to change (an
    OverrideError: `grade` and `merge` stop on it as on a bad overrides.csv)."""


@dataclass(frozen=True)
class Request:
    student: str
    test: str
    reason: str
    time: str
    line: int = 0

    @property
    def when(self) -> datetime:
        return _moment(self.time)


@dataclass(frozen=True)
class Standing:
    """A request and where it stands."""

    request: Request
    state: str  # one of STATES
    decision: Override | None = None  # the override that decided it
    before: float | None = None  # the points of what it names before the decision (None: not known)
    # The decision was made on an earlier version, and the new one earns more by itself: its points are set aside
    # (grader/admin/overrides.py apply), so no file may say they were given.
    set_aside: bool = False

    @property
    def lowered(self) -> bool:
        """Accepted with fewer points than it had: a person may decide so, and every file says it."""
        points = self.decision.points if self.decision else None
        return points is not None and self.before is not None and points < self.before and not self.set_aside

    def for_student(self) -> dict:
        """What the student reads: their request, its state, the reason for the decision, and the points it
        changed (before and after) when accepted."""
        return {"test": self.request.test, "reason": self.request.reason, "time": self.request.time,
                "state": self.state, "answer": self.decision.comment if self.decision else "",
                "points": self.decision.points if self.decision else None, "before": self.before,
                **({"set_aside": True} if self.set_aside else {})}


def points_words(shown: dict) -> str:
    """` (3 → 1 points)` after an accepted request's state, from its for_student() (` (1 points)` when they
    did not change; empty when not known)."""
    before, points = shown.get("before"), shown.get("points")
    if points is None:
        return ""
    if shown.get("set_aside"):  # held-out s61: "accepted (30 → 24 points)" beside a score that kept its 30
        return " (decided on an earlier version of your work; the new version earns more by itself)"
    return f" ({points:g} points)" if before is None or before == points else f" ({before:g} → {points:g} points)"


def default_path(out: Path) -> Path:
    return Path(out) / FILE


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def read(path: Path) -> list[Request]:
    """Every request of the file in order (none when it does not exist)."""
    path = Path(path)
    if not path.is_file():
        return []
    if path.stat().st_size > MAX_FILE_BYTES:
        raise RequestError(f"{path} is over {MAX_FILE_BYTES >> 20} MB; it should hold one line per request")
    reader = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig")))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise RequestError(f"{path}: the first line must name the columns {','.join(COLUMNS)} "
                           f"(missing: {', '.join(missing)})")
    found = []
    for number, row in enumerate(reader, start=2):
        student, test = (row.get("student") or "").strip(), (row.get("test") or "").strip()
        if not student and not test:
            continue
        time = (row.get("time") or "").strip()
        try:
            _moment(time)
        except ValueError:
            raise RequestError(f"{path}:{number}: time {time!r} is not an ISO 8601 time; write it as "
                               "2026-12-01T15:00:00+00:00 (or without the zone, meaning UTC)") from None
        found.append(Request(student, test, (row.get("reason") or "").strip(), time, number))
    return found


def of_folder(out: Path, path: Path | None = None) -> list[Request]:
    """The requests of a grading folder (OUT/regrade_requests.csv unless `path`), a roster identity read as its
    student's submission when OUT holds a roster (a roster that cannot be read is said where the class is written)."""
    from grader.intake import roster

    try:
        people = roster.in_out(Path(out))
    except (roster.RosterError, OSError):
        people = None
    return by_roster(read(path or default_path(out)), people)


def by_roster(requests: list[Request], people) -> list[Request]:
    """The requests with a roster identity in `student` (grades.csv's student column, what a school's form
    collects) read as the submission the roster names for that student; unchanged without a roster (`people`
    None) or for a name that is a submission already."""
    if people is None:
        return requests
    submissions = {s.submission.casefold() for s in people.students}
    named = {s.identity.casefold(): s.submission for s in people.students if s.identity and s.submission}
    return [r if r.student.casefold() in submissions or r.student.casefold() not in named
            else dataclasses.replace(r, student=named[r.student.casefold()]) for r in requests]


def check(requests: list[Request], tests_of: dict[str, set[str]], *, path: Path | str = FILE) -> None:
    """RequestError for the first request naming a student or a test the gradebook does not have.
    `tests_of` maps each student to its test ids and parts."""
    for r in requests:
        where = f"{path}:{r.line}"
        if r.student not in tests_of:
            raise RequestError(f"{where}: no student named {r.student!r} in this gradebook (write the submission "
                               "column of grades.csv, or with a roster its student column; a row that says "
                               "`no submission` has no graded work to ask about)")
        if r.test not in tests_of[r.student]:
            example = min((t for t in tests_of[r.student] if "." in t), default="<part>.<test>")
            raise RequestError(f"{where}: {r.student} has no test or part {r.test!r}; write a test id as "
                               f"grades.csv's report names it ({example}) or a part")


def standings(requests: list[Request], rows: list[Override], records=None) -> list[Standing]:
    """Each request with its state, from the overrides file's rows. Only a row on what the request
    names decides it: a new mark for the whole part answers no request about one of its tests.
    With `records` (the automated results), an accepted request knows the points it had before."""
    by_name = {r.submission: r for r in records or ()}
    found = []
    for r in requests:
        decision = None
        for row in rows:  # the last row on that test, written at or after the request
            if row.submission != r.student or row.test != r.test or not row.at:
                continue
            try:
                if _moment(row.at) >= r.when:
                    decision = row
            except ValueError:
                continue
        state = "open" if decision is None else "accepted" if decision.points is not None else "declined"
        before, aside = None, False
        if state == "accepted" and r.student in by_name:
            record = by_name[r.student]
            before = points_before(record, r.test, rows[:rows.index(decision)])
            aside = overrides.made_earlier(decision, record) and decision.points < overrides.points_of(record, r.test)
        found.append(Standing(r, state, decision, before, aside))
    return found


def points_before(record, test: str, earlier: list[Override]) -> float:
    """The points of `test` (a test id or a part) in `record` with the decisions of `earlier` applied."""
    return overrides.points_of(overrides.apply(record, overrides.effective(earlier).get(record.submission, {})), test)


def askable(records, others=(), *, lesson=None) -> dict[str, set[str]]:
    """student -> what a request may name: each record's test ids and parts, and for each name of `others` (not
    graded here: not yet, or by another shard) `lesson`'s."""
    every = set(lesson.test_ids) | set(lesson.components) if others else set()
    return {**{name: every for name in others},
            **{r.submission: {t.name for t in r.tests} | {t.component for t in r.tests} for r in records}}

"""A person's decisions on top of the automated grade: OUT/overrides.csv.

Columns `submission,test,points,comment,staff_note,by,at,version`, one decision a row; the review page
(`python -m grader review`) appends rows, and editing the file by hand works the same. `version` is the
version of the submission the decision was made on (the first 12 hex digits of its record's submission
digest; the review page writes it, a hand-written row may leave it empty).

Two readers, by construction: `comment` is for the student (their feedback and results.json show
it), `staff_note` is for the teaching staff only (grades.csv, the class report and the review page).
A row about a similarity pair or an integrity flag (`similarity:<other>`, `integrity...`) is
staff-only as a whole, whatever its comment says: the student's files never show it. A file
written before the staff_note column existed is read as it always was: its `comment` stays
student-visible.

    test = a test id (`deliverables.analysis`)   the test gets `points` (0 .. its maximum)
    test = a part (`deliverables`)               the part's tests get `points` together (0 .. the
                                                 part's maximum), except tests that have their own row
    test = `*`                                   `points` is added to the total (a bonus or a penalty)
    points empty                                 no change of points: the row marks something as
                                                 reviewed (an integrity flag, a similarity pair, a
                                                 test), with its comment or note

The most specific row wins (a test's own row over its part's), and for the same submission and test
the last row wins. A row for a submission or test the gradebook does not have is an error naming it
(OverrideError). A decision made on an earlier version of its submission (the student handed in again)
still counts, since only a person may undo a person's decision, except that points set on a test or a part
never take from what the new version earns by itself (that row is set aside); either way it is never
silent: grades.csv, the class report, the review page and `grade`'s console name it until a person sets it
again or deletes it (earlier_versions). A row written without a version gets the version graded when the first
`grade` run saw it (stamp_versions, kept beside the file). Records on disk stay the automated result; `grade` and `merge` apply the file on
every run when they write grades.csv, feedback.md, results.json and the report.
"""
from __future__ import annotations

import copy
import csv
import dataclasses
import io
import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grader.results.document import number
from grader.results.records import SubmissionResult

COLUMNS = ("submission", "test", "points", "comment", "staff_note", "by", "at", "version")
FILE = "overrides.csv"
BONUS = "*"
REVIEW_PREFIXES = ("integrity", "similarity")  # labels a points-less row may carry besides test ids;
# such a row is about what the staff saw (another student, an attempt to cheat): staff-only, whole
MAX_FILE_BYTES = 5 << 20
VERSION_DIGITS = 12  # of the submission digest: a row's `version`


class OverrideError(ValueError):
    """The overrides file cannot be applied; the message names the row and what to change."""


@dataclass(frozen=True)
class Override:
    submission: str
    test: str
    points: float | None
    comment: str = ""
    by: str = ""
    at: str = ""
    line: int = 0
    staff_note: str = ""  # for the teaching staff only
    version: str = ""  # the submission's version the decision was made on ("" when not written)

    @property
    def staff_only(self) -> bool:
        """A decision on a similarity pair or an integrity flag: no part of it reaches the student."""
        return staff_only(self.test)

    def to_json(self) -> dict:
        return {"test": self.test, "points": self.points, "comment": self.comment, "staff_note": self.staff_note,
                "staff_only": self.staff_only, "by": self.by, "at": self.at, "version": self.version}


def version_of(result: SubmissionResult) -> str:
    """The version of the submission `result` graded: the head of its submission digest ("" unknown)."""
    return str((result.digests or {}).get("submission") or "")[:VERSION_DIGITS]


def made_earlier(row: Override, result: SubmissionResult) -> bool:
    """The row names a version of the submission other than the one `result` graded."""
    return bool(row.version) and bool(version_of(result)) and row.version != version_of(result)


def earlier_versions(rows: list[Override], records: list[SubmissionResult], *,
                     previous: dict[str, str]) -> list[Override]:
    """The decisions in effect that were made on another version of their submission than the graded one:
    a row whose version differs, or a row without one whose submission `previous` (name -> the submission
    digest it had before this run) shows changed."""
    by_name = {r.submission: r for r in records}
    found = []
    for name, decided in effective(rows).items():
        result = by_name.get(name)
        if result is None:
            continue
        before = previous.get(name)
        changed = before is not None and before != (result.digests or {}).get("submission")
        found += [row for row in decided.values() if made_earlier(row, result) or (not row.version and changed)]
    return found


def staff_only(test: str) -> bool:
    return test.split(":", 1)[0] in REVIEW_PREFIXES


def for_student(result: SubmissionResult) -> list[dict]:
    """The decisions on `result` a student may read: no staff-only row, no staff note."""
    return [{k: o.get(k) for k in ("test", "points", "comment", "automated", "by", "at")}
            for o in result.overrides if not o.get("staff_only") and not o.get("set_aside")]


def default_path(out: Path) -> Path:
    return Path(out) / FILE


def read(path: Path) -> list[Override]:
    """Every row of the file in order (none when it does not exist)."""
    path = Path(path)
    if not path.is_file():
        return []
    if path.stat().st_size > MAX_FILE_BYTES:
        raise OverrideError(f"{path} is over {MAX_FILE_BYTES >> 20} MB; it should hold one line per decision")
    text = path.read_text(encoding="utf-8-sig")
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in ("submission", "test", "points") if c not in (reader.fieldnames or [])]
    if missing:
        raise OverrideError(f"{path}: the first line must name the columns {','.join(COLUMNS)} "
                            f"(missing: {', '.join(missing)})")
    rows = []
    for number, row in enumerate(reader, start=2):
        submission, test = (row.get("submission") or "").strip(), (row.get("test") or "").strip()
        if not submission and not test:
            continue
        raw = (row.get("points") or "").strip()
        try:
            points = float(raw) if raw else None
        except ValueError:
            raise OverrideError(f"{path}:{number}: points {raw!r} is not a number; write e.g. 3 or 2.5, "
                                "or leave it empty to mark something as reviewed") from None
        if points is not None and not math.isfinite(points):
            raise OverrideError(f"{path}:{number}: points {raw!r} is not a finite number")
        if points is not None:
            points = round(points, 2)  # points are shown with at most two decimals everywhere
        rows.append(Override(submission, test, points, (row.get("comment") or "").strip(),
                             (row.get("by") or "").strip(), (row.get("at") or "").strip(), number,
                             staff_note=(row.get("staff_note") or "").strip(),
                             version=(row.get("version") or "").strip()))
    stamped = _stamps(path)
    return [_stamped(row, stamped.get(_key(row), {})) for row in rows]


def _stamped(row: Override, stamp: dict) -> Override:
    """`row` with the version and time its stamp gives, where the person left them empty."""
    filled = {k: stamp[k] for k in ("version", "at") if not getattr(row, k) and isinstance(stamp.get(k), str)}
    return dataclasses.replace(row, **filled) if filled else row


# A row written without a version or a time is given them by the first `grade` run that sees it: the version of its
# submission that run found graded (the one the person looked at), and the run's time (held-out s61: a row written by
# hand for an earlier version took points from a resubmission that earned more, and was named once, on one run's
# console; a row without a time decided no regrade request, while the student read its comment). Both are kept beside
# the file, in STAMPS, so the person's own file is never rewritten.
STAMPS = ".versions.json"


def _stamps_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + STAMPS)


def _key(row: Override) -> str:
    """A row as the person wrote it: a changed row is a new decision, made on the version graded then."""
    return json.dumps([row.submission, row.test, row.points, row.comment, row.by, row.at, row.staff_note])


def _stamps(path: Path) -> dict[str, dict]:
    try:
        found = json.loads(_stamps_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, dict)} if isinstance(found, dict) else {}


def stamp_versions(path: Path, graded: dict[str, str], now: str | None = None) -> None:
    """Give each row of the file at `path` written without a version the version `graded` (name -> submission digest,
    as its last grading found it) says, and one without a time `now` (this run's), once; a row whose submission was
    never graded waits for its version."""
    path = Path(path)
    if not path.is_file():
        return
    stamped = _stamps(path)
    now = now or datetime.now(timezone.utc).isoformat(timespec="seconds")
    new = {}
    for row in read(path):
        key = _key(row)
        if key in stamped or (row.version and row.at):
            continue
        stamp = {**({} if row.at else {"at": now}),
                 **({} if row.version or row.submission not in graded else
                    {"version": graded[row.submission][:VERSION_DIGITS]})}
        if "version" in stamp or row.version:  # a row is stamped once, when its version is known
            new[key] = stamp
    if new:
        _stamps_path(path).write_text(json.dumps({**stamped, **new}, indent=1, sort_keys=True), encoding="utf-8")


def effective(rows: list[Override]) -> dict[str, dict[str, Override]]:
    """submission -> test -> the row that counts (the last one for each key)."""
    found: dict[str, dict[str, Override]] = {}
    for row in rows:
        found.setdefault(row.submission, {})[row.test] = row
    return found


def check(rows: list[Override], records: list[SubmissionResult], *, path: Path | str = FILE,
          submissions: set[str] | None = None) -> None:
    """OverrideError naming the first row whose submission or test is unknown, or whose points are
    out of range. `submissions` are names that will have records (a run still grading them)."""
    by_name = {r.submission: r for r in records}
    known = set(by_name) | set(submissions or ())
    for row in rows:
        where = f"{path}:{row.line}"
        if row.submission not in known:
            raise OverrideError(f"{where}: no submission named {row.submission!r} in this gradebook "
                                "(the names are the rows of grades.csv with graded work; a roster student's row that "
                                "says `no submission` has nothing to override until they hand something in)")
        result = by_name.get(row.submission)
        if result is None:
            continue  # graded later in this run: its tests are checked when the class files are written
        tests = {t.name: t for t in result.tests}
        if row.test == BONUS:
            if row.points is None and not row.comment and not row.staff_note:
                raise OverrideError(f"{where}: a `*` row needs points (added to the total), a comment or a note")
            continue
        if row.test in tests:
            top = tests[row.test].max_score
        elif row.test in _parts(result):
            top = sum(t.max_score for t in result.tests if t.component == row.test)
        elif row.points is None and row.test.split(":", 1)[0] in REVIEW_PREFIXES:
            continue
        else:
            raise OverrideError(f"{where}: {row.submission} has no test or part {row.test!r}; write a test id "
                                f"such as {next(iter(tests), 'deliverables.analysis')!r}, a part "
                                f"({', '.join(_parts(result))}) or * for the total")
        if row.points is not None and not 0 <= row.points <= top:
            raise OverrideError(f"{where}: {row.points:g} points for {row.submission} {row.test} is outside "
                                f"0..{top:g}")


def _parts(result: SubmissionResult) -> tuple[str, ...]:
    """The parts a record's tests belong to, in the rubric's order (a record holds every graded test)."""
    return tuple(dict.fromkeys(t.component for t in result.tests))


def apply(result: SubmissionResult, decisions: dict[str, Override]) -> SubmissionResult:
    """A copy of `result` with the decisions (test -> row, from effective()) applied."""
    if not decisions:
        return result
    changed = copy.deepcopy(result)
    shown = []
    # Points a person set on a test or part of an earlier version never take from what the new version earns by
    # itself: such a row is set aside (the staff are told) until a person sets it again.
    aside = {name for name, row in decisions.items() if row.points is not None and name != BONUS
             and made_earlier(row, result) and row.points < points_of(result, name)}
    own = {name: row for name, row in decisions.items() if row.points is not None and name not in aside}
    for component in _parts(result):
        part = own.get(component)
        if part is None:
            continue
        rest = [t for t in changed.tests if t.component == component and t.name not in own]
        possible = sum(t.max_score for t in rest)
        given = 0.0
        for i, t in enumerate(rest):  # in hundredths of a point, the last test taking what is left
            share = round(part.points - given, 2) if i == len(rest) - 1 else \
                round(part.points * t.max_score / possible, 2) if possible else 0.0
            t.score, given = share, given + share
    for t in changed.tests:
        row = own.get(t.name)
        if row is not None:
            t.score = row.points
    for t in changed.tests:
        row = next((decisions[n] for n in (t.name, t.component) if n in decisions and n not in aside), None)
        if row is not None and row.comment and not row.staff_only:  # the student's files show it with the test
            t.review = {"by": row.by, "comment": row.comment}
    bonus = own.get(BONUS)
    changed.adjustment = round(bonus.points, 4) if bonus else 0.0
    for name in sorted(decisions, key=lambda n: (n == BONUS, n)):
        row = decisions[name]
        automated = None
        if row.points is not None and name != BONUS:
            automated = points_of(result, name)
        shown.append({**row.to_json(), "automated": automated,
                      **({"earlier_version": True} if made_earlier(row, result) else {}),
                      **({"set_aside": True} if name in aside else {})})
    changed.overrides = shown
    return changed


EARLIER = "made for an earlier version"  # beside such a decision in every staff file
SET_ASIDE = "set aside: the new version earns more by itself"


def earlier_words(set_aside: bool) -> str:
    """The staff files' words on a decision made for an earlier version, and whether it is set aside."""
    return f"{EARLIER}; {SET_ASIDE}" if set_aside else EARLIER


def points_of(result: SubmissionResult, name: str) -> float:
    """The points `result` gives a test or a part (`name`: a test id or a part)."""
    return round(sum(t.score for t in result.tests if t.name == name or t.component == name), 4)


def summary(result: SubmissionResult) -> str:
    """The grades.csv cell: `deliverables.analysis 5->3; * +2; similarity:bob reviewed`."""
    parts = []
    for o in result.overrides:
        if o["points"] is None:
            parts.append(f"{o['test']} reviewed")
        elif o["test"] == BONUS:
            capped = o.get("capped")
            parts.append(f"* {o['points']:+g}" + ("" if capped is None else f" (capped to {capped:+g})"))
        else:
            parts.append(f"{o['test']} {o['automated']:g}->{o['points']:g}")
        if o.get("earlier_version"):
            parts[-1] += f" ({earlier_words(o.get('set_aside'))})"
    return "; ".join(parts)


def append(path: Path, row: dict) -> None:
    """Add one decision at the end of the file (created with its header when missing)."""
    path = Path(path)
    new = not path.is_file() or path.stat().st_size == 0
    values = {**row, "at": row.get("at") or datetime.now(timezone.utc).replace(microsecond=0).isoformat()}
    with open(path, "a", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        if new:
            writer.writerow(COLUMNS)
        writer.writerow([_plain(values.get(c, "")) for c in COLUMNS])


def _plain(value) -> str:
    text = "" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))
    text = " ".join(text.split())  # one line per decision, whatever was typed
    return "'" + text if text[:1] in ("=", "+", "@", "\t", "\r") else text


def explain(result: SubmissionResult) -> str:
    """Why the final total differs from the automated one, in a few words ("" when it does not)."""
    reasons = []
    tests = [o for o in result.overrides if o["points"] is not None and o["test"] != BONUS
             and not o.get("staff_only") and not o.get("set_aside")]
    if tests:
        reasons.append("overrides: " + ", ".join(f"{o['test']} {number(o['automated'])}→{number(o['points'])}"
                                                  for o in tests))
    bonus = next((o for o in result.overrides if o["test"] == BONUS and o["points"] is not None), None)
    if bonus is not None:
        capped = bonus.get("capped")
        kind = "bonus" if bonus["points"] >= 0 else "deduction"
        reasons.append(f"{kind} {bonus['points']:+g}" + (f" (capped to {capped:+g}: the rubric's maximum)"
                                                         if capped is not None else ""))
    days = result.late.get("late_days", 0) if result.late else 0
    if days:
        reasons.append(f"{days} day{'s' if days != 1 else ''} late: -{number(result.penalty)}")
    if result.automated is None or not reasons:
        return ""
    return f"automated {number(result.automated)}; " + "; ".join(reasons)

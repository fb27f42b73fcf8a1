"""The final total of each submission, made in one place so that every output says the same.

The automated result (record.json) becomes the final one in three steps, always in this order:
    1. a person's decisions (grader/admin/overrides.py): a test's or a part's points, a `*` bonus or penalty;
    2. the `*` bonus within the rubric's maximum total, unless the rubric declares extra credit
       (`[meta] extra_credit = N`: a bonus may take the total up to N points over the maximum);
    3. the rubric's late policy (grader/judging/late.py) on the lateness `grade` copied into OUT/<name>/late.json.

The console's progress line, grades.csv, summary.md, report.html, each feedback.md and results.json
and the review page all take the total from `finalise`, and say why it differs from the automated one
with `explain`: there is no second computation that could disagree.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from grader.intake import roster
from grader.admin import overrides
from grader.admin.overrides import explain  # noqa: F401  (totals.explain: where callers look for it)
from grader.results.records import SubmissionResult


def extra_credit(*, lesson) -> float:
    """Points a `*` bonus may add over the rubric's maximum: `[meta] extra_credit` (0 without one)."""
    try:
        return lesson.extra_credit
    except (OSError, ValueError):
        return 0.0


def finalise(out_dir: Path, records: list[SubmissionResult],
             decided: dict[str, dict[str, overrides.Override]], *, lesson) -> list[SubmissionResult]:
    """Each record as every output states it (copies where something changes; the records stay the
    automated result). `decided` is overrides.effective() of the overrides file; the late policy and
    the extra credit are `lesson`'s rubric's."""
    from grader.judging import late

    policy = _late_policy(lesson)
    extra = extra_credit(lesson=lesson)
    people = roster.in_out(Path(out_dir)) if policy is not None else None
    final = []
    for record in records:
        automated = record.total
        result = overrides.apply(record, decided.get(record.submission, {}))
        result.automated = automated
        _cap_bonus(result, extra)
        if policy is not None:
            found = late.read_lateness(Path(out_dir) / record.submission)
            if found is not None:
                found = _measured_again(found, policy)
            if found is not None and people is not None:
                found = _against_the_rosters_deadlines(found, people.members(record.submission), policy)
            if found is not None:
                result.late = found
                result.penalty = _penalty(found["late_days"], result, policy)
                result.late["policy"] = (f"{policy.penalty_per_day:g}% of the total per started day after "
                                         f"{policy.grace_minutes:g} minutes' grace, at most {policy.max_days} days")
        final.append(result)
    return final


def _measured_again(found: dict, policy) -> dict:
    """A submission's lateness measured with the rubric's policy now, from the times `collect` copied (held-out s61:
    a grace period changed in the rubric left the late days `collect` had counted with the old one). Unchanged
    without both times."""
    from grader.judging import late

    handed_in, deadline = late.parse_time(found.get("handed_in", "")), late.parse_time(found.get("deadline", ""))
    if handed_in is None or deadline is None:
        return found
    return {**found, "late_days": late.late_days(deadline, handed_in, policy)}


def _penalty(days: int, result: SubmissionResult, policy) -> float:
    """The late policy's penalty for `days`, taking at most what `result` has before any penalty: a total is never
    below 0 (held-out s61: a late submission with no points was -20/100 in the gradebook and the LMS export)."""
    from grader.judging import late

    return min(late.penalty(days, result.max_total, policy), max(0.0, round(result.total + result.penalty, 2)))


def _against_the_rosters_deadlines(found: dict, members, policy) -> dict:
    """A submission's lateness as every output shows it, when the roster gives its students deadlines of their own
    (an extension): measured against that deadline, or for a group whose members' deadlines differ, against the
    latest of them (so no shared output states a penalty greater than a member's; each member's gradebook row
    keeps their own, per_student). Unchanged without the time it was handed in, or without such a deadline."""
    from grader.judging import late

    handed_in = late.parse_time(found.get("handed_in", ""))
    own = [s.deadline for s in members if late.parse_time(s.deadline) is not None]
    if handed_in is None or not own:
        return found
    deadlines = set(own) | ({found.get("deadline", "")} if len(own) < len(members) else set())
    deadlines = {d for d in deadlines if late.parse_time(d) is not None}
    latest = max(deadlines, key=late.parse_time)
    return {**found, "late_days": late.late_days(late.parse_time(latest), handed_in, policy), "deadline": latest,
            **({"deadlines_differ": True} if len(deadlines) > 1 else {})}


def _cap_bonus(result: SubmissionResult, extra: float) -> None:
    """A positive `*` adjustment takes the total at most `extra` points over the maximum."""
    if result.adjustment <= 0:
        return
    earned = round(sum(t.score for t in result.tests), 4)
    room = max(round(result.max_total + extra - earned, 4), 0.0)
    if result.adjustment > room:
        for o in result.overrides:
            if o["test"] == overrides.BONUS:
                o["capped"] = room  # said beside the bonus: the maximum, not the person, set this number
        result.adjustment = room


def _late_policy(lesson):
    """The lesson's late policy; an unreadable rubric has none (the class files still get written), and
    a [late] table without numbers stops with the error that says so."""
    try:
        lesson.rubric()
    except (OSError, ValueError):
        return None
    return lesson.late_policy


class Finaliser:
    """The final result of one submission as soon as its record is written (the console's progress):
    the same `finalise` the class files use, on the same overrides file and lateness."""

    def __init__(self, out_dir: Path, overrides_path: Path, *, lesson):
        self.out_dir = Path(out_dir)
        rows = overrides.read(overrides_path)
        self.decided = overrides.effective(rows)
        self.lesson = lesson

    def __call__(self, name: str) -> SubmissionResult | None:
        import json

        from grader.results.storage import record_from_json

        try:
            record = record_from_json(json.loads((self.out_dir / name / "record.json").read_text("utf-8")))
        except (OSError, ValueError, TypeError):
            return None
        return finalise(self.out_dir, [record], self.decided, lesson=self.lesson)[0]


def per_student(out_dir: Path, final: list[SubmissionResult], people, *, lesson) -> list[tuple[object, SubmissionResult]]:
    """One row per student when a roster (grader/intake/roster.py) says who handed in what: (student, result).
    A group's members share its grade, and each keeps their own lateness: their own deadline (an
    extension) against the time the group handed in, when both are known. Graded submissions that no
    roster row claims keep a row of their own (student None); roster students with nothing graded
    have none here (grader/admin/export.py lists them)."""
    from grader.judging import late

    policy = _late_policy(lesson)
    by_name = {r.submission.casefold(): r for r in final}
    rows, claimed = [], set()
    for student in people.students:
        result = by_name.get(student.submission.casefold())
        if result is None:
            continue
        claimed.add(result.submission)
        # A member without a deadline of their own has the class's, which the shared outputs may not state (the
        # group's latest): read as it was measured.
        due = late.parse_time(student.deadline) or _class_deadline(out_dir, result)
        handed_in = late.parse_time((result.late or {}).get("handed_in", ""))
        if policy is not None and due is not None and handed_in is not None:
            days = late.late_days(due, handed_in, policy)
            result = dataclasses.replace(result, late={**result.late, "late_days": days, "deadline": student.deadline},
                                         penalty=_penalty(days, result, policy))
        rows.append((student, result))
    rows += [(None, r) for r in final if r.submission not in claimed]
    return rows


def _class_deadline(out_dir: Path, result: SubmissionResult):
    """The class deadline `grade` measured the submission against (its late.json), when the shared lateness
    was measured against a group member's extension instead; None otherwise."""
    from grader.judging import late

    if not (result.late or {}).get("deadlines_differ"):
        return None
    found = late.read_lateness(Path(out_dir) / result.submission)
    return late.parse_time((found or {}).get("deadline", ""))

"""Late work: the rubric's late policy, each student's lateness, and the penalty it costs.

The policy is the rubric's `[late]` table (no table: no policy, nothing changes anywhere):
    grace_minutes    lateness below this is not late
    penalty_per_day  percent of the maximum total taken per started day late
    max_days         the last day: commits later than this many days after the deadline are not
                     collected, and the penalty stops growing there

`collect` measures lateness against each student's deadline (the roster's, for an extension, else
the command's) from the push time when the roster gives one (a GitHub Classroom export's
`submission_timestamp`), else from the commit time, which the student's machine wrote and which is
said so. It records deadline, late_days and the time used in collected.csv; `grade` copies each
row's lateness into OUT/<name>/late.json, so `merge` carries it with the rest of the folder and the
report applies the penalty from the rubric every time it writes.
Standard library only: `collect` runs on a bare Python.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path


FILE = "late.json"  # in OUT/<name>/


@dataclass(frozen=True)
class Policy:
    grace_minutes: float = 0.0
    penalty_per_day: float = 0.0  # percent of the maximum total
    max_days: int = 0

    @property
    def last_day(self) -> timedelta:
        return timedelta(days=self.max_days, minutes=self.grace_minutes)


def policy_of(rubric: dict, where) -> Policy | None:
    """The late policy of a parsed rubric (its [late] table), or None when it has none; `where` names
    the file in an error."""
    table = rubric.get("late")
    if not isinstance(table, dict):
        return None
    try:
        policy = Policy(float(table.get("grace_minutes", 0)), float(table.get("penalty_per_day", 0)),
                        int(table.get("max_days", 0)))
    except (TypeError, ValueError):
        raise ValueError(f"{where}: [late] needs numbers: grace_minutes, penalty_per_day (percent), max_days") \
            from None
    if policy.grace_minutes < 0 or not 0 <= policy.penalty_per_day <= 100 or policy.max_days < 0:
        raise ValueError(f"{where}: [late] grace_minutes >= 0, 0 <= penalty_per_day <= 100, max_days >= 0")
    return policy


def parse_time(text: str) -> datetime | None:
    """ISO 8601 or a Classroom export's `2026-12-01 20:00:00 UTC`; no zone means UTC."""
    text = (text or "").strip()
    if not text:
        return None
    for suffix in (" UTC", "Z"):
        if text.endswith(suffix):
            text = text[: -len(suffix)] + "+00:00"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def late_days(deadline: datetime, handed_in: datetime, policy: Policy) -> int:
    """Started days after the deadline and its grace period (0 when on time)."""
    late = handed_in - deadline - timedelta(minutes=policy.grace_minutes)
    return 0 if late <= timedelta(0) else math.ceil(late / timedelta(days=1))


def penalty(days: int, max_total: float, policy: Policy) -> float:
    return round(min(days, policy.max_days) * policy.penalty_per_day / 100 * max_total, 2)  # shown with two decimals


def write_lateness(out: Path, collected: Path, names: set[str]) -> None:
    """Copy each graded row's lateness from the submissions folder's collected.csv into OUT/<name>/."""
    import csv

    if not collected.is_file():
        return
    with open(collected, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            name = row.get("name", "")
            if name in names and (row.get("late_days") or "").strip().isdigit():
                folder = Path(out) / name
                folder.mkdir(parents=True, exist_ok=True)
                data = {"late_days": int(row["late_days"]), "deadline": row.get("deadline", ""),
                        "measured_from": row.get("late_basis", "")}
                if (row.get("handed_in") or "").strip():  # a partner with an extension measures from it
                    data["handed_in"] = row["handed_in"].strip()
                text = json.dumps(data, sort_keys=True) + "\n"
                path = folder / FILE
                if not path.is_file() or path.read_text(encoding="utf-8") != text:
                    path.write_text(text, encoding="utf-8")


def read_lateness(folder: Path) -> dict | None:
    try:
        data = json.loads((Path(folder) / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("late_days"), int) else None

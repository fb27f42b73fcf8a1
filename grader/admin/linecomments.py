"""Comments on lines of a student's code: OUT/comments.csv, beside overrides.csv.

Columns `submission,file,line,code,comment,staff_note,by,at`, one comment a row; the review page
appends rows (a grader clicks a line number), and editing the file by hand works the same.

    file        the file as the review page names it: `<module>.py`, or a notebook's name for
                its code cells (lines counted in the page's view, each cell opened by `# In[N]`)
    line        1-based line number in that file
    code        the line's text when the comment was written, so the feedback can quote it even
                if the file is later changed or gone
    comment     for the student: their feedback shows it under the line it refers to
    staff_note  for the teaching staff only: shown on the review page, never in a student's file

Two readers, decided when the text is written (as in overrides.csv): a row may carry either or
both. Comments change no points; `grade` and `merge` read the file on every run when they write
the feedback, and a row naming a submission the gradebook does not have is an error naming it.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grader.admin.overrides import OverrideError

COLUMNS = ("submission", "file", "line", "code", "comment", "staff_note", "by", "at")
FILE = "comments.csv"
MAX_FILE_BYTES = 5 << 20
MAX_CODE_CHARS = 200  # of the quoted line


class CommentError(OverrideError):
    """The comments file cannot be read; the message names the row and what to change (an
    OverrideError: `grade` and `merge` stop on it as on a bad overrides.csv)."""


@dataclass(frozen=True)
class LineComment:
    submission: str
    file: str
    line: int
    code: str = ""
    comment: str = ""
    staff_note: str = ""
    by: str = ""
    at: str = ""
    row: int = 0  # its line in the file, for the messages

    def for_student(self) -> dict | None:
        """What the student may read of this row (None when it holds only a staff note)."""
        if not self.comment:
            return None
        return {"file": self.file, "line": self.line, "code": self.code, "comment": self.comment, "by": self.by}


def default_path(out: Path) -> Path:
    return Path(out) / FILE


def read(path: Path) -> list[LineComment]:
    """Every row of the file in order (none when it does not exist)."""
    path = Path(path)
    if not path.is_file():
        return []
    if path.stat().st_size > MAX_FILE_BYTES:
        raise CommentError(f"{path} is over {MAX_FILE_BYTES >> 20} MB; it should hold one line per comment")
    reader = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig")))
    missing = [c for c in ("submission", "file", "line") if c not in (reader.fieldnames or [])]
    if missing:
        raise CommentError(f"{path}: the first line must name the columns {','.join(COLUMNS)} "
                           f"(missing: {', '.join(missing)})")
    rows = []
    for number, row in enumerate(reader, start=2):
        submission = (row.get("submission") or "").strip()
        if not submission:
            continue
        raw = (row.get("line") or "").strip()
        if not raw.isdigit() or int(raw) < 1:
            raise CommentError(f"{path}:{number}: line {raw!r} is not a line number; write the 1-based number "
                               "of the line the comment is about")
        rows.append(LineComment(submission, (row.get("file") or "").strip(), int(raw), _unquote(row.get("code")),
                                _unquote(row.get("comment")).strip(), _unquote(row.get("staff_note")).strip(),
                                (row.get("by") or "").strip(), (row.get("at") or "").strip(), number))
    return rows


def check(rows: list[LineComment], names: set[str], *, path: Path | str = FILE) -> None:
    """CommentError for the first row whose submission the gradebook does not have."""
    for row in rows:
        if row.submission not in names:
            raise CommentError(f"{path}:{row.row}: no submission named {row.submission!r} in this gradebook "
                               "(the names are the rows of grades.csv)")


def by_submission(rows: list[LineComment]) -> dict[str, list[LineComment]]:
    """submission -> its comments, by file and line (the order they were written within one line)."""
    found: dict[str, list[LineComment]] = {}
    for row in rows:
        found.setdefault(row.submission, []).append(row)
    return {name: sorted(found[name], key=lambda r: (r.file, r.line)) for name in found}


def append(path: Path, row: dict) -> None:
    """Add one comment at the end of the file (created with its header when missing)."""
    path = Path(path)
    new = not path.is_file() or path.stat().st_size == 0
    values = {**row, "at": row.get("at") or datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
              "code": str(row.get("code", ""))[:MAX_CODE_CHARS]}
    with open(path, "a", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        if new:
            writer.writerow(COLUMNS)
        writer.writerow([_plain(values.get(c, ""), keep_spaces=c == "code") for c in COLUMNS])


def _plain(value, keep_spaces: bool = False) -> str:
    text = "" if value is None else str(value)
    # One line per comment; a quoted line keeps its indentation (it is code).
    text = text.replace("\r", " ").replace("\n", " ") if keep_spaces else " ".join(text.split())
    # A spreadsheet runs a cell starting with = + - @ as a formula: the cell gets a quote first.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t") else text


def _unquote(value) -> str:
    text = value or ""
    return text[1:] if text[:1] == "'" and text[1:2] in ("=", "+", "-", "@", "\t") else text

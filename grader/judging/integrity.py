"""Attempts to fake a grade, seen by the grader and said to the teaching staff only.

The sandbox already makes each of these change nothing: a result file the code writes is never read,
a write outside its own folder is refused, printed text is never parsed, and an exit ends only the
child. What is left is for a person to know: each function here turns what the grader saw into a flag
("what, where, the words seen"), added to the record's `flags` beside the static scan's. The class
report's integrity section and the review page show them; the student's feedback never does (their
tests' own output says, in neutral words, which file failed and why).

Everything is read by the grader's own process: the submission's files before any of its code runs,
its folder after, the child's printed output as bytes, the transport's own exit records.
"""
from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

# Files the grader (or Gradescope) writes: a submission that writes or names one is imitating a result.
RESULT_FILES = frozenset({"results.json", "grades.csv", "record.json", "feedback.md", "feedback.html",
                          "summary.md", "report.html"})
OUTSIDE = ("/autograder", "../")  # where a planted result would be looked for, outside the submission's folder
# A line that looks like a test runner's or a grader's verdict: pytest's "30 passed", "All tests passed",
# "Score: 100/100".
CLAIM = re.compile(r"\b\d+ passed\b|\ball (the )?tests? (have )?passed\b|\bscore\W{0,3}\d+(\.\d+)?\s*/\s*\d+",
                   re.IGNORECASE)
MAX_PER_KIND = 3  # flags of one kind per submission: enough to see the attempt, never a flood
MAX_SEEN = 120  # characters of a seen line or string quoted in a flag
MAX_ENTRIES = 2000  # top-level entries of a folder listed
MAX_SOURCE_BYTES = 4_000_000  # bytes of source read in all for named_paths
_LITERAL = re.compile(r"""(['"])([^'"\n\\]{1,200})\1""")  # a short one-line string literal (no escapes)


def _quoted(text: str) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= MAX_SEEN else text[:MAX_SEEN] + "…")


def top_files(folder: Path) -> set[str]:
    """Names at the top of `folder` (bounded; links are names too, never followed)."""
    names = set()
    try:
        with os.scandir(folder) as entries:
            for i, entry in enumerate(entries):
                if i >= MAX_ENTRIES:
                    break
                names.add(entry.name)
    except OSError:
        pass
    return names


def written_results(before: set[str], after: set[str]) -> list[str]:
    """Flags for result files that appeared in the submission's own folder while it was graded."""
    found = sorted(n for n in after - before if n.lower() in RESULT_FILES)
    return [f"wrote {_quoted(n)} into its own folder while graded (a result file; the grader never reads it)"
            for n in found[:MAX_PER_KIND]]


def named_paths(folder: Path) -> list[str]:
    """Flags for string literals in the submission's top-level .py files that name a result file or a
    place outside its folder (where a write is refused): the sign of an attempt to plant a result.

    A text search, not a parse: linear in the bytes read (at most MAX_SOURCE_BYTES in all), so a
    hostile file costs the grader no more than reading it (the scan parses, in its limited helper)."""
    flags, budget = [], MAX_SOURCE_BYTES
    for path in sorted(Path(folder).glob("*.py"))[:50]:
        try:
            if path.is_symlink() or not path.is_file():
                continue
            with open(path, "rb") as handle:
                text = handle.read(budget).decode("utf-8", "replace")
        except OSError:
            continue
        budget -= len(text)
        if not any(key in text for key in ("..", "/autograder", *RESULT_FILES)):
            continue
        seen = set()
        for match in _LITERAL.finditer(text):
            value = match.group(2).strip()
            base = value.rstrip("/").rsplit("/", 1)[-1].lower()
            if base in RESULT_FILES:
                why = "a result file the grader writes"
            elif value in ("..", "../") or value.startswith(OUTSIDE):
                why = "a place outside its own folder, where the sandbox refuses writes"
            else:
                continue
            if value not in seen:
                seen.add(value)
                line = text.count("\n", 0, match.start()) + 1
                flags.append(f"{path.name} line {line}: names {_quoted(value)} ({why})")
                if len(flags) >= MAX_PER_KIND * 2:
                    return flags  # enough to see the attempt; the rest of a flood is never counted
        if budget <= 0:
            break
    return flags


def printed_claims(outputs: list[str]) -> list[str]:
    """Flags for printed lines that look like a verdict ("30 passed"), from each child's output."""
    found: list[str] = []
    for text in outputs:
        for line in text.splitlines():
            # Characters that show nothing (a zero-width space in "All tests\u200b passed") hide no claim.
            line = "".join(c for c in line if unicodedata.category(c) != "Cf")
            if CLAIM.search(line) and (quoted := _quoted(line.strip())) not in found:
                found.append(quoted)
    return [f"printed a line that looks like a test result: {q} (printed text is never read as a grade)"
            for q in found[:MAX_PER_KIND]]


def early_exits(errors: list[tuple[str, dict]]) -> list[str]:
    """Flags for files that ended the program while being graded: (file name, error record) pairs of
    the calls that failed. sys.exit raises SystemExit; os._exit ends the child, which the
    transport records as a crash with the exit status."""
    flags = []
    for file, error in errors:
        kind, message = str(error.get("type", "")), str(error.get("message", ""))
        if kind == "SystemExit":
            flags.append(f"{file} ended the program while being imported (sys.exit({message[:20]})): "
                         "its tests could not run")
        elif kind == "Crashed" and "ended the process (exit status" in message:
            # The status says how, not who: os._exit(n) in this file, or a library that gave up in its process
            # (threads another file started, say).
            status = re.search(r"exit status (-?\d+)", message)
            flags.append(f"{file}'s process ended while it was graded (exit status {status.group(1) if status else '?'}:"
                         " os._exit, or a library giving up in that process): the tests that needed it could not run")
    unique = list(dict.fromkeys(flags))
    return unique[:MAX_PER_KIND]

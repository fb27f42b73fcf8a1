"""Errors raised in a student's code, told in a few lines at their line.

pytest's report of an exception runs through the tests and the libraries; a student needs what was raised,
at which line of their own files (or notebook cells), who called it, and a pointer when the lesson knows
the pattern. The same error at the same line is told in full once; a stub's NotImplementedError too.
"""
from __future__ import annotations

import traceback
from pathlib import Path

import pytest

# Folders beside a student's files that hold no code of theirs.
NOT_YOURS = {"tests", "tools", ".venv", "venv", "env", "site-packages"}
MESSAGE_CHARS = 300


class DoesNotImport:
    """Stands in for a module that raised on import: any use fails the test with the reason."""

    def __init__(self, name: str, error: BaseException):
        self._message = (
            f"{name}.py does not import, so this test cannot run. Fix this first:\n"
            + "".join(traceback.format_exception_only(type(error), error))
        )
        # The error is shown once, in the first test that needs the file; the others say where it is,
        # so one broken file does not print the same message once per test.
        self._again = f"{name}.py does not import (the error is shown in the first failing test that needs it)."
        self._shown = False

    def __getattr__(self, attribute):
        message, self._shown = (self._again if self._shown else self._message), True
        pytest.fail(message, pytrace=False)


class StudentErrors:
    """Where a student's code is (`folder`, and the notebook cells a kernel compiled, `cells`), and what
    has been told already in this run.

    `error_fact(error, line)` is the lesson's: a fact id about an error and the line that raised it (or
    None), and `error_hints` its words for each fact."""

    def __init__(self, folder: Path, *, error_fact=None, error_hints=None):
        self.folder = folder
        # When the tests run on a notebook's code (tools/notebook_tests.py), the file names its kernel gave
        # the notebook's cells, and how to name them ("Cell In[7]"): an error raised there is the student's too.
        self.cells: dict[str, str] = {}
        self.error_fact, self.error_hints = error_fact, dict(error_hints or {})
        self.unfinished_seen: dict[str, str] = {}
        self.errors_seen: dict[str, str] = {}

    def forget(self) -> None:
        self.unfinished_seen.clear()
        self.errors_seen.clear()

    def not_implemented(self, error: NotImplementedError, test: str) -> str:
        text = str(error) or "a task this test needs is not implemented yet"
        first = self.unfinished_seen.setdefault(text, test)
        if first != test:
            return f"{text.splitlines()[0]} (as in {first} above)"
        return text + "\nWrite that task in your file, then run `make test` again."

    def raised(self, error: BaseException, test: str) -> str | None:
        """One short message for an exception raised in the student's code: what, where, and a pointer for
        the lesson's known patterns. None when the exception did not come from their files."""
        frames = self.frames(error)
        if not frames:
            return None
        place = f"{type(error).__name__} at {self._file_name(frames[-1])}:{frames[-1].lineno}"
        first = self.errors_seen.setdefault(place, test)
        if first != test:
            return f"your code raised {place} (as in {first} above)"
        text = " ".join(str(error).split())
        if len(text) > MESSAGE_CHARS:
            text = text[:MESSAGE_CHARS] + " ..."
        message = f"your code raised {type(error).__name__}: {text}\n  at {self.line(frames[-1])}"
        if len(frames) > 1:
            callers = ", ".join(f"{self._file_name(f)}:{f.lineno}" for f in frames[:-1][-3:])
            message += f"\n  called from {callers}"
        fact = self.error_fact(error, frames[-1].line or "") if self.error_fact else None
        if fact in self.error_hints:
            message += "\n" + self.error_hints[fact]
        return message

    def frames(self, error: BaseException) -> list:
        """The traceback's frames that are in the student's files or notebook cells (not the tests, not libraries)."""
        frames = []
        for frame in traceback.extract_tb(error.__traceback__):
            path = Path(frame.filename).resolve()
            if frame.filename in self.cells or (
                    self.folder in path.parents and not NOT_YOURS.intersection(path.relative_to(self.folder).parts[:-1])):
                frames.append(frame)
        return frames

    def _file_name(self, frame, relative: bool = False) -> str:
        if frame.filename in self.cells:
            return self.cells[frame.filename]
        path = Path(frame.filename).resolve()
        return str(path.relative_to(self.folder)) if relative else path.name

    def line(self, frame) -> str:
        return f"{self._file_name(frame, relative=True)}:{frame.lineno}, in {frame.name}: {(frame.line or '').strip()}"

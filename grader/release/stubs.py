"""Stage "stubs": derive a lesson's student files (its assignment folder) from its reference (its solutions).

The reference is the one source of truth. Each solution region is marked

    # BEGIN SOLUTION (Task N · name)
    ...reference code...
    # END SOLUTION

and becomes, at the same indentation, the same two lines in every stub:

    # TODO Task N · name: replace these two lines with your code (handout §…).
    raise NotImplementedError("Task N · name: not implemented yet (handout §…)")

Everything outside the markers (imports, signatures, docstrings, `super().__init__()`)
is copied unchanged, so a stub keeps its contract and its documentation.
The handout section is the nearest "handout §…" written above the region, i.e. the
docstring of the function or class the region belongs to.

A lesson commits either every stub in its assignment folder (each the generator's output, byte for
byte, so a student who clones the kit's folder gets what the release ships) or none (the release
generates them, as it always does). `main(lesson=..., check=True)` fails on anything in between.
"""
from __future__ import annotations

import difflib
import hashlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # only to show paths short

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION \((?P<task>Task \d+ · [^)]+)\)\s*$")
END = re.compile(r"^[ \t]*# END SOLUTION\s*$")
SECTION = re.compile(r"handout (§\d+(?:\s*[–-]\s*§?\d+)?(?:,\s*§\d+(?:\s*[–-]\s*§?\d+)?)*)")

# Lines shorter than this (spaces not counted) are too generic to prove a leak: `return x`, `nn.GELU(),`.
MIN_LEAK_CHARS = 14


class MarkerError(ValueError):
    """A solution file whose BEGIN/END SOLUTION markers do not pair up."""


def _regions(lines: list[str]) -> list[tuple[int, int, re.Match]]:
    """(begin index, end index, BEGIN match) for each region; raises MarkerError when unbalanced."""
    regions, open_at, match = [], None, None
    for n, line in enumerate(lines):
        begin = BEGIN.match(line)
        if begin:
            if open_at is not None:
                raise MarkerError(f"line {n + 1}: BEGIN SOLUTION inside the region opened at line {open_at + 1}; "
                                  "close it with '# END SOLUTION' first")
            open_at, match = n, begin
        elif END.match(line):
            if open_at is None:
                raise MarkerError(f"line {n + 1}: END SOLUTION without a BEGIN SOLUTION above it")
            regions.append((open_at, n, match))
            open_at = None
        elif line.lstrip().startswith("#") and "BEGIN SOLUTION" in line:
            raise MarkerError(f"line {n + 1}: write the marker as '# BEGIN SOLUTION (Task N · name)'")
    if open_at is not None:
        raise MarkerError(f"line {open_at + 1}: BEGIN SOLUTION is never closed; add '# END SOLUTION'")
    return regions


def _section_above(lines: list[str], index: int) -> str | None:
    for line in reversed(lines[:index]):
        found = SECTION.search(line)
        if found:
            return found.group(1)
    return None


def make_stub(source: str) -> str:
    """The student version of one solution file: each solution region replaced by a TODO and a raise."""
    lines = source.splitlines(keepends=True)
    out, last = [], 0
    for begin, end, match in _regions(lines):
        indent, task = match.group("indent"), match.group("task")
        section = _section_above(lines, begin)
        where = f" (handout {section})" if section else ""
        out.extend(lines[last:begin])
        out.append(f"{indent}# TODO {task}: replace these two lines with your code{where}.\n")
        out.append(f'{indent}raise NotImplementedError("{task}: not implemented yet{where}")\n')
        last = end + 1
    out.extend(lines[last:])
    return "".join(out)


def solution_lines(source: str) -> list[str]:
    """The non-trivial code lines inside the solution regions, stripped and without trailing comments.

    A release or a stub that contains one of these has leaked reference code.
    Comment-only lines, generic short lines (`return x`, `T = x.size(1)`) and bare openers
    (`self.ffn = nn.Sequential(`) are left out. Compare with spaces removed: a copy may be reformatted.
    """
    lines = source.splitlines()
    found = []
    for begin, end, _ in _regions(lines):
        for line in lines[begin + 1:end]:
            code = _strip_comment(line).strip()
            squeezed = "".join(code.split())
            if len(squeezed) >= MIN_LEAK_CHARS and squeezed[-1] not in "([{":
                found.append(code)
    return found


def _strip_comment(line: str) -> str:
    """The code part of a line (a '#' inside a string literal is kept)."""
    quote = None
    for n, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "#":
            return line[:n]
    return line


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def stub_pairs(*, lesson) -> list[tuple[Path, Path]]:
    """(solution file, its stub in the student folder) for every solution .py of the lesson that has markers."""
    return [(solution, lesson.assignment / solution.name) for solution in sorted(lesson.solutions.glob("*.py"))
            if "BEGIN SOLUTION" in solution.read_text(encoding="utf-8")]


def stub_texts_of(solutions: Path) -> dict[str, str]:
    """file name -> the stub a student gets, for one lesson's reference folder wherever it lives."""
    texts = {}
    for solution in sorted(Path(solutions).glob("*.py")):
        source = solution.read_text(encoding="utf-8")
        if "BEGIN SOLUTION" in source:
            texts[solution.name] = make_stub(source)
    return texts


def _digest(text: str) -> str:
    # Line endings may change on a student's machine; the content is what counts.
    return hashlib.sha256(text.replace("\r\n", "\n").encode("utf-8")).hexdigest()


def main(*, lesson, check: bool = False) -> int:
    """Write the lesson's stubs into its assignment folder (or, with check=True, report the committed ones that
    differ from their solutions, or a set with some missing). Returns an exit code."""
    wanted = {}
    for solution, stub in stub_pairs(lesson=lesson):
        try:
            wanted[stub] = make_stub(solution.read_text(encoding="utf-8"))
        except MarkerError as error:
            print(f"{_shown(solution)}: {error}", file=sys.stderr)
            return 2
    again = f"make stubs LESSON={lesson.ref}"
    if not check:
        for stub, text in wanted.items():
            if not stub.exists() or stub.read_text(encoding="utf-8") != text:
                stub.parent.mkdir(parents=True, exist_ok=True)
                stub.write_text(text, encoding="utf-8")
                print(f"wrote {_shown(stub)}")
        return 0
    committed = [stub for stub in wanted if stub.exists()]
    if not committed:
        print(f"{lesson.name}: no stub committed in {_shown(lesson.assignment)}; the release generates all "
              f"{len(wanted)} from {_shown(lesson.solutions)}")
        return 0
    missing = [stub for stub in wanted if not stub.exists()]
    stale = [stub for stub in committed if stub.read_text(encoding="utf-8") != wanted[stub]]
    for stub in stale:
        sys.stderr.writelines(difflib.unified_diff(stub.read_text(encoding="utf-8").splitlines(True),
                                                   wanted[stub].splitlines(True), _shown(stub), "regenerated", n=1))
    for stub in missing:
        print(f"{_shown(stub)} is missing, while {len(committed)} other stub(s) of the lesson are committed",
              file=sys.stderr)
    if stale or missing:
        print(f"{len(stale)} stub(s) differ from their solutions and {len(missing)} are missing: run `{again}` and "
              f"commit the result (or remove every stub of {_shown(lesson.assignment)}: the release generates them)",
              file=sys.stderr)
        return 1
    return 0

"""Stage "stubs": derive the student files in assignments/ from the reference in solutions/.

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
"""
from __future__ import annotations

import difflib
import hashlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
ASSIGNMENTS = ROOT / "assignments"

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


def stub_pairs(solutions: Path = SOLUTIONS, assignments: Path = ASSIGNMENTS) -> list[tuple[Path, Path]]:
    """(solution file, stub file) for every solution .py that has markers, lesson by lesson."""
    pairs = []
    for solution in sorted(solutions.glob("*/*.py")):
        if "BEGIN SOLUTION" in solution.read_text(encoding="utf-8"):
            pairs.append((solution, assignments / solution.parent.name / solution.name))
    return pairs


def stub_texts(lesson: str | None = None) -> dict[str, str]:
    """file name -> the stub a student gets, generated from the reference (one lesson, or all)."""
    return {solution.name: make_stub(solution.read_text(encoding="utf-8"))
            for solution, _ in stub_pairs() if lesson is None or solution.parent.name == lesson}


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


def main(*, check: bool = False) -> int:
    """Write the stubs (or, with check=True, report the ones that differ). Returns an exit code."""
    stale = 0
    for solution, stub in stub_pairs(SOLUTIONS, ASSIGNMENTS):
        try:
            wanted = make_stub(solution.read_text(encoding="utf-8"))
        except MarkerError as error:
            print(f"{_shown(solution)}: {error}", file=sys.stderr)
            return 2
        current = stub.read_text(encoding="utf-8") if stub.exists() else None
        if current == wanted:
            continue
        if check:
            stale += 1
            diff = difflib.unified_diff((current or "").splitlines(True), wanted.splitlines(True),
                                        _shown(stub), "regenerated", n=1)
            sys.stderr.writelines(diff)
        else:
            stub.parent.mkdir(parents=True, exist_ok=True)
            stub.write_text(wanted, encoding="utf-8")
            print(f"wrote {_shown(stub)}")
    if stale:
        print(f"{stale} stub(s) differ from their solutions: run `make stubs` and commit the result",
              file=sys.stderr)
        return 1
    return 0

"""A student's code as a grader reads it on the review page: each graded file with numbered,
coloured lines, its difference from the released stub, and the failing tests placed at the
definition they test.

What is graded is found as grading finds it: the submission is copied through
grader/intake/submissions.py's capped `materialise` (folders, zips, notebooks, the same caps and refusals),
and when the intake chose a notebook, its code cells are the file (one view, each cell headed by
a `# In[N]` line, so a line number names one line of one cell). Otherwise the submission's own
`.py` files at its top level are shown, the contract's modules first.

Student text is only ever text here: each line is inline content of the document model
(grader/results/document.py), whose renderer escapes every character, and colouring is done by the standard library's tokenizer (no dependency, and it never runs the
code); a file the tokenizer cannot read to its end keeps its colours up to that point and shows
the rest uncoloured.
"""
from __future__ import annotations

import difflib
import io
import keyword
import re
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path

from grader.intake import submissions as intake
from grader.results.document import Span

MAX_FILE_CHARS = 200_000  # characters of one file shown (a file past it is cut, with a line saying so)
MAX_FILES = 40  # .py files shown of one submission
CELL_HEADER = "# In[{n}]"  # the line that opens each notebook cell in a notebook's view
BUILTINS = frozenset({"print", "len", "range", "super", "isinstance", "int", "float", "list", "dict", "tuple",
                      "set", "zip", "enumerate", "min", "max", "sum", "abs", "getattr", "setattr", "hasattr",
                      "type", "object", "str", "bool", "map", "sorted", "reversed", "any", "all", "round"})


@dataclass(frozen=True)
class CodeFile:
    """One file as the page shows it."""

    name: str  # a contract module's file name, or the notebook's name for its code cells
    text: str
    stub: str | None  # what the release gave under that name (None: nothing, e.g. a helper module)
    cut: bool = False  # True when the file was longer than MAX_FILE_CHARS

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")


# ---------------------------------------------------------------- which files are graded


def submission_of(name: str, path: Path) -> intake.Submission | None:
    """The intake's view of a class-folder entry (folder, .zip or .ipynb), or None for anything else."""
    if path.is_symlink():
        return None
    if path.is_dir():
        return intake.Submission(name=name, source=path, kind="folder")
    suffix = path.suffix.lower()
    if path.is_file() and suffix in (".zip", ".ipynb"):
        return intake.Submission(name=name, source=path, kind="zip" if suffix == ".zip" else "notebook")
    return None


def graded_files(sub: intake.Submission, *, stubs: dict[str, str], lesson, released_cells=None) -> list[CodeFile]:
    """The files of `sub` that grading reads, each with its released stub, the `lesson`'s contract
    modules first. `released_cells` is a callable giving the released notebook's code cells (asked
    only for a notebook submission)."""
    with tempfile.TemporaryDirectory(prefix="review-code-") as scratch:
        dest = Path(scratch) / "copy"
        found = intake.materialise(sub, dest, lesson=lesson)
        if found.notebook:
            notebook = next((p for p in dest.iterdir() if intake.printable(p.name) == found.notebook), None)
            if notebook is None:
                return []
            try:
                cells = intake.notebook_code_cells(notebook, lesson=lesson)
            except Exception:  # a damaged notebook: grading said so in its notes
                return []
            base = list(released_cells()) if released_cells else []
            return [_file(found.notebook, notebook_text(cells), notebook_text(base) if base else None)]
        order = {f"{m}.py": i for i, m in enumerate(lesson.modules)}
        names = sorted((p for p in dest.iterdir() if p.suffix == ".py" and p.is_file() and not p.is_symlink()),
                       key=lambda p: (order.get(p.name, len(order)), p.name))
        files = []
        for path in names[:MAX_FILES]:
            with open(path, "rb") as handle:
                text = handle.read(MAX_FILE_CHARS * 4).decode("utf-8", "replace")
            files.append(_file(path.name, text, stubs.get(path.name)))
        return files


def notebook_text(cells: list[str]) -> str:
    """A notebook's code cells as one text, each cell opened by its `# In[N]` line."""
    return "\n".join(f"{CELL_HEADER.format(n=i)}\n{cell.rstrip()}\n" for i, cell in enumerate(cells, 1)).rstrip()


def _file(name: str, text: str, stub: str | None) -> CodeFile:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    cut = len(text) > MAX_FILE_CHARS
    return CodeFile(name, text[:MAX_FILE_CHARS], stub, cut)


# ---------------------------------------------------------------- colouring


def highlight(text: str) -> list[list]:
    """Each line of `text` as inline content: keywords, names defined, strings, numbers and comments
    as Spans of class k, d, s, n, c or b. Never raises on any text."""
    lines = text.split("\n")
    spans: dict[int, list[tuple[int, int, str]]] = {}  # line index -> (start col, end col, class)

    def mark(start, end, cls):
        (srow, scol), (erow, ecol) = start, end
        for row in range(srow, erow + 1):
            if 1 <= row <= len(lines):
                first = scol if row == srow else 0
                last = ecol if row == erow else len(lines[row - 1])
                spans.setdefault(row - 1, []).append((first, last, cls))

    previous = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, value = token.type, token.string
            if kind == tokenize.COMMENT:
                mark(token.start, token.end, "c")
            elif kind == tokenize.STRING:
                mark(token.start, token.end, "s")
            elif kind == tokenize.NUMBER:
                mark(token.start, token.end, "n")
            elif kind == tokenize.NAME:
                if keyword.iskeyword(value):
                    mark(token.start, token.end, "k")
                elif previous in ("def", "class"):
                    mark(token.start, token.end, "d")
                elif value in BUILTINS:
                    mark(token.start, token.end, "b")
            if kind not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT):
                previous = value
    except (tokenize.TokenError, SyntaxError, ValueError):
        pass  # colours up to where the tokenizer stopped; the text itself is all shown below
    return [_paint(line, sorted(spans.get(i, []))) for i, line in enumerate(lines)]


def _paint(line: str, marks: list[tuple[int, int, str]]) -> list:
    """One line as inline content of the document model: plain text, and Spans in a token's colour."""
    out, at = [], 0
    for start, end, cls in marks:
        if start < at:
            continue
        out += [line[at:start], Span(line[start:end], cls)]
        at = end
    out.append(line[at:])
    return [piece for piece in out if not isinstance(piece, str) or piece]


# ---------------------------------------------------------------- the difference from the stub


def diff_rows(stub: str, text: str) -> list[tuple[str, int | None, str]]:
    """(kind, line number in the student's file or None, line) for a unified view of what changed:
    kind is "+" (the student's), "-" (the stub's, gone), " " (context) or "@" (a hunk's header)."""
    rows = []
    old, new = stub.split("\n"), text.split("\n")
    for group in difflib.SequenceMatcher(None, old, new, autojunk=False).get_grouped_opcodes(2):
        first = group[0]
        rows.append(("@", None, f"stub line {first[1] + 1}, your line {first[3] + 1}"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [(" ", j1 + k + 1, new[j1 + k]) for k in range(j2 - j1)]
                continue
            rows += [("-", None, line) for line in old[i1:i2]]
            rows += [("+", j1 + k + 1, new[j1 + k]) for k in range(j2 - j1)]
    return rows


def diff_counts(stub: str, text: str) -> tuple[int, int]:
    """(lines added, lines removed) from the stub to the student's file."""
    kinds = [kind for kind, _, _ in diff_rows(stub, text)]
    return kinds.count("+"), kinds.count("-")


# ---------------------------------------------------------------- where a test belongs


def definition_lines(text: str, names) -> dict[str, int]:
    """name -> the 1-based line of its `def` or `class` (the first one), for each of `names` found."""
    found = {}
    for name in names:
        match = re.search(rf"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+{re.escape(name)}\b", text, re.MULTILINE)
        if match:
            found[name] = text.count("\n", 0, match.start()) + 1
    return found


def tested_name(test, names) -> str | None:
    """The graded name a failed test is about: the first of `names` it called (the record's `called`),
    else the first its rubric title mentions (a record graded before tests kept their calls)."""
    called = next((n for n in test.called if n in names), None)
    if called is not None:
        return called
    hits = [(m.start(), name) for name in names for m in [re.search(rf"\b{re.escape(name)}\b", test.title)] if m]
    return min(hits)[1] if hits else None

"""IPython's own syntax in a notebook's code cells, made harmless Python: what the grader runs of a notebook.

Magics (`%matplotlib inline`, `%%time`), shell lines (`!pip install torch`, `files = !ls`) and help requests
(`?print`, `obj.method?`) need IPython; a notebook's cells are graded without it, so each such line
becomes `pass` (or an assignment of None), keeping every line number; a timed statement (`%time x = f()`,
a `%%time` cell) keeps its Python, which runs as it does in Jupyter. The grader's intake
(submissions.py) and the students' CI feedback (tools/ci_feedback.py) both use this file: the release ships it
in tests/_feedback/ beside the visible tests' own package. Standard library only.
"""
from __future__ import annotations

import __future__
import re

# Cell magics whose body is Python (timed, captured, profiled): the body runs, only the first line goes.
_CELL_MAGIC_WITH_PYTHON_BODY = {"capture", "time", "timeit", "prun"}
_ASSIGNED_MAGIC = re.compile(r"^(\s*[A-Za-z_][\w\s,]*=\s*)[%!]")
# `%time STATEMENT` runs the statement in the notebook's own namespace (what it assigns is there for the lines after
# it, `%time table = build(5000)`), and `x = %time EXPRESSION` gives x the expression's value: the statement stays.
# (%timeit runs its statement in a namespace of its own, so nothing it assigns is kept: it goes like any magic.)
_TIMED = re.compile(r"^%time\s+(\S.*)$")


# Every flag a `from __future__ import ...` can set in compiled code.
FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


def compile_cell(source: str, filename: str, flags: int = 0) -> tuple:
    """(code, flags for the next cell): a cell compiled as a kernel compiles it, under the `__future__` imports of
    the cells before it (`flags`) and none of the caller's own, adding its own for the cells after it."""
    code = compile(source, filename, "exec", flags, True)
    return code, flags | (code.co_flags & FUTURE_FLAGS)


_WRITEFILE = re.compile(r"""^%%writefile(?:\s+(-a|--append))?\s+("[^"]+"|'[^']+'|\S+)\s*$""")


def written_file(source: str) -> tuple | None:
    """(file name, append, text) of a `%%writefile [-a] NAME` cell, the file IPython writes when the cell runs (a
    later cell may import it); None for any other cell. The name is as written: the caller decides where it may go."""
    first, _, body = source.partition("\n")
    found = _WRITEFILE.match(first.strip())
    if not found:
        return None
    return found.group(2).strip("\"'"), bool(found.group(1)), body if body.endswith("\n") or not body else body + "\n"


def plain_file_name(name: str) -> bool:
    """Whether `name` is a file a notebook may write beside itself here: relative, below its folder, plain."""
    parts = name.split("/")
    return (bool(name) and "\\" not in name and "\0" not in name and not name.startswith("/") and len(parts) <= 4
            and all(part not in ("", ".", "..") and len(part.encode("utf-8", "replace")) <= 255 for part in parts))


def neutralise_magics(source: str, runnable: frozenset | None = None) -> str:
    """Replace IPython magics, shell lines and help requests by harmless Python, keeping every line number.
    `%run NAME.py` imports NAME's names, when `runnable` (the modules the folder holds) has NAME or is None.

    IPython reads them only where a statement starts, so a line inside brackets, a string or a backslash
    continuation is Python whatever it starts with (`% (a, b)` continuing a format, `!= b` continuing a
    comparison)."""
    lines = source.split("\n")
    first = lines[0].lstrip() if lines else ""
    if first.startswith("%%"):
        magic = first[2:].split()[0] if first[2:].split() else ""
        if magic not in _CELL_MAGIC_WITH_PYTHON_BODY:
            # %%bash, %%writefile, %%html ...: the body is not Python.
            return "\n".join(f"pass  # neutralised: {line[:60]}" if i == 0 else "#" + line
                             for i, line in enumerate(lines))
    out, where, in_magic = [], _Continuation(), False
    for line in lines:
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if in_magic:  # a shell line or magic continued with a backslash: the same command
            out.append("#" + line)
        elif where.starts_statement() and (timed := _timed(stripped, "exec")) is not None:
            out.append(indent + timed)
        elif where.starts_statement() and (ran := _RUN.match(stripped)) and (
                runnable is None or ran.group(1) in runnable):
            out.append(f"{indent}from {ran.group(1)} import *  # %run {ran.group(1)}.py")
        elif where.starts_statement() and (stripped.startswith(("%", "!", "?")) or _HELP_AFTER.match(stripped)
                                            or _ipython_call(stripped)):
            out.append(f"{indent}pass  # neutralised: {stripped[:60]}")
        elif where.starts_statement() and (found := _ASSIGNED_IPYTHON.match(line)) and _ipython_call(
                line[found.end():].lstrip()):
            out.append(found.group(1) + "None  # neutralised: " + line[found.end():].lstrip()[:60])
        elif where.starts_statement() and (found := _ASSIGNED_MAGIC.match(line)):
            timed = _timed(line[found.end() - 1:], "eval")
            out.append(found.group(1) + timed if timed is not None else
                       _ASSIGNED_MAGIC.sub(lambda m: m.group(1) + "None  # neutralised: ", line, count=1))
        else:
            out.append(line)
            where.read(line)
            continue
        in_magic = line.endswith("\\")
    return "\n".join(out)


def _timed(text: str, mode: str) -> str | None:
    """The Python of a `%time` line (a whole statement, or an expression for `mode` "eval"), None for any other line or
    for Python that is not whole on its line (IPython would refuse it too)."""
    found = _TIMED.match(text.strip())
    if not found or found.group(1).endswith("\\"):
        return None
    try:
        compile(found.group(1), "<%time>", mode, 0, True)
    except (SyntaxError, ValueError):
        return None
    return found.group(1)


# `%run helpers.py`, a file of the notebook's folder (one a `%%writefile` cell wrote, say): its names come into the
# notebook's namespace, as an import of everything it defines gives them (held-out s57: NameError, multihead 5/25).
_RUN = re.compile(r"^%run\s+([A-Za-z_]\w*)\.py\s*$")
# What a magic becomes in a notebook exported to a script and back (nbconvert, jupytext): `%matplotlib inline` is
# `get_ipython().run_line_magic('matplotlib', 'inline')`, `!pip install x` is `get_ipython().system('pip install x')`.
# Held-out s57: such a line at the top of a set-up cell raised NameError outside IPython, and the cell's imports with
# it (10/100 for a notebook that runs in Jupyter).
_IPYTHON = re.compile(r"^get_ipython\(\)\s*\.\s*(run_line_magic|run_cell_magic|system|getoutput|magic)\s*\(")
_ASSIGNED_IPYTHON = re.compile(r"^(\s*[A-Za-z_][\w\s,]*=\s*)(?=get_ipython\(\))")


def _ipython_call(text: str) -> bool:
    """Whether `text` is one whole statement calling IPython's magic machinery, as an exported magic reads."""
    if not _IPYTHON.match(text):
        return False
    try:
        compile(text, "<magic>", "exec", 0, True)
    except (SyntaxError, ValueError):
        return False
    return True


# `name?`, `obj.attr??`, `torch.*mask*?`: IPython's help (or search) after a name, a whole statement.
_HELP_AFTER = re.compile(r"^[A-Za-z_*][\w.*]*\?\??\s*$")


class _Continuation:
    """Where the next line starts: inside brackets, a string or a backslash continuation, or at a new
    statement. Reads Python lines only (a neutralised line is not Python and is never read)."""

    def __init__(self):
        self.depth, self.quote, self.backslash = 0, "", False

    def starts_statement(self) -> bool:
        return self.depth == 0 and not self.quote and not self.backslash

    def read(self, line: str) -> None:
        i, n = 0, len(line)
        self.backslash = commented = False
        while i < n:
            c = line[i]
            if self.quote:
                if c == "\\":
                    i += 2
                    continue
                if line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = ""
                    continue
            elif c == "#":
                commented = True
                break
            elif c in "\"'":
                self.quote = c * 3 if line.startswith(c * 3, i) else c
                i += len(self.quote)
                continue
            elif c in "([{":
                self.depth += 1
            elif c in ")]}":
                self.depth = max(0, self.depth - 1)
            i += 1
        if line.endswith("\\") and not commented and (not self.quote or len(self.quote) == 1):
            self.backslash = not self.quote  # a backslash ends a line inside a short string only to continue it
        elif len(self.quote) == 1:
            self.quote = ""  # a short string cannot go on past its line: Python says so, not this

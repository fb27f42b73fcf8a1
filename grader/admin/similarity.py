"""Class similarity report: which submissions share code, text or pictures beyond what every student shares.

    python -m grader similarity SUBMISSIONS --out DIR      # DIR/similarity.csv and DIR/similarity.html
    python -m grader similarity SUBMISSIONS --out DIR --pair A B   # DIR/similarity-A-B.html, one pair

Evidence for a person to read, never a grade: nothing here touches a record or grades.csv.

**Code** is compared the way MOSS does it (Schleimer, Wilkerson and Aiken, "Winnowing", SIGMOD 2003):
each file is cut into tokens with comments and docstrings dropped, every identifier replaced by one
symbol and every string literal by another, so renaming, reformatting and comment edits change
nothing; the hashes of every run of CODE_K tokens are winnowed (the smallest hash of each window of
CODE_WINDOW) into a submission's fingerprints, a set, so reordering functions changes nothing either.
Base code is removed before anything is compared: every k-gram of the released student folder
(stubs, visible tests, tools, notebook) and of the handout's own code blocks (`base` data file).

**Text** (the texts the lesson's deliverables declare) is compared by word TEXT_N-grams after the words every student may
share are removed: passages of the handout (the lesson's handout_ngrams.txt, the same fingerprints
the README check uses), of the assignment's own README, the handout's example sentences and the lines
the lesson's picture tool prints (`base` data file).

**Images** (the pictures the lesson's deliverables declare) are compared by a perceptual hash (the
signs of the lowest 16x16 DCT frequencies of a 64x64 grey thumbnail, as pHash does), which survives
re-encoding and resizing. An image within BASE_IMAGE_BITS of a picture the lesson's picture tool
(lesson.toml [similarity] tool) makes the same way for every student (its default input, each mode,
on the reference) is not evidence. SVG and PDF drawings are compared byte for byte.

Which files are the texts and the pictures is the lesson's one declaration of its deliverables
(`Lesson.deliverable_files()`), which its checks read too.

Submissions handing in the same evidence of one kind are one group and one row; pairs are compared
between groups, and only pairs that share fingerprints are looked at (an inverted index), so a class of
500 costs seconds and a class of copies costs what its different submissions cost. The rows kept, the
rows listed and the detailed views drawn (which lines, which words) are capped in total (MAX_PAIR_ROWS,
MAX_LISTED, MAX_DETAILED). Every student file is read through grader/intake/submissions.py's capped
scratch copy and then capped again here.
"""
from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import csv
import ctypes
import hashlib
import importlib
import io
import json
import keyword
import multiprocessing
import os
import re
import sys
import tempfile
import unicodedata
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from grader.intake import submissions as intake
from grader.judging import deliverables
from grader.results.document import (Bullets, Code, Document, Fold, Group, Heading, Image, Link, Mark, Only, Paragraph,
                                     Preformatted, Section, Strong, Table, to_html)

KIT = Path(__file__).resolve().parents[2]


def _rules(lesson):
    """The lesson's deliverable checks module (None for a lesson without deliverables): its
    FINGERPRINTS, when it has some, are what every student may share (the handout, the assignment's README)."""
    module = lesson.deliverables_module
    return importlib.import_module(module) if module else None


# ---- thresholds (documented in README.md, "Similarity"): a pair is flagged on one kind when its score
# reaches the threshold and it shares at least the minimum of evidence.
CODE_K = 20  # tokens per k-gram: one typical statement and a half
CODE_WINDOW = 6  # winnowing window: any run of CODE_K + CODE_WINDOW - 1 shared tokens is always seen
CODE_THRESHOLD = 0.5  # shared fingerprints / the smaller submission's fingerprints
CODE_MIN_SHARED = 12
# One file copied into otherwise own work: a file of at least FILE_MIN_PRINTS fingerprints of which
# FILE_THRESHOLD are found in the other submission (honest files reach about 0.6 on the fixtures).
FILE_THRESHOLD, FILE_MIN_PRINTS = 0.75, 20
TEXT_N = 6  # words per n-gram
TEXT_THRESHOLD = 0.5
TEXT_MIN_SHARED = 8
IMAGE_FLAG_BITS = 32  # perceptual hashes (256 bits) this close or closer are the same picture
BASE_IMAGE_BITS = 32
REPORT_FLOOR = 0.2  # rows below this score on a kind are left out of similarity.csv
# A fingerprint found in more submissions than this is common code (MOSS's -m): it joins no pair.
COMMON_MIN, COMMON_SHARE = 20, 0.1

# ---- caps on what is read from one submission (the intake caps come first)
MAX_CODE_BYTES = 200 << 10  # all code files of one submission together
MAX_NOTEBOOK_BYTES = intake.DEFAULT_LIMITS.max_file_bytes  # outputs (plots) make notebooks big
MAX_TEXT_CHARS = 64 << 10
MAX_SHOWN_LINES = 400  # per side in the detailed view
MAX_DETAILED = 100  # flagged rows drawn side by side in similarity.html; the table lists more
MAX_LISTED = 2000  # flagged rows in the page's table; similarity.csv has more
# ---- caps on what the class comparison keeps, whatever the class looks like: every group's row (at most
# one per submission and kind), and of the pair rows the MAX_PAIR_ROWS strongest and each submission's
# strongest flagged one; the rest are counted and said.
MAX_PAIR_ROWS = 50_000
MAX_NAMED = 8  # members a group's detail names (its members column names all)
MAX_CLUSTER_NAMES = 40  # members a cluster's line names

CSV_COLUMNS = ("a", "b", "kind", "score", "flagged", "detail", "members")
KINDS = ("code", "text", "image")


# =========================================================================== code fingerprints

_CODE_TOKEN = re.compile(r"""
    (?P<string>(?:[rRbBuUfF]{1,2})?(?:\"\"\"[\s\S]*?(?:\"\"\"|\Z)|'''[\s\S]*?(?:'''|\Z)|"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?))
  | (?P<comment>\#[^\n]*)
  | (?P<space>[^\S\n]+|\\\n)
  | (?P<newline>\n)
  | (?P<name>[^\W\d]\w*)
  | (?P<number>\d[\w.]*(?:[eE][-+]?\d+)?)
  | (?P<op>\*\*=?|//=?|->|<<=?|>>=?|[-+*/%@&|^<>=!:]=|\.\.\.|[^\s\w])
""", re.VERBOSE)
_KEPT_NAMES = frozenset(keyword.kwlist) | {"self", "super"}
_CLOSERS = {")", "]", "}"}


# Builtins that compute a value from their arguments and do nothing else, and the parts of a value worked out from
# constants (_no_op_spans).
_PURE_BUILTINS = frozenset({"abs", "len", "int", "float", "str", "bool", "min", "max", "sum", "round", "tuple", "list",
                            "dict", "set", "frozenset", "sorted", "repr", "hash", "pow", "divmod", "ord", "chr", "hex",
                            "bin", "oct", "any", "all", "complex", "bytes", "range", "reversed", "format", "ascii"})
_READS_LOCALS = frozenset({"locals", "vars", "eval", "exec", "dir"})  # a function calling one may read any local
_CONSTANT_PARTS = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Tuple, ast.List,
                   ast.Set, ast.Dict, ast.Subscript, ast.Slice, ast.operator, ast.unaryop, ast.boolop, ast.cmpop,
                   ast.expr_context)


def _no_op_spans(source: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of the statements of `source` that do nothing: `pass`, a bare constant or name
    (`...`, a docstring, `None`, `0`), a value worked out from constants alone, bare or stored to a name the file never
    reads (`_ = 0`, `_d = abs(-1)`), `assert True`, `if False:`, a name stored to itself, and a store to a function's
    local that it never reads, of a value that calls no code (`_d = x`).
    Written after every statement of a classmate's file, they broke nearly every k-gram (red team s37r, s38r).
    [] for text Python cannot parse (a damaged cell: it keeps every token)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    nodes = list(ast.walk(tree))
    read = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}
    # A class attribute is read as one (`self.cache`, `Model.eps`): its store is code, as a dunder's is (`__slots__`,
    # `__all__`), which the runtime reads. Honest held-out files kept a shared cache so (s33b's kira, s37's quin).
    read |= {n.attr for n in nodes if isinstance(n, ast.Attribute) and not isinstance(n.ctx, ast.Store)}
    # A builtin the file gives another meaning (a def, an import, a store) may do anything when called.
    rebound = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    rebound |= {n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    rebound |= {(a.asname or a.name).split(".")[0] for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}

    def pure_call(call) -> bool:  # a builtin that only computes, which the file leaves as it is
        return (isinstance(call.func, ast.Name) and call.func.id in _PURE_BUILTINS and call.func.id not in rebound
                and not call.keywords)

    def constant(value) -> bool:
        """A value worked out from constants alone: operators, displays, subscripts, conditionals and calls of
        builtins that only compute (`1 + 1`, `[0][0]`, `abs(-1)`; red team s40r wrote one after every statement).
        Nothing here reads a name or runs the file's own code."""
        for node in ast.walk(value):
            if isinstance(node, ast.Call):
                if not pure_call(node):
                    return False
            elif isinstance(node, ast.Name):
                if not (node.id in _PURE_BUILTINS and node.id not in rebound):
                    return False
            elif not isinstance(node, _CONSTANT_PARTS):
                return False
        return True

    def false(test) -> bool:
        # The test's own truth: `if not 0:` always runs its body (red team s39r hid a whole file under it).
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Constant):
            return bool(test.operand.value)
        return isinstance(test, ast.Constant) and not test.value

    def unread(target) -> bool:
        return (isinstance(target, ast.Name) and target.id not in read
                and not (target.id.startswith("__") and target.id.endswith("__")))

    def calls_no_code(value) -> bool:
        """A value whose working out runs none of the file's or a library's functions: names, attributes,
        subscripts, operators, displays, constants and builtins that only compute (`x`, `x.shape`, `len(x)`)."""
        for node in ast.walk(value):
            if isinstance(node, ast.Call):
                if not pure_call(node):
                    return False
            elif isinstance(node, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.ListComp,
                                   ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                return False
        return True

    # A store to a function's local that the function (nested ones included) never reads, of a value that calls no
    # code: `_d = x` after every statement of a classmate's functions (red team s41r), where the rule above, the
    # file's names, is escaped by reading `_d` once anywhere in the file. Not where the function can read its
    # locals by name (locals(), vars(), eval, exec), nor for a name it declares global or nonlocal.
    dead = set()
    for function in nodes:
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        inner = list(ast.walk(function))
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _READS_LOCALS for n in inner):
            continue
        loads = {n.id for n in inner if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}
        loads |= {name for n in inner if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
        statements = list(function.body)
        while statements:
            statement = statements.pop()
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # their own scopes
            if isinstance(statement, ast.Assign) and calls_no_code(statement.value) and all(
                    isinstance(t, ast.Name) and t.id not in loads for t in statement.targets):
                dead.add(id(statement))
            statements.extend(c for c in ast.iter_child_nodes(statement) if isinstance(c, ast.stmt))

    def to_itself(node) -> bool:  # `x = x`
        return (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Name) and node.value.id == node.targets[0].id)

    spans = []
    for node in nodes:
        if isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and (constant(node.value)
                                                                          or isinstance(node.value, ast.Name))):
            pass
        elif isinstance(node, ast.Assign) and constant(node.value) and all(unread(t) for t in node.targets):
            pass
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None and constant(node.value) \
                and unread(node.target):
            pass
        elif isinstance(node, ast.If) and not node.orelse and false(node.test):
            pass
        elif isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant) and node.test.value:
            pass
        elif id(node) in dead or to_itself(node):
            pass
        else:
            continue
        spans.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset))
    if not spans:
        return []
    # ast counts columns in UTF-8 bytes on lines split as Python splits them.
    line_starts = [0, *(m.end() for m in re.finditer(r"\r\n|\r|\n", source))]

    def offset(line: int, col: int) -> int:
        begin = line_starts[line - 1] if line - 1 < len(line_starts) else len(source)
        text = source[begin:begin + col]  # at most col characters hold col bytes
        return begin + len(text.encode("utf-8")[:col].decode("utf-8", errors="ignore"))

    merged: list[list[int]] = []
    for start, end in sorted((offset(a, b), offset(c, d)) for a, b, c, d in spans):  # a no-op inside `if False:`
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def code_tokens(source: str) -> tuple[list[str], list[int]]:
    """The normalised tokens of Python source and the line of each. Never raises: text that is not
    Python (a damaged cell, the handout's prose) still becomes tokens, just less meaningful ones.

    Identifiers become `N` (keywords and `self` stay), string literals `S`, comments vanish, a
    docstring (a string that is a whole statement) vanishes, numbers stay as written, layout and a
    trailing comma before a closing bracket are dropped, and so is every statement that does nothing
    (_no_op_spans)."""
    tokens: list[str] = []
    lines: list[int] = []
    line, depth = 1, 0
    statement_start = True
    docstring_at: int | None = None  # where a string that may be a whole statement starts
    skipped = _no_op_spans(source)
    next_skip = 0
    for match in _CODE_TOKEN.finditer(source):
        kind = match.lastgroup
        text = match.group(0)
        while next_skip < len(skipped) and skipped[next_skip][1] <= match.start():
            next_skip += 1
        if next_skip < len(skipped) and skipped[next_skip][0] <= match.start() and kind not in ("newline", "space"):
            line += text.count("\n")
            continue
        if kind == "space" or kind == "comment":
            line += text.endswith("\n")  # a backslash continuation
            continue
        if kind == "newline":
            line += 1
            if depth == 0:
                if docstring_at is not None:
                    del tokens[docstring_at:], lines[docstring_at:]
                    docstring_at = None
                statement_start = True
            continue
        if kind == "op" and text == ";" and depth == 0:
            if docstring_at is not None:
                del tokens[docstring_at:], lines[docstring_at:]
                docstring_at = None
            statement_start = True
            continue
        if kind == "string":
            if statement_start:
                docstring_at = len(tokens)
            tokens.append("S")
            lines.append(line)
            line += text.count("\n")
            statement_start = False
            continue
        docstring_at = None
        if kind == "name":
            tokens.append(text if text in _KEPT_NAMES else "N")
        elif kind == "op":
            if text in _CLOSERS:
                depth = max(0, depth - 1)
                if tokens and tokens[-1] == ",":
                    tokens.pop(), lines.pop()
            elif text in ("(", "[", "{"):
                depth += 1
            tokens.append(text)
        else:
            tokens.append(text)
        lines.append(line)
        statement_start = kind == "op" and text == ":" and depth == 0
    if docstring_at is not None:
        del tokens[docstring_at:], lines[docstring_at:]
    return tokens, lines


_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def _kgram_hashes(tokens: list[str], k: int) -> np.ndarray:
    """A 64-bit hash of every run of k tokens (stable across processes and runs: no salted hash())."""
    if len(tokens) < k:
        return np.zeros(0, dtype=np.uint64)
    # Each distinct token hashed once (a file has ~100 of them among ~1500 tokens).
    id_of = {t: zlib.crc32(t.encode()) | 1 for t in set(tokens)}
    ids = np.fromiter(map(id_of.__getitem__, tokens), dtype=np.uint64, count=len(tokens))
    n = len(tokens) - k + 1
    hashes = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            hashes = hashes * _MULTIPLIER + ids[j:j + n]
        hashes ^= hashes >> np.uint64(29)
    return hashes


def _winnow(hashes: np.ndarray, window: int) -> np.ndarray:
    """Indexes of the winnowed hashes: the rightmost smallest of every window of `window` hashes."""
    if len(hashes) <= window:
        return np.array([int(np.argmin(hashes))]) if len(hashes) else np.zeros(0, dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(hashes, window)
    rightmost = window - 1 - np.argmin(windows[:, ::-1], axis=1)
    return np.unique(rightmost + np.arange(len(windows)))


def base_code_hashes(sources: list[str]) -> set[int]:
    """Every k-gram hash of code every student has (not winnowed: all of it is base)."""
    base: set[int] = set()
    for source in sources:
        base.update(int(h) for h in _kgram_hashes(code_tokens(source)[0], CODE_K))
    return base


# =========================================================================== text fingerprints

def _words(text: str) -> list[tuple[str, int, int]]:
    return deliverables.words(unicodedata.normalize("NFKC", text))


def _hash_words(words: list[str]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(words).encode(), digest_size=8).digest(), "big")


def _covered(words: list[tuple[str, int, int]], n: int, prints: set[int] | frozenset[int], hasher) -> np.ndarray:
    """Which words lie inside an n-gram whose fingerprint is in `prints`."""
    covered = np.zeros(len(words), dtype=bool)
    if not prints:
        return covered
    plain = [w for w, _, _ in words]
    for i in range(len(words) - n + 1):
        if hasher(plain[i:i + n]) in prints:
            covered[i:i + n] = True
    return covered


@dataclass
class TextBase:
    """What every student may write the same way: handout passages (deliverables' 8-grams), the
    assignment README's, the handout's example sentences and the kit tool's printed lines."""

    handout: frozenset[int] = frozenset()  # deliverables.NGRAM-grams, deliverables' hash
    short: frozenset[int] = frozenset()  # SHORT_N-grams of example sentences and tool output
    note: str = ""


SHORT_N = 3


def text_grams(text: str, base: TextBase) -> tuple[dict[int, tuple[int, int]], list[tuple[str, int, int]]]:
    """{fingerprint: (first word, last word)} of the TEXT_N-grams of `text` that touch no base word."""
    words = _words(text[:MAX_TEXT_CHARS])
    base_words = _covered(words, deliverables.NGRAM, base.handout, deliverables.fingerprint)
    base_words |= _covered(words, SHORT_N, base.short, _hash_words)
    grams: dict[int, tuple[int, int]] = {}
    plain = [w for w, _, _ in words]
    for i in range(len(words) - TEXT_N + 1):
        if not base_words[i:i + TEXT_N].any():
            grams.setdefault(_hash_words(plain[i:i + TEXT_N]), (i, i + TEXT_N - 1))
    return grams, words


def short_text_hashes(texts: list[str]) -> set[int]:
    prints: set[int] = set()
    for text in texts:
        plain = [w for w, _, _ in _words(text)]
        prints.update(_hash_words(plain[i:i + SHORT_N]) for i in range(len(plain) - SHORT_N + 1))
    return prints


# =========================================================================== image hashes

def _dct_matrix(n: int) -> np.ndarray:
    k = np.arange(n)[:, None]
    return np.cos(np.pi * (2 * np.arange(n)[None, :] + 1) * k / (2 * n))


HASH_SIDE, HASH_LOW = 64, 16  # a 64x64 grey thumbnail; its 16x16 lowest frequencies make the 256 bits
HASH_BITS = HASH_LOW * HASH_LOW
_DCT = _dct_matrix(HASH_SIDE)


def image_hash(data: bytes) -> int | None:
    """The perceptual hash of a picture (256 bits: the signs of its lowest DCT frequencies against
    their median, as pHash does, on a finer grid because every picture of the lesson's tool shares its
    frame and colour bar); None when it is not a picture Pillow reads within the checker's pixel cap.
    Transparent pixels are composited on white first."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as probe:
            width, height = probe.size
            if width * height > deliverables.MAX_PIXELS or width < 8 or height < 8:
                return None
            if deliverables.too_many_scans(data):  # a JPEG stream, whatever the container (MPO too)
                return None  # minutes of decoding in the grader's own process, for everyone's report
            if probe.format in deliverables.JPEG_FORMATS:
                probe.draft("RGB", (4 * HASH_SIDE, 4 * HASH_SIDE))
            probe.load()
            grey = deliverables.to_grey(probe)  # two pictures per submission: ~7 ms of CPU saved each
    except Exception:  # Pillow raises many kinds for a damaged file; all mean "not a picture"
        return None
    small = np.asarray(grey.resize((HASH_SIDE, HASH_SIDE), Image.Resampling.BOX), dtype=np.float64)
    low = (_DCT @ small @ _DCT.T)[:HASH_LOW, :HASH_LOW].flatten()
    bits = low > np.median(low[1:])  # the first coefficient is the mean brightness: left out of the median
    return int.from_bytes(np.packbits(bits).tobytes(), "big")


def thumbnail_uri(data: bytes, side: int = 320) -> str:
    """A PNG re-drawn by Pillow from the student's picture, as a data: URI (nothing of the original
    file's bytes reaches the page)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > deliverables.MAX_PIXELS or deliverables.too_many_scans(data):
                return ""
            if image.format in deliverables.JPEG_FORMATS:
                image.draft("RGB", (side * 2, side * 2))
            image.load()
            rgb = deliverables.to_rgb(image)
            rgb.thumbnail((side, side))
            buffer = io.BytesIO()
            rgb.save(buffer, format="PNG")
    except Exception:
        return ""
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


# =========================================================================== the base

@dataclass
class Base:
    """Everything every student shares, so it is never evidence."""

    code: set[int] = field(default_factory=set)
    text: TextBase = field(default_factory=TextBase)
    images: list[tuple[str, int]] = field(default_factory=list)  # (what, perceptual hash)
    sources: list[str] = field(default_factory=list)  # said in the report
    notebook: object = None  # () -> the released notebook's code cells
    # The lesson's deliverables compared, by the names its declaration accepts (what -> names).
    texts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    pictures: dict[str, tuple[str, ...]] = field(default_factory=dict)


BASE_FILE = "similarity_base.txt"


def load_base(lesson, *, released: Path | None = None, lesson_data: Path | None = None,
              released_notebook=None) -> Base:
    """The base of `lesson` (a Lesson): its released folder (every .py and notebook code cell), the
    handout fingerprints the README check ships, and the lesson's similarity_base.txt.
    `released_notebook` returns the code cells of a notebook the release builds; it is called only
    when some submission holds a notebook (building it costs seconds)."""
    found = lesson
    released = released or found.assignment
    lesson_data = lesson_data or found.folder / BASE_FILE
    files = found.deliverable_files()
    base = Base(texts={what: d.names for what, d in files.items() if d.kind == "text"},
                pictures={what: d.names for what, d in files.items() if d.kind == "image"})
    sources = []
    for path in sorted(released.rglob("*")):
        if path.suffix == ".py" and path.is_file():
            sources.append(path.read_text(encoding="utf-8", errors="replace"))
        elif path.suffix == ".ipynb" and path.is_file():
            sources += _notebook_cells(path.read_bytes())
    # The release makes the stubs from the reference: a lesson whose folder does not keep them still hands
    # them to every student, so they are common code too (already there when the folder keeps them).
    from grader.release.stubs import stub_texts_of

    sources += [stub for stub in stub_texts_of(found.solutions).values() if stub not in sources]
    base.code = base_code_hashes(sources)
    base.notebook = released_notebook
    base.sources.append(f"the released student folder {released.relative_to(KIT) if released.is_relative_to(KIT) else released}"
                        f" ({len(sources)} code files: stubs, visible tests, tools"
                        f"{', and the released notebook when a submission holds one' if released_notebook else ''})")
    rules = _rules(found)
    # A lesson's checks may fingerprint no handout (FINGERPRINTS is optional): then no passage is common.
    fingerprints = getattr(rules, "FINGERPRINTS", None)
    handout = set() if fingerprints is None else \
        (deliverables.load_fingerprints(fingerprints, section="handout") or set()) | \
        (deliverables.load_fingerprints(fingerprints, section="assignment-readme") or set())
    short: set[int] = set()
    if lesson_data.is_file():
        sections = _read_sections(lesson_data)
        base.code |= {int(x, 16) for x in sections.get("handout-code", [])}
        short |= {int(x, 16) for x in sections.get("text-short", [])}
        for line in sections.get("images", []):
            what, phash = line.rsplit(" ", 1)
            base.images.append((what, int(phash, 16)))
        base.sources.append(f"{lesson_data.name}: the handout's code ({len(sections.get('handout-code', []))} k-grams), "
                            f"its example sentences and the picture tool's printed lines, "
                            f"{len(base.images)} pictures the picture tool makes the same for everyone")
    base.text = TextBase(handout=frozenset(handout), short=frozenset(short))
    if handout:
        base.sources.append(f"{fingerprints.name}: the handout's passages and the assignment README "
                            "(the deliverable checks' fingerprints)")
    return base


def _read_sections(path: Path) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith("@"):
            current = line[1:].split()[0]
            sections[current] = []
        elif current:
            sections[current].append(line.strip())
    return sections


_QUOTED = re.compile(r"“[^”]{1,400}”|\"[^\"\n]{1,400}\"")
_CODE_LINE = re.compile(r"^\s*(def |class |return\b|import |from \S+ import|if .*:|for .*:|assert |print\(|"
                        r"[\w.\[\], ()]+\s*[-+*/@]?=[^=]|@\w|\w[\w.]*\(.*\)\s*(#.*)?$)")


def handout_code(handout: str) -> list[str]:
    """The handout's code, as runs of consecutive code-looking lines (a text handout has no fences)."""
    blocks, current = [], []
    for line in handout.splitlines():
        if _CODE_LINE.match(line) or (current and line.startswith((" ", "\t")) and line.strip()):
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return [b for b in blocks if len(code_tokens(b)[0]) >= CODE_K]


def build_base_file(*, handout: Path, out: Path, tool_outputs: list[tuple[str, bytes, str]]) -> str:
    """Write the lesson's similarity_base.txt from the handout and the picture tool's outputs
    (what, PNG bytes, printed text); only hashes are written, never the handout's text."""
    text = Path(handout).read_text(encoding="utf-8")
    code = sorted(base_code_hashes(handout_code(text)))
    quotes = [m.group(0) for m in _QUOTED.finditer(unicodedata.normalize("NFKC", text))]
    short = sorted(short_text_hashes(quotes + [printed for _, _, printed in tool_outputs]))
    lines = ["# Base for the similarity report (grader/admin/similarity.py): what every student shares.",
             "# Made by `python -m grader.admin.similarity --build-base HANDOUT`; do not edit by hand.",
             f"# handout-sha256={hashlib.sha256(text.encode()).hexdigest()[:16]} code-k={CODE_K} text-short-n={SHORT_N}",
             f"@handout-code count={len(code)}", *(f"{h:016x}" for h in code),
             f"@text-short count={len(short)}", *(f"{h:016x}" for h in short),
             f"@images count={len(tool_outputs)}"]
    for what, png, _ in tool_outputs:
        phash = image_hash(png)
        if phash is not None:
            lines.append(f"{what} {phash:064x}")
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f"wrote {out}: {len(code)} code k-grams, {len(short)} short text n-grams, {len(tool_outputs)} pictures"


# =========================================================================== one submission

@dataclass
class Prints:
    """One submission's fingerprints of one kind as two arrays, a tenth of what a dict of them holds (a
    class's fingerprints are all in memory at once): the hashes, sorted and each once, and where each is
    first found (code: file, first line, last line; text: first word, last word)."""

    hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    where: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int32))

    @classmethod
    def of(cls, hashes, where) -> "Prints":
        """From fingerprints in reading order: one found again keeps where it was found first."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        if not len(hashes):
            return cls()
        where = np.asarray(where, dtype=np.int32).reshape(len(hashes), -1)
        hashes, first = np.unique(hashes, return_index=True)
        return cls(hashes, where[first])

    def __len__(self) -> int:
        return len(self.hashes)

    def held_in(self, hashes: np.ndarray) -> np.ndarray:
        """Which of these fingerprints are among `hashes` (sorted, each once)."""
        return np.isin(self.hashes, hashes, assume_unique=True)

    def without(self, hashes: np.ndarray) -> "Prints":
        keep = ~np.isin(self.hashes, hashes)
        return Prints(self.hashes[keep], self.where[keep])

    def spans(self, mask: np.ndarray) -> list[tuple[int, ...]]:
        return [tuple(int(x) for x in row) for row in self.where[mask]]


@dataclass
class Features:
    name: str
    code: Prints = field(default_factory=Prints)
    code_paths: list[str] = field(default_factory=list)  # the files code.where's first column counts
    # The texts themselves, kept only for the submissions a detailed view draws (`keep_text`).
    code_files: list[tuple[str, str]] = field(default_factory=list)  # (path, text) as read
    texts: dict[str, tuple[str, str]] = field(default_factory=dict)  # what -> (file name, text)
    text_grams: dict[str, Prints] = field(default_factory=dict)
    images: dict[str, tuple[str, int, str]] = field(default_factory=dict)  # what -> (file, hash, digest)
    image_base: dict[str, str] = field(default_factory=dict)  # what -> which kit picture it is
    notes: list[str] = field(default_factory=list)
    has_notebook: bool = False



def _notebook_cells(data: bytes) -> list[str]:
    """The code cells of a notebook (each on its own: no k-gram spans two cells); [] for anything
    that is not a notebook."""
    try:
        nb = json.loads(data.decode("utf-8", errors="replace"))
        cells = nb.get("cells", []) if isinstance(nb, dict) else []
        parts = []
        for cell in cells:
            if isinstance(cell, dict) and cell.get("cell_type") == "code":
                source = cell.get("source", "")
                parts.append("".join(source) if isinstance(source, list) else str(source))
        return [intake.neutralise_magics(p) for p in parts]
    except (ValueError, TypeError, AttributeError, RecursionError):
        return []


def _read_capped(path: Path, cap: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(cap)


def _code_files(folder: Path) -> list[tuple[str, str]]:
    files, budget = [], MAX_CODE_BYTES
    for path in sorted(folder.rglob("*")):
        if budget <= 0:
            break
        rel = path.relative_to(folder).as_posix()
        if not path.is_file() or path.is_symlink():
            continue
        if path.suffix == ".py":
            text = _read_capped(path, budget).decode("utf-8", errors="replace")
        elif path.suffix == ".ipynb":
            for number, cell in enumerate(_notebook_cells(_read_capped(path, MAX_NOTEBOOK_BYTES)), 1):
                if budget <= 0:
                    break
                cell = cell[:budget]
                budget -= len(cell.encode("utf-8", errors="replace"))
                files.append((f"{rel} cell {number}", cell))
            continue
        else:
            continue
        budget -= len(text.encode("utf-8", errors="replace"))
        files.append((rel, text))
    return files


def features_of(folder: Path, name: str, base: Base, *, keep_text: bool = False) -> Features:
    """The fingerprints of one submission's scratch copy (never raises on student content); with
    `keep_text`, the code and texts as read too, for a detailed view."""
    feats = Features(name=name)
    files = _code_files(folder)
    feats.code_paths = [path for path, _ in files]
    feats.has_notebook = any(".ipynb cell " in path for path in feats.code_paths)
    hashes, where = [np.zeros(0, dtype=np.uint64)], [np.zeros((0, 3), dtype=np.int32)]
    for index, (_, text) in enumerate(files):
        tokens, lines = code_tokens(text)
        kgrams = _kgram_hashes(tokens, CODE_K)
        picked = _winnow(kgrams, CODE_WINDOW)
        line = np.asarray(lines, dtype=np.int32)
        hashes.append(kgrams[picked])
        where.append(np.stack([np.full(len(picked), index, dtype=np.int32), line[picked],
                               line[picked + CODE_K - 1]], axis=1) if len(picked) else where[0])
    feats.code = Prints.of(np.concatenate(hashes), np.concatenate(where)).without(
        np.fromiter(base.code, dtype=np.uint64, count=len(base.code)))
    if keep_text:
        feats.code_files = files
    root = os.fspath(folder)
    for what, names in base.texts.items():
        for found in deliverables.find(root, names):
            try:
                raw = deliverables.read_file(root, found, deliverables.MAX_TEXT_BYTES)
                text = deliverables.decode_text(found, raw)
            except (deliverables.Problem, OSError):
                continue
            if keep_text:
                feats.texts[what] = (found, text[:MAX_TEXT_CHARS])
            grams = text_grams(text, base.text)[0]
            feats.text_grams[what] = Prints.of(list(grams), list(grams.values()))
            break
    for what, names in base.pictures.items():
        for found in deliverables.find(root, names):
            try:
                raw = deliverables.read_file(root, found, deliverables.MAX_IMAGE_BYTES)
            except (deliverables.Problem, OSError):
                continue
            digest = hashlib.sha256(raw).hexdigest()
            phash = None if found.lower().endswith((".svg", ".pdf")) else image_hash(raw)
            # A vector drawing (or a file Pillow cannot read) is compared byte for byte instead.
            feats.images[what] = (found, phash or 0, digest if phash is None else "")
            if phash is not None:
                for label, base_hash in base.images:
                    if (phash ^ base_hash).bit_count() <= BASE_IMAGE_BITS:
                        feats.image_base[what] = label
                        break
            break
    return feats


def _extract(job) -> Features:
    sub, base, keep_text = job
    with tempfile.TemporaryDirectory(prefix="similarity-") as scratch:
        copy = Path(scratch) / "copy"
        try:
            # Notebooks stay notebooks: their cells are read here, no modules are generated from them.
            intake.materialise(sub, copy, convert_notebook=False, lesson=None)
        except Exception as exc:  # an unreadable submission is a note, not a failed report
            feats = Features(name=sub.name)
            feats.notes.append(f"could not be read: {type(exc).__name__}")
            return feats
        return features_of(copy, sub.name, base, keep_text=keep_text)


_WORKER_BASE: tuple[Base, bool] | None = None


def _init_worker(base: Base, keep_text: bool) -> None:
    global _WORKER_BASE
    _WORKER_BASE = (base, keep_text)
    # PR_SET_NAME: `top`, `ps -o comm` and `make bench` tell this pool from the grader that forked it.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(15, b"similarity", 0, 0, 0)


def _extract_in_worker(sub) -> Features:
    return _extract((sub, *_WORKER_BASE))


def extract_all(subs, base: Base, jobs: int, *, keep_text: bool = False) -> list[Features]:
    if jobs <= 1 or len(subs) < 8:
        return [_extract((s, base, keep_text)) for s in subs]
    context = multiprocessing.get_context("fork")
    with context.Pool(jobs, initializer=_init_worker, initargs=(base, keep_text)) as pool:
        return pool.map(_extract_in_worker, subs, chunksize=max(1, len(subs) // (jobs * 8)))


# =========================================================================== fingerprints kept between runs
#
# Every grading run ends with this report, and a rerun grades only the submissions that changed: the
# fingerprints of each submission are kept in OUT under the digest of its bytes (grader/admin/regrade.py's),
# and read back while nothing else they depend on has changed: what the class has in common (the base) and
# the code that reads and fingerprints a submission. JSON, never pickle: the file is read back by the next run.

KEPT_FILE = "_similarity-fingerprints.json"  # "_": intake never names a row so (results/storage.py)
_ARRAY_TYPES = ("<u8", "<i4")  # Prints' hashes and where


def _kept_key(base: Base) -> str:
    import PIL

    digest = hashlib.sha256()
    for module in (sys.modules[__name__], deliverables, intake):
        digest.update(Path(module.__file__).read_bytes())
    # The libraries that decode the pictures and hold the hashes: another version may hash a picture otherwise.
    digest.update(f"Pillow {PIL.__version__} numpy {np.__version__}".encode())
    for part in (sorted(base.code), sorted(base.text.handout), sorted(base.text.short), sorted(base.images),
                 sorted(base.texts.items()), sorted(base.pictures.items())):
        digest.update(repr(part).encode())
    return digest.hexdigest()


def _array_text(a: np.ndarray) -> list:
    return [a.dtype.str, list(a.shape), base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")]


def _array_of(value) -> np.ndarray:
    dtype, shape, data = value
    if dtype not in _ARRAY_TYPES:
        raise ValueError(f"not a fingerprint array: {dtype!r}")
    return np.frombuffer(base64.b64decode(data, validate=True), dtype=dtype).reshape([int(n) for n in shape]).copy()


def _kept_entry(f: Features) -> dict:
    return {"code": [_array_text(f.code.hashes), _array_text(f.code.where)], "code_paths": f.code_paths,
            "has_notebook": f.has_notebook,
            "text_grams": {what: [_array_text(p.hashes), _array_text(p.where)] for what, p in f.text_grams.items()},
            "images": {what: list(image) for what, image in f.images.items()}, "image_base": dict(f.image_base)}


def _kept_features(entry: dict, name: str) -> Features:
    def prints(pair) -> Prints:
        hashes, where = (_array_of(a) for a in pair)
        if where.ndim != 2 or len(where) != len(hashes):
            raise ValueError("fingerprints and places differ in number")
        return Prints(hashes, where)

    return Features(name=name, code=prints(entry["code"]), code_paths=[str(p) for p in entry["code_paths"]],
                    has_notebook=bool(entry["has_notebook"]),
                    text_grams={str(what): prints(pair) for what, pair in entry["text_grams"].items()},
                    images={str(what): (str(file), int(phash), str(digest))
                            for what, (file, phash, digest) in entry["images"].items()},
                    image_base={str(what): str(label) for what, label in entry["image_base"].items()})


def _read_kept(path: Path, key: str) -> dict:
    try:
        kept = json.loads(path.read_bytes())
    except (OSError, ValueError):  # none yet, or damaged: every submission is read
        return {}
    if not isinstance(kept, dict) or kept.get("key") != key or not isinstance(kept.get("fingerprints"), dict):
        return {}
    return kept["fingerprints"]


def _extract_kept(subs, base: Base, jobs: int, path: Path) -> list[Features]:
    """extract_all, with the fingerprints `path` keeps for submissions whose bytes are unchanged read back
    instead, and this run's kept for the next (a submission that could not be read is read again)."""
    from grader.admin.regrade import submission_digest
    from grader.results.storage import write_atomic

    key = _kept_key(base)
    kept = _read_kept(path, key)
    digests: list[str | None] = []
    for sub in subs:
        try:
            digests.append(submission_digest(sub.source))
        except OSError:  # read below as always, where an unreadable submission becomes a note, and kept for no run
            digests.append(None)
    feats: list[Features | None] = [None] * len(subs)
    for i, (sub, digest) in enumerate(zip(subs, digests)):
        if digest is not None and isinstance(entry := kept.get(digest), dict):
            try:
                feats[i] = _kept_features(entry, sub.name)
            except (KeyError, TypeError, ValueError, AttributeError):
                pass  # read again below
    todo = [i for i, f in enumerate(feats) if f is None]
    for i, f in zip(todo, extract_all([subs[i] for i in todo], base, jobs)):
        feats[i] = f
    entries = {digest: _kept_entry(f) for digest, f in zip(digests, feats) if digest is not None and not f.notes}
    write_atomic(path, json.dumps({"key": key, "fingerprints": entries}, separators=(",", ":")).encode())
    return feats


# =========================================================================== groups and pairs
#
# Submissions handing in the same evidence of one kind (the same code fingerprints, the same passages of
# one text, the same picture) are one group and one row of similarity.csv. Pairs are compared between
# the groups' first members only, each side counted as the submissions it stands for, so a class of
# copies costs what its different submissions cost. Pair rows are made one submission at a time and only
# the strongest are kept (MAX_PAIR_ROWS, and each submission's strongest flagged one): no table of
# every pair is ever held, whatever the class looks like.

@dataclass
class Row:
    a: str
    b: str
    kind: str
    score: float
    flagged: bool
    detail: str
    what: str = ""  # "code", or the deliverable compared (for the detailed view)
    members: tuple[str, ...] = ()  # a group's row: every submission handing this in (a and b are its first two)


def _order(row: Row) -> tuple:
    """similarity.csv's order: flagged first, then the most similar, then by name (a total order, so the
    same class gives the same file)."""
    return (not row.flagged, -row.score, row.a, row.b, row.kind, row.what)


def _digest(prints: np.ndarray) -> bytes:
    return hashlib.blake2b(np.sort(prints).tobytes(), digest_size=16).digest()


def _grouped(keys: list) -> list[list[int]]:
    """Indexes with equal keys together, in class order, groups by their first member; a None key
    (nothing of this kind handed in) is in no group."""
    groups: dict[object, list[int]] = {}
    for i, key in enumerate(keys):
        if key is not None:
            groups.setdefault(key, []).append(i)
    return list(groups.values())


def _common(n: int) -> int:
    """Submissions of a class of n that may hold a fingerprint before it is common code (MOSS's -m)."""
    return max(COMMON_MIN, int(COMMON_SHARE * n))


def _shared(docs: list[np.ndarray], weights: np.ndarray, n: int):
    """(x, y, shared) for every two documents x < y that share fingerprints, from an inverted index (only
    pairs that share something are touched), one document at a time so no table of pairs is held.
    `weights` says how many submissions each document stands for: a fingerprint held by more than
    max(COMMON_MIN, COMMON_SHARE of the n submissions) is common code and joins no pair."""
    sizes = np.array([len(d) for d in docs], dtype=np.int64)
    if len(docs) < 2 or not sizes.sum():
        return
    hashes = np.concatenate(docs)
    owners = np.repeat(np.arange(len(docs)), sizes)
    order = np.argsort(hashes, kind="stable")
    hashes, owners = hashes[order], owners[order]
    starts = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]])  # one run per distinct fingerprint
    lengths = np.diff(np.r_[starts, len(hashes)])
    held_by = np.add.reduceat(weights[owners], starts)
    joins = (lengths > 1) & (held_by <= _common(n))
    run_of = np.repeat(np.arange(len(starts)), lengths)
    useful = joins[run_of]  # the postings of fingerprints that join pairs, listed by their holder
    by_holder = np.argsort(owners[useful], kind="stable")
    holders, runs = owners[useful][by_holder], run_of[useful][by_holder]
    bounds = np.searchsorted(holders, np.arange(len(docs) + 1))
    for x in range(len(docs)):
        mine = runs[bounds[x]:bounds[x + 1]]
        if not len(mine):
            continue
        # Every holder of every fingerprint of x's, gathered from the runs without a loop.
        spans = lengths[mine]
        positions = np.repeat(starts[mine] - np.cumsum(spans) + spans, spans) + np.arange(spans.sum())
        others = owners[positions]
        others = others[others > x]
        for y, count in zip(*np.unique(others, return_counts=True)):
            yield x, int(y), int(count)


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint16)


def _close_pictures(hashes: list[int]):
    """(x, y, bits apart) for every two perceptual hashes x < y close enough to be reported."""
    if len(hashes) < 2:
        return
    grid = np.frombuffer(b"".join(h.to_bytes(HASH_BITS // 8, "big") for h in hashes), dtype=np.uint8)
    grid = grid.reshape(len(hashes), HASH_BITS // 8)
    for x in range(len(hashes) - 1):
        bits = _POPCOUNT[grid[x + 1:] ^ grid[x]].sum(axis=1)
        for y in np.flatnonzero(1 - bits / (2 * IMAGE_FLAG_BITS) >= REPORT_FLOOR):
            yield x, x + 1 + int(y), int(bits[y])


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    return shown + (f" and {len(names) - MAX_NAMED} more (similarity.csv's members column)"
                    if len(names) > MAX_NAMED else "")


def _group_row(feats: list[Features], group: list[int], kind: str, what: str, handed: str, flagged: bool,
               note: str = "") -> Row:
    names = [feats[i].name for i in group]
    if flagged and len(names) > _common(len(feats)):
        note += ("; so many hand this in that it may be material every student was given: if it is, add it to "
                 "the lesson's base (README, \"Similarity\")")
    return Row(names[0], names[1], kind, 1.0, flagged,
               f"{what}: these {len(names)} submissions hand in {handed}: {_listed(names)}{note}", what, tuple(names))


def _stands_for(feats: list[Features], group: list[int], handed: str) -> str:
    """What a pair row's side means when it is a group's first member."""
    if len(group) < 2:
        return ""
    return f"; {feats[group[0]].name} stands for the {len(group)} submissions handing in {handed}"


def _most_copied_file(f: Features, shared: np.ndarray) -> tuple[float, str]:
    """(share, path) of `f`'s file with the largest share of its fingerprints `shared` (a mask of them),
    among files of FILE_MIN_PRINTS fingerprints or more."""
    files = f.code.where[:, 0]
    total = np.bincount(files, minlength=len(f.code_paths))
    common = np.bincount(files[shared], minlength=len(f.code_paths))
    return max(((int(common[i]) / int(n), f.code_paths[i]) for i, n in enumerate(total) if n >= FILE_MIN_PRINTS),
               default=(0.0, ""))


def _code_rows(feats: list[Features]):
    """Code: a row per group of the same fingerprints, and pair rows between groups scoring the share of
    the smaller submission's fingerprints found in the other, or, when larger, the share of the most
    copied file (one file copied into otherwise own work). Yields (row, its groups)."""
    docs = [f.code.hashes for f in feats]
    groups = _grouped([_digest(d) if len(d) else None for d in docs])
    for group in groups:
        if len(group) > 1:
            prints = len(docs[group[0]])
            yield _group_row(feats, group, "code", "code",
                             f"the same code ({prints} fingerprints beyond what everyone shares)",
                             prints >= CODE_MIN_SHARED), (group,)
    firsts = [g[0] for g in groups]
    weights = np.array([len(g) for g in groups], dtype=np.int64)
    for x, y, shared in _shared([docs[i] for i in firsts], weights, len(feats)):
        fa, fb = feats[firsts[x]], feats[firsts[y]]
        overall = shared / min(len(fa.code), len(fb.code))
        file_share, file_path, owner = 0.0, "", ""
        if shared >= CODE_MIN_SHARED:
            for f, other in ((fa, fb), (fb, fa)):
                share, path = _most_copied_file(f, f.code.held_in(other.code.hashes))
                if share > file_share:
                    file_share, file_path, owner = share, path, f.name
        score = max(overall, file_share)
        if score < REPORT_FLOOR:
            continue
        flagged = (overall >= CODE_THRESHOLD and shared >= CODE_MIN_SHARED) or file_share >= FILE_THRESHOLD
        detail = (f"code: {shared} shared fingerprints = {100 * shared / len(fa.code):.0f}% of {fa.name}'s, "
                  f"{100 * shared / len(fb.code):.0f}% of {fb.name}'s"
                  + _stands_for(feats, groups[x], "the same code") + _stands_for(feats, groups[y], "the same code"))
        if file_path:  # last: clusters read the most shared file from the end of the detail
            detail += f"; most shared file: {owner}'s {file_path} ({100 * file_share:.0f}%)"
        yield Row(fa.name, fb.name, "code", round(score, 3), flagged, detail, "code"), (groups[x], groups[y])


def _text_rows(feats: list[Features], what: str):
    """One text: a row per group of the same passages, pair rows between groups by the share of the
    shorter text's passages found in the other. Yields (row, its groups)."""
    docs = [f.text_grams[what].hashes if what in f.text_grams else Prints().hashes for f in feats]
    groups = _grouped([_digest(d) if len(d) else None for d in docs])
    unit = f"{TEXT_N}-word passages"
    for group in groups:
        if len(group) > 1:
            passages = len(docs[group[0]])
            yield _group_row(feats, group, "text", what, f"the same {what} ({passages} {unit} beyond what everyone "
                             "shares)", passages >= TEXT_MIN_SHARED), (group,)
    firsts = [g[0] for g in groups]
    weights = np.array([len(g) for g in groups], dtype=np.int64)
    for x, y, shared in _shared([docs[i] for i in firsts], weights, len(feats)):
        i, j = firsts[x], firsts[y]
        score = shared / min(len(docs[i]), len(docs[j]))
        if score < REPORT_FLOOR:
            continue
        flagged = score >= TEXT_THRESHOLD and shared >= TEXT_MIN_SHARED
        detail = (f"{what}: {shared} shared {unit} = {100 * shared / len(docs[i]):.0f}% of {feats[i].name}'s, "
                  f"{100 * shared / len(docs[j]):.0f}% of {feats[j].name}'s"
                  + _stands_for(feats, groups[x], f"the same {what}") + _stands_for(feats, groups[y], f"the same {what}"))
        yield Row(feats[i].name, feats[j].name, "text", round(score, 3), flagged, detail, what), (groups[x], groups[y])


def _image_rows(feats: list[Features], what: str):
    """One picture: a row per group of the same picture (the same perceptual hash, or for SVG/PDF the same
    bytes), pair rows between groups by how many bits apart their hashes are. Yields (row, its groups)."""
    have = [i for i, f in enumerate(feats) if what in f.images]
    keys = [None] * len(feats)
    for i in have:
        _, phash, digest = feats[i].images[what]
        keys[i] = ("bytes", digest) if digest else ("hash", phash)
    groups = _grouped(keys)
    for group in groups:
        if len(group) < 2:
            continue
        first = feats[group[0]]
        file, _, digest = first.images[what]
        kit = first.image_base.get(what)  # the same hash: the same kit picture, or none, for every member
        if digest:
            yield _group_row(feats, group, "image", what, f"the same file ({file}), byte for byte", True), (group,)
        else:
            note = f"; each is {kit}, which the kit's tool draws the same for every student: not evidence" if kit else ""
            yield _group_row(feats, group, "image", what, "the same picture (perceptual hashes equal)", not kit,
                             note), (group,)
    # SVG and PDF are compared byte for byte: two different files are never a pair.
    pictures = [g for g in groups if not feats[g[0]].images[what][2]]
    for x, y, bits in _close_pictures([feats[g[0]].images[what][1] for g in pictures]):
        fa, fb = feats[pictures[x][0]], feats[pictures[y][0]]
        # 0.5 at the flagging distance, like the other kinds' thresholds; 0 at twice that distance
        # (pictures of the kit's tool share a frame and colour bar: honest pairs sit 60-100 bits apart).
        score = max(0.0, 1 - bits / (2 * IMAGE_FLAG_BITS))
        same = bits <= IMAGE_FLAG_BITS
        kit = fa.image_base.get(what) if fa.image_base.get(what) == fb.image_base.get(what) else None
        detail = (f"{what}: {fa.images[what][0]} and {fb.images[what][0]}, perceptual hashes {bits} of {HASH_BITS} bits "
                  f"apart" + _stands_for(feats, pictures[x], f"the same {what}")
                  + _stands_for(feats, pictures[y], f"the same {what}"))
        if same and kit:
            detail += f"; both are {kit}, which the kit's tool draws the same for every student: not evidence"
        yield Row(fa.name, fb.name, "image", round(score, 3), same and not kit, detail, what), (pictures[x], pictures[y])


class _PairWork:
    """The roster's groups (OUT/roster.csv): partners of one group each hand in the group's work, which
    looks alike by design. A row standing only for partners of one group is never flagged."""

    def __init__(self, people, feats: list[Features]):
        self.group = {f.name: people.group_of(f.name) for f in feats} if people is not None else {}

    def judge(self, row: Row, names: list[str]) -> Row:
        if not self.group or not row.flagged:
            return row
        found: dict[str, list[str]] = {}
        for name in names:
            found.setdefault(self.group.get(name, ""), []).append(name)
        if len(found) == 1 and "" not in found:
            group = next(iter(found))
            return replace(row, flagged=False, detail=f"{row.detail}; partners in group {group}: their pair work, "
                                                      "not evidence")
        together = [f"{', '.join(members)} are partners in group {group}" for group, members in found.items()
                    if group and len(members) > 1]
        if not together:
            return row
        b = row.b
        if row.members and self.group.get(row.a) and self.group.get(row.a) == self.group.get(b):
            # A group's row names two members who are not partners, so that pair is the evidence it shows.
            b = next(m for m in row.members if self.group.get(m) != self.group.get(row.a))
        return replace(row, b=b, detail=f"{row.detail}; {'; '.join(together)}")


class _Strongest:
    """The pair rows similarity.csv keeps: the `limit` strongest, and each submission's strongest flagged
    one (so no flagged submission is missing from the review page); the others are only counted."""

    def __init__(self, limit: int):
        self.limit, self.rows, self.best = limit, [], {}
        self.found = self.flagged = 0

    def add(self, row: Row) -> None:
        self.found += 1
        self.flagged += row.flagged
        self.rows.append(row)
        if row.flagged:
            for name in (row.a, row.b):
                held = self.best.get(name)
                if held is None or _order(row) < _order(held):
                    self.best[name] = row
        if len(self.rows) >= 2 * self.limit:
            self._trim()

    def _trim(self) -> None:
        self.rows.sort(key=_order)
        del self.rows[self.limit:]

    def kept(self) -> list[Row]:
        self._trim()
        rows = {id(r): r for r in self.rows}
        rows.update((id(r), r) for r in self.best.values())
        return list(rows.values())


@dataclass(frozen=True)
class Cluster:
    """Three or more submissions joined by flagged rows of one kind of evidence."""

    what: str  # the evidence its rows share: "code", or one of the lesson's deliverables
    members: tuple[str, ...]
    centre: str = ""  # the member paired with every other one, when exactly one is: the likely source
    # (or the one who copied from each); empty for a ring where no one member stands out
    file: str = ""  # for code: the file its pairs most often name as the most shared one

    def describe(self) -> str:
        names = ", ".join(self.members[:MAX_CLUSTER_NAMES])
        if len(self.members) > MAX_CLUSTER_NAMES:
            names += f" and {len(self.members) - MAX_CLUSTER_NAMES} more"
        text = f"{self.what}{f' (most shared file: {self.file})' if self.file else ''}: {names}"
        if self.centre:
            text += f" (each paired with {self.centre}: the likely source, or the one who took from each)"
        return text


def _what(row: Row) -> str:
    return row.what or _said_what(row.detail, row.kind)


def _said_what(detail: str, kind: str) -> str:
    # Every row's detail opens with what it compares ("README: 14 shared ..."); rows read back from
    # similarity.csv have no `what` of their own.
    return detail.split(":", 1)[0] or kind


_MOST_SHARED = re.compile(r"most shared file: (.+) \(\d+%\)$")


class _Joined:
    """Clusters built from rows as they come: a flagged group's row joins its members, a flagged pair row
    its two sides, each with its whole group (a group's row, flagged or not, comes before its pairs). Per
    submission it keeps its root, how many submissions it is flagged with and the files its code rows
    name: memory follows the class, never the number of pairs."""

    def __init__(self):
        self.parent: dict[tuple[str, str], tuple[str, str]] = {}
        self.groups: dict[tuple[str, str], tuple[str, ...]] = {}  # a group's first member -> its members
        self.partners: dict[tuple[str, str], int] = {}
        self.files: dict[tuple[str, str], dict[str, int]] = {}

    def _find(self, x):
        while self.parent.setdefault(x, x) != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def _join(self, a, b) -> None:
        self.parent[self._find(a)] = self._find(b)

    def _size(self, key) -> int:
        return len(self.groups.get(key, (key,)))

    def add(self, row: Row) -> None:
        what = _what(row)
        if row.members:
            self.groups[(what, row.members[0])] = row.members
            if row.flagged:
                self._join((what, row.members[0]), (what, row.members[0]))
                self.partners[(what, row.members[0])] = self.partners.get((what, row.members[0]), 0) + \
                    len(row.members) - 1
            return
        if not row.flagged:
            return
        a, b = (what, row.a), (what, row.b)
        self._join(a, b)
        # A side that is a group's first member stands for every member: the group joins in `clusters`.
        self.partners[a] = self.partners.get(a, 0) + self._size(b)
        self.partners[b] = self.partners.get(b, 0) + self._size(a)
        found = _MOST_SHARED.search(row.detail)
        owner = next((name for name in (row.a, row.b) if found and found.group(1).startswith(f"{name}'s ")), None)
        if owner is not None:
            path = found.group(1)[len(owner) + 3:]
            files = self.files.setdefault(a, {})
            files[path] = files.get(path, 0) + 1

    def clusters(self) -> list[Cluster]:
        partners = dict(self.partners)
        for first, members in self.groups.items():
            if first in self.parent:  # flagged with someone (or a flagged group): every member is
                for name in members[1:]:
                    self._join((first[0], name), first)
                    partners[(first[0], name)] = partners.get((first[0], name), 0) + self.partners.get(first, 0)
        roots: dict[tuple[str, str], list[str]] = {}
        for key in self.parent:
            roots.setdefault(self._find(key), []).append(key[1])
        found = []
        for (what, _), members in roots.items():
            if len(members) < 3:
                continue
            hubs = [m for m in members if partners.get((what, m), 0) == len(members) - 1]
            counts: dict[str, int] = {}
            for m in members:
                for path, count in self.files.get((what, m), {}).items():
                    counts[path] = counts.get(path, 0) + count
            file = min(counts, key=lambda path: (-counts[path], path)) if counts else ""
            found.append(Cluster(what, tuple(sorted(members)), hubs[0] if len(hubs) == 1 else "", file))
        return sorted(found, key=lambda c: (-len(c.members), c.what, c.members))


def clusters(rows: list[Row]) -> list[Cluster]:
    """Groups of three or more submissions joined by flagged rows of the same kind of evidence (code with
    code, a text with the same text, a picture with the same picture): one student who took code from one
    classmate, a text from a second and a picture from a third forms no cluster, only three pairs."""
    joined = _Joined()
    seen: set[tuple[str, str, str]] = set()
    for row in sorted(rows, key=lambda r: not r.members):  # groups first: pair rows stand for their groups
        key = (_what(row), *sorted((row.a, row.b)))
        if row.members or key not in seen:
            seen.add(key)
            joined.add(row)
    return joined.clusters()


@dataclass
class Comparison:
    """What the class comparison found: the rows similarity.csv keeps, and what it left out."""

    rows: list[Row]  # every group's row and the kept pair rows, in similarity.csv's order
    clusters: list[Cluster]  # from every flagged row found, kept or not
    pairs_found: int = 0  # pair rows at or above REPORT_FLOOR, kept or not
    pairs_flagged: int = 0

    @property
    def left_out(self) -> tuple[int, int]:
        """(pair rows, flagged pair rows) found and not kept in similarity.csv."""
        pairs = [r for r in self.rows if not r.members]
        return self.pairs_found - len(pairs), self.pairs_flagged - sum(r.flagged for r in pairs)


def comparison(feats: list[Features], *, people=None, limit: int = MAX_PAIR_ROWS) -> Comparison:
    """Compare the class: code, each text and each picture; `people` is the roster (partners are never
    flagged), `limit` the pair rows kept besides each submission's strongest flagged one."""
    strongest = _Strongest(limit)
    joined = _Joined()
    judge = _PairWork(people, feats)
    groups: list[Row] = []
    kinds = [_code_rows(feats)]
    kinds += [_text_rows(feats, what) for what in dict.fromkeys(w for f in feats for w in f.text_grams)]
    kinds += [_image_rows(feats, what) for what in dict.fromkeys(w for f in feats for w in f.images)]
    for rows in kinds:
        for row, sides in rows:
            if judge.group:
                row = judge.judge(row, [feats[i].name for side in sides for i in side])
            joined.add(row)
            if row.members:
                groups.append(row)
            else:
                strongest.add(row)
    return Comparison(sorted(groups + strongest.kept(), key=_order), joined.clusters(), strongest.found,
                      strongest.flagged)


def compare(feats: list[Features]) -> list[Row]:
    """The rows of similarity.csv for `feats` (no roster): see `comparison`."""
    return comparison(feats).rows


# =========================================================================== output

def _csv_cell(text: str) -> str:
    # A spreadsheet runs a cell starting with = + - @ as a formula; names come from students.
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def similarity_csv(rows: list[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        # Row names are sanitised by the intake (no spaces), so a group's members are spaced apart.
        writer.writerow([_csv_cell(r.a), _csv_cell(r.b), r.kind, f"{r.score:.3f}", "yes" if r.flagged else "no",
                         _csv_cell(r.detail), _csv_cell(" ".join(r.members))])
    return buffer.getvalue()


def _read_rows(out_dir: Path) -> list[dict]:
    """Every row of OUT/similarity.csv, each as {"a", "b", "kind", "score", "flagged", "detail", "members"};
    [] when there is no report yet. A file from before groups had no members column: its rows are pairs."""
    path = Path(out_dir) / "similarity.csv"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    found = []
    for row in csv.DictReader(io.StringIO(text)):
        try:
            score = float(row.get("score") or 0)
        except ValueError:
            continue
        found.append({"a": (row.get("a") or "").removeprefix("'"), "b": (row.get("b") or "").removeprefix("'"),
                      "kind": row.get("kind") or "", "score": score, "flagged": row.get("flagged") == "yes",
                      "detail": (row.get("detail") or "").removeprefix("'"),
                      "members": (row.get("members") or "").removeprefix("'").split()})
    return found


def flagged_rows(out_dir: Path) -> list[dict]:
    """The flagged rows of OUT/similarity.csv, each as {"a", "b", "kind", "score", "detail", "members"}
    (members: a group's row lists every submission of the group, a pair's row none); [] when there is no
    report yet."""
    return [{k: v for k, v in row.items() if k != "flagged"} for row in _read_rows(out_dir) if row["flagged"]]


def flagged_by_submission(out_dir: Path) -> dict[str, list[dict]]:
    """submission -> its flagged rows of OUT/similarity.csv, most similar first, each a row of
    `flagged_rows` with "other": the classmate it is flagged with. A group's row is every member's (its
    other: the row's first submission, for the first the second); a pair row whose side is a group's first
    member is every member's of that group too (the detail says whom that side stands for)."""
    rows = _read_rows(out_dir)
    groups = {(_said_what(r["detail"], r["kind"]), r["members"][0]): r["members"] for r in rows if r["members"]}
    found: dict[str, list[dict]] = {}
    for row in rows:
        if not row.pop("flagged"):
            continue
        if row["members"]:
            sides = [(me, row["b"] if me == row["a"] else row["a"]) for me in row["members"]]
        else:
            what = _said_what(row["detail"], row["kind"])
            sides = [(me, row["b"]) for me in groups.get((what, row["a"]), [row["a"]])]
            sides += [(me, row["a"]) for me in groups.get((what, row["b"]), [row["b"]])]
        for me, other in sides:
            found.setdefault(me, []).append({**row, "other": other})
    return {name: sorted(rows, key=lambda p: (-p["score"], p["other"], p["kind"])) for name, rows in found.items()}


def flagged_pairs(out_dir: Path, submission: str) -> list[dict]:
    """The flagged rows of OUT/similarity.csv that involve `submission` (a pair with it, or a group it is
    in), most similar first, each as {"other", "kind", "score", "detail"}; [] when there is no report yet.
    For a review page."""
    return [{k: p[k] for k in ("other", "kind", "score", "detail")}
            for p in flagged_by_submission(out_dir).get(submission, [])]


# Code at 13px with room between lines: at .8em and the default line height, each line's <mark>
# background was painted over the line above, hiding its underscores (scaled_dot_product_attention
# read as "scaled dot product attention").
_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;max-width:110em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}.n{text-align:right}
.pair{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1em}.pair pre{background:#f7f7f7;padding:.5em;
overflow:auto;max-height:40em;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px;line-height:1.6;
white-space:pre-wrap;overflow-wrap:anywhere}mark{background:#fff0a8;color:inherit;padding:0}
details{margin:.5em 0;border:1px solid #ddd;padding:.4em}summary{cursor:pointer;font-weight:600}.muted{color:#666}"""


def _code_side(feats: Features, spans: list[tuple[int, int, int]]) -> list:
    """One side's code, the lines of the shared fingerprints marked, as document blocks."""
    marked: dict[int, set[int]] = {}
    for file_index, first, last in spans:
        marked.setdefault(file_index, set()).update(range(first, last + 1))
    out: list = []
    for index, (path, text) in enumerate(feats.code_files):
        if index not in marked:
            continue
        pieces: list = []
        for n, line in enumerate(text.split("\n")[:MAX_SHOWN_LINES], 1):
            pieces += ["\n"] if n > 1 else []
            pieces.append(Mark(line) if n in marked[index] else line)
        if len(text.split("\n")) > MAX_SHOWN_LINES:
            pieces.append("\n…")
        out += [Paragraph(Strong(path)), Preformatted(pieces)]
    return out or [Paragraph("(no code)", cls="muted")]


def _text_side(feats: Features, what: str, spans: list[tuple[int, int]], base: Base) -> list:
    """One side's text, the shared passages marked, as document blocks."""
    file, text = feats.texts.get(what, ("", ""))
    words = _words(text)
    marked = np.zeros(len(words), dtype=bool)
    for first, last in spans:
        marked[first:last + 1] = True
    runs: list[list] = []  # [marked?, text]: consecutive pieces of the same kind joined
    last_end, open_mark = 0, False

    def add(piece: str, mark: bool) -> None:
        if runs and runs[-1][0] == mark:
            runs[-1][1] += piece
        elif piece:
            runs.append([mark, piece])

    for i, (_, start, end) in enumerate(words):
        add(text[last_end:start], open_mark)  # the space between two marked words stays marked
        open_mark = bool(marked[i])
        add(text[start:end], open_mark)
        last_end = end
    add(text[last_end:], False)
    pieces = [Mark(piece) if mark else piece for mark, piece in runs]
    return [Paragraph(Strong(file)), Preformatted(pieces)]


def _detail(row: Row, by_name: dict[str, Features], base: Base, pictures: dict) -> Fold:
    """One flagged row, both sides next to each other (a group's row: two of its members)."""
    fa, fb = by_name[row.a], by_name[row.b]
    if row.kind == "code":
        left = _code_side(fa, fa.code.spans(fa.code.held_in(fb.code.hashes)))
        right = _code_side(fb, fb.code.spans(fb.code.held_in(fa.code.hashes)))
    elif row.kind == "text":
        ga, gb = fa.text_grams.get(row.what, Prints()), fb.text_grams.get(row.what, Prints())
        left = _text_side(fa, row.what, ga.spans(ga.held_in(gb.hashes)), base)
        right = _text_side(fb, row.what, gb.spans(gb.held_in(ga.hashes)), base)
    else:
        left, right = ([Paragraph(Strong(f.images[row.what][0])),
                        Image(pictures[(f.name, row.what)], "") if pictures.get((f.name, row.what))
                        else Paragraph("(not shown)", cls="muted")] for f in (fa, fb))
    more = f" and {len(row.members) - 2} more" if len(row.members) > 2 else ""
    return Fold(f"{row.a} ↔ {row.b}{more}: {row.kind} {row.score:.2f}", [
        Paragraph(row.detail),
        Group([Group([Heading(row.a, 4), *left]), Group([Heading(row.b, 4), *right])], cls="pair")])


def thresholds_text() -> str:
    return (f"code: at least {CODE_MIN_SHARED} shared fingerprints and {CODE_THRESHOLD:.0%} of the smaller "
            f"submission's (k = {CODE_K} tokens, window {CODE_WINDOW}), or {FILE_THRESHOLD:.0%} of one file of "
            f"{FILE_MIN_PRINTS} fingerprints or more; text: at least {TEXT_MIN_SHARED} shared "
            f"{TEXT_N}-word passages and {TEXT_THRESHOLD:.0%} of the shorter text's; image: perceptual hashes at "
            f"most {IMAGE_FLAG_BITS} of {HASH_BITS} bits apart (SVG/PDF: the same bytes). "
            f"A fingerprint in more than max({COMMON_MIN}, {COMMON_SHARE:.0%} of the class) submissions is common "
            "code and joins no pair.")


def _other_side(row: Row) -> str:
    """The table's b column: for a group's row, how many more hand in the same."""
    return f"{row.b} and {len(row.members) - 2} more" if len(row.members) > 2 else row.b


def similarity_document(found: Comparison, feats: list[Features], base: Base, pictures: dict, *,
                        drawn: list[Features] | None = None, title: str = "Similarity report", note: str = "",
                        kept: int = MAX_PAIR_ROWS) -> Document:
    """similarity.html as a Document (grader/results/document.py: its renderer, its policy, its
    escaping), the side-by-side views too (on the page only), drawn from `drawn` (the features of the
    submissions they show, read with their texts; `feats` when it has them)."""
    flagged = [r for r in found.rows if r.flagged]
    groups = sum(1 for r in flagged if r.members)
    by_name = {f.name: f for f in (feats if drawn is None else drawn)}
    blocks: list = [
        Paragraph(f"{len(feats)} submissions compared; {len(flagged)} flagged row(s) on some kind: {groups} group(s) "
                  f"handing in the same evidence, {len(flagged) - groups} pair(s). Evidence for a person to read, "
                  "never a grade: grades.csv does not change."),
        Paragraph(f"Flagged when: {thresholds_text()} Submissions handing in the same evidence of one kind are one "
                  "group and one row (similarity.csv's members column lists them); pairs are compared between "
                  "groups, each side standing for its group."),
        Paragraph("Not evidence (removed before comparing): " + "; ".join(base.sources) + "."),
    ]
    if note:
        blocks.insert(0, Paragraph(note))
    pairs_left, flagged_left = found.left_out
    if pairs_left:
        blocks.append(Paragraph(
            f"similarity.csv keeps the {kept} strongest pair rows and each submission's strongest flagged "
            f"one: {pairs_left} weaker pair row(s) were found and not kept ({flagged_left} of them flagged). Every "
            "flagged row found, kept or not, joins the clusters below."))
    blocks.append(Section("Clusters of three or more, one kind of evidence each",
                          [Bullets([g.describe() for g in found.clusters]) if found.clusters else Paragraph("None.")]))
    if flagged:
        listed = [Table(("a", "b", "kind", "score", "detail"),
                        [[r.a, _other_side(r), r.kind, f"{r.score:.2f}", r.detail] for r in flagged[:MAX_LISTED]],
                        numeric=frozenset({3}))]
        if len(flagged) > MAX_LISTED:
            listed.append(Paragraph(f"{len(flagged) - MAX_LISTED} more flagged rows in similarity.csv."))
        blocks.append(Section("Flagged rows, most similar first", listed))
        drawn = min(len(flagged), MAX_DETAILED)
        said = [f"The {drawn} most similar flagged rows; open one to see both sides, matching passages highlighted."]
        if len(flagged) > drawn:
            said.append(f" The other {len(flagged) - drawn} are not drawn here: ")
            said += [Code("python -m grader similarity SUBMISSIONS --out DIR --pair A B"),
                     " draws any one pair, and the review page lists each student's flagged rows."]
        blocks.append(Section("Side by side", [
            Paragraph(said), *(Only("html", _detail(r, by_name, base, pictures)) for r in flagged[:drawn])]))
    else:
        blocks.append(Section("Flagged rows, most similar first", [Paragraph("None.")]))
    notes = [f"{f.name}: {n}" for f in feats for n in f.notes]
    if notes:
        blocks.append(Section("Not compared", [Bullets(notes)]))
    return Document(title=title, page_title=title, blocks=blocks, style=_CSS)


def similarity_html(found: Comparison, feats: list[Features], base: Base, pictures: dict, **options) -> str:
    return to_html(similarity_document(found, feats, base, pictures, **options))


def report_section(out_dir: Path) -> list:
    """The similarity section of the class report, from OUT/similarity.csv, as document blocks
    (never raises)."""
    page = Link("similarity.html", "similarity.html")
    title = "Similarity (evidence for a person, not a grade)"
    if not (Path(out_dir) / "similarity.csv").is_file():
        return [Section(title, [Paragraph(["No similarity report: run ", Code("python -m grader similarity "
                                                                             "SUBMISSIONS --out OUT"), "."])])]
    found = [Row(r["a"], r["b"], r["kind"], r["score"], r["flagged"], r["detail"], members=tuple(r["members"]))
             for r in _read_rows(out_dir)]
    rows = [r for r in found if r.flagged]
    if not rows:
        return [Section(title, [Paragraph(["No flagged pair. ", page])])]
    blocks: list = [Paragraph([f"{len(rows)} flagged row(s), most similar first; each opens side by side in ", page,
                               "."]),
                    Table(("a", "b", "kind", "score", "detail"),
                          [[r.a, _other_side(r), r.kind, f"{r.score:.3f}", r.detail] for r in rows[:50]],
                          numeric=frozenset({3}))]
    if len(rows) > 50:
        blocks.append(Paragraph(f"{len(rows) - 50} more in similarity.csv."))
    groups = clusters(found)
    if groups:
        blocks += [Paragraph("Clusters of three or more, one kind of evidence each:"),
                   Bullets([g.describe() for g in groups])]
    return [Section(title, blocks)]


def _notebook_hashes(feats: list[Features], base: Base) -> np.ndarray | None:
    """Every k-gram of the released notebook, when some submission holds a notebook (building the
    notebook costs seconds), else None."""
    if base.notebook is None or not any(f.has_notebook for f in feats):
        return None
    hashes = base_code_hashes(base.notebook() or [])
    return np.fromiter(hashes, dtype=np.uint64, count=len(hashes))


def _without_notebook(feats: list[Features], hashes: np.ndarray | None) -> list[Features]:
    for f in feats if hashes is not None else ():
        f.code = f.code.without(hashes)
    return feats


def _pictures(rows: list[Row], subs, base: Base) -> dict:
    """Thumbnails of the pictures the side-by-side views show."""
    wanted = {(name, r.what) for r in rows if r.kind == "image" for name in (r.a, r.b)}
    by_sub = {s.name: s for s in subs}
    return {(name, what): _picture(by_sub[name], base.pictures.get(what, ())) for name, what in sorted(wanted)}


def _people(out: Path):
    from grader.intake import roster

    try:
        return roster.in_out(out)
    except roster.RosterError:
        return None  # grade and merge stop on it and say which line


def report(*, subs, out: Path, base: Base, jobs: int = 1, max_pairs: int = MAX_PAIR_ROWS) -> Comparison:
    """Compare `subs` (intake.Submission) and write OUT/similarity.csv and OUT/similarity.html; partners
    of one group in OUT/roster.csv are never flagged; `max_pairs` pair rows are kept besides each
    submission's strongest flagged one."""
    from grader.results.storage import write_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    subs = list(subs)
    feats = _extract_kept(subs, base, jobs, out / KEPT_FILE)
    notebook = _notebook_hashes(feats, base)
    found = comparison(_without_notebook(feats, notebook), people=_people(out), limit=max_pairs)
    shown = [r for r in found.rows if r.flagged][:MAX_DETAILED]
    # The class's code and texts are not kept in memory: the submissions drawn are read again.
    names = {name for r in shown for name in (r.a, r.b)}
    drawn = _without_notebook(extract_all([s for s in subs if s.name in names], base, jobs, keep_text=True), notebook)
    write_atomic(out / "similarity.csv", similarity_csv(found.rows))
    write_atomic(out / "similarity.html", similarity_html(found, feats, base, _pictures(shown, subs, base),
                                                          drawn=drawn, kept=max_pairs))
    return found


def run(*, subs, out: Path, base: Base, jobs: int = 1) -> list[Row]:
    """`report`, for a caller that wants only the rows written to similarity.csv."""
    return report(subs=subs, out=out, base=base, jobs=jobs).rows


def pair_page(*, subs, names: tuple[str, str], out: Path, base: Base) -> Path:
    """OUT/similarity-A-B.html: two submissions side by side on every kind they share something on,
    flagged or not (for a pair the class report does not draw)."""
    from grader.results.storage import write_atomic

    by_name = {s.name: s for s in subs}
    chosen = [by_name[name] for name in names]
    feats = extract_all(chosen, base, 1, keep_text=True)
    found = comparison(_without_notebook(feats, _notebook_hashes(feats, base)), people=_people(Path(out)))
    shown = [replace(r, flagged=True) for r in found.rows]  # drawn whatever the thresholds say
    note = ("Compared as a pair: code that much of the class shares counts here, and the class report leaves it "
            "out, so scores can differ from similarity.csv's. Every kind with something in common is drawn.")
    page = Path(out) / f"similarity-{names[0]}-{names[1]}.html"
    write_atomic(page, similarity_html(Comparison(shown, []), feats, base, _pictures(shown, chosen, base),
                                       title=f"Similarity: {names[0]} and {names[1]}", note=note))
    return page


def _picture(sub, names: tuple[str, ...]) -> str:
    """A thumbnail of the first of `names` (one declared picture) in `sub`, as a data: URI ('' if none)."""
    with tempfile.TemporaryDirectory(prefix="similarity-") as scratch:
        copy = Path(scratch) / "copy"
        intake.materialise(sub, copy, convert_notebook=False, lesson=None)
        for found in deliverables.find(os.fspath(copy), names):
            try:
                return thumbnail_uri(deliverables.read_file(os.fspath(copy), found, deliverables.MAX_IMAGE_BYTES))
            except (deliverables.Problem, OSError):
                continue
    return ""


def released_notebook_code(lesson) -> list[str]:
    """The code cells of `lesson`'s released notebook, when the kit builds one ([] otherwise).
    Building it runs the reference (seconds), so it is asked for only when a submission has a notebook."""
    try:
        from grader.release import notebook

        return [cell.source for cell in notebook.build(student=True, lesson=lesson).cells if cell.cell_type == "code"]
    except Exception:
        return []


def main(*, submissions, out, lesson, jobs: int | None = None, pair: tuple[str, str] | None = None,
         max_pairs: int = MAX_PAIR_ROWS) -> int:
    """`python -m grader similarity`: compare the class in `submissions`, write OUT/similarity.csv and .html
    (`max_pairs`: see `report`); with `pair`, draw those two submissions side by side in
    OUT/similarity-A-B.html instead."""
    try:
        subs = intake.discover(Path(submissions))
    except (OSError, ValueError) as exc:
        print(f"similarity: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(out)
    subs = [s for s in subs if not _inside(s.source, out_dir)]
    base = load_base(lesson, released_notebook=lambda: released_notebook_code(lesson))
    if pair is not None:
        missing = [name for name in pair if name not in {s.name for s in subs}]
        if missing or pair[0] == pair[1]:
            print(f"similarity: --pair takes two different submissions by their row names (grades.csv's first "
                  f"column, similarity.csv's a and b); {', '.join(missing) or pair[0]} is not one of the "
                  f"{len(subs)} in {submissions}", file=sys.stderr)
            return 2
        out_dir.mkdir(parents=True, exist_ok=True)
        print(f"similarity: {pair_page(subs=subs, names=pair, out=out_dir, base=base)}")
        return 0
    found = report(subs=subs, out=out_dir, base=base, jobs=jobs or os.cpu_count() or 1, max_pairs=max_pairs)
    print(f"compared {len(subs)} submissions: {summary(found)}; {out_dir / 'similarity.csv'}, "
          f"{out_dir / 'similarity.html'}")
    return 0


def summary(found: Comparison) -> str:
    """One line of what the comparison found, for the command's output."""
    flagged = [r for r in found.rows if r.flagged]
    groups = sum(1 for r in flagged if r.members)
    text = f"{len(flagged)} flagged row(s)"
    if groups:
        text += f" ({groups} of them a group handing in the same evidence)"
    if found.clusters:
        text += f", {len(found.clusters)} cluster(s) of three or more"
    pairs_left, flagged_left = found.left_out
    if pairs_left:
        text += f"; {pairs_left} weaker pair row(s) not kept ({flagged_left} flagged), as similarity.html says"
    return text


def _inside(source: Path, out: Path) -> bool:
    try:
        return out.resolve().is_relative_to(source.resolve())
    except OSError:
        return False


def _cli(argv: list[str] | None = None) -> int:
    from grader.lesson import load_lesson

    parser = argparse.ArgumentParser(prog="python -m grader.admin.similarity")
    parser.add_argument("--build-base", metavar="HANDOUT", required=True,
                        help="rewrite the lesson's similarity_base.txt from the handout and its picture tool")
    parser.add_argument("--lesson", default=None, help="the lesson: a name under grader/ or a folder's path")
    args = parser.parse_args(argv)
    lesson = load_lesson(args.lesson)  # an entry point: the lesson is built here and passed on
    outputs = _tool_outputs(lesson)
    print(build_base_file(handout=Path(args.build_base), out=lesson.folder / BASE_FILE, tool_outputs=outputs))
    return 0


def _tool_outputs(lesson) -> list[tuple[str, bytes, str]]:
    """The lesson's picture tool (lesson.toml [similarity]) run on the reference with its default input,
    each mode: (label, PNG bytes, printed text). Trusted code only (the reference)."""
    import contextlib
    import importlib.util

    tool = lesson.picture_tool
    if tool is None or not tool.path.is_file():
        return []
    spec = importlib.util.spec_from_file_location("_lesson_picture_tool", tool.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    picture = lesson.deliverable_files()[tool.writes].names[0]
    outputs = []
    for mode in module.MODES:
        with tempfile.TemporaryDirectory() as scratch:
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                module.main(["--folder", os.fspath(lesson.solutions), "--mode", mode, "--out", scratch])
            png = (Path(scratch) / picture).read_bytes()
            # The tool names the files it wrote by their path: a scratch folder's random name made the base's
            # short-text section differ from one build to the next. A student's run names their own folder.
            said = printed.getvalue().replace(os.path.join(scratch, ""), "")
            outputs.append((tool.label.format(mode=mode), png, said))
    return outputs


if __name__ == "__main__":
    sys.exit(_cli())

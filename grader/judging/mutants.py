"""A lesson's bug catalogue, made runnable: mutants of its reference, and naming a misconception.

A lesson's catalogue module (lesson.toml `catalogue`) holds data only: `BUGS`, a tuple of `Bug`,
each naming its part, the hidden test it must fail (rubric id), and the patches (file, exact text,
replacement) that turn a copy of the lesson's reference into a submission with the bug. Hint
texts live in the rubric under [hints."<id>"].

When a student fails a test, `Catalogue.identify` replays that test's recorded calls on the
mutants of the part; a mutant whose answers match the student's, within the lesson's MATCH
tolerance (or the bug's own, tighter one), names the misconception.
"""
from __future__ import annotations

import atexit
import importlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.judging.assertions import first_difference
from grader.judging.tolerances import Tol, within
from grader.running.calls import Adapter, InProcessTransport


@dataclass(frozen=True)
class Bug:
    id: str
    component: str
    test: str  # rubric id of the hidden test this bug must fail
    patches: tuple  # ((file, find, replace), ...)
    forbidden: tuple = ()  # forbidden APIs this bug uses (found at run time, not by replay)
    # Named by the visible tests too (known_mistakes.json). False where a visible test early in the run gives the
    # numbers of another, uncatalogued mistake as well and the visible tests' own facts already point at it.
    visible: bool = True
    # How far a student's answers may be from this mutant's and still be this bug; None: the lesson's MATCH. A
    # mistake that moves the numbers only a few times past the tests' tolerance needs a tighter one: at MATCH, a
    # student just past the tolerance for any other reason would be within reach of it too.
    match: Tol | None = None


def apply(bug: Bug, source_dir: Path) -> dict[str, str]:
    """The mutant's sources: file name -> text. Raises if a find text is not there exactly once.
    Anything with `id` and `patches` will do (a correct variant's patches too). A patch whose find text is
    empty adds its file, with `replace` as its text: a submission may hold modules of its own beside the
    reference's files (a helper its files import)."""
    sources = {p.name: p.read_text() for p in sorted(Path(source_dir).glob("*.py"))}
    for file, find, replace in bug.patches:
        if not find:
            sources[file] = _new_file(bug, sources, file, replace)
            continue
        if file not in sources:
            raise ValueError(f"catalogue entry {bug.id}: patches {file}, which neither the reference nor an earlier "
                             "patch holds (a patch with an empty find text adds a file)")
        count = sources[file].count(find)
        if count != 1:
            raise ValueError(f"catalogue entry {bug.id}: the text to replace occurs {count} times in {file} "
                             f"(expected once); update the patch to the current reference:\n{find!r}")
        sources[file] = sources[file].replace(find, replace)
    return sources


def _new_file(bug, sources: dict[str, str], file: str, text: str) -> str:
    """The text of the file an empty find text adds. An empty find on a file already there would match
    everywhere (or mean to replace the whole file): it raises, as an ambiguous find text does."""
    if file in sources:
        raise ValueError(f"catalogue entry {bug.id}: a patch with an empty find text adds {file}, which is there "
                         "already; patch its text, or give the new file a name of its own")
    return text


def write_patched(patched, source_dir: Path, folder: Path) -> Path:
    """A submission folder: the reference's files with `patched.patches` applied (a catalogue bug, or a
    correct variant that takes one of the contract's freedoms); the deliverables too, so only code differs."""
    folder.mkdir(parents=True)
    for path in sorted(Path(source_dir).iterdir()):
        if path.is_file() and path.suffix != ".py":
            shutil.copyfile(path, folder / path.name)
    for name, text in apply(patched, source_dir).items():
        (folder / name).write_text(text)
    return folder


EXACT = Tol(0.0, 0.0, "the same numbers, bit for bit")


class Catalogue:
    """One lesson's bugs over its reference, with the mutant folders and transports built so far
    (once per process: a folder is made on first use and removed by `cleanup`)."""

    def __init__(self, bugs, solutions: Path, match: Tol, *, name: str = "lesson", lesson=None):
        self.bugs: tuple[Bug, ...] = tuple(bugs)
        self.lesson = lesson  # whose contract the mutants follow (handed to the executor)
        self.solutions = Path(solutions)
        self.match = match  # how far a student's answer may be from a mutant's and still be its bug
        self.name = name
        self._root: Path | None = None
        self._root_pid: int | None = None  # the process that made _root: only it removes the folder
        self._transports: dict[str, InProcessTransport] = {}
        self._adapters: dict[str, Adapter] = {}

    @classmethod
    def of(cls, lesson) -> Catalogue:
        """The catalogue a lesson declares (its BUGS), over its reference, matched at its MATCH tolerance."""
        bugs = importlib.import_module(lesson.catalogue_module).BUGS
        match = importlib.import_module(lesson.tolerances_module).MATCH
        return cls(bugs, lesson.solutions, match, name=lesson.name, lesson=lesson)

    @property
    def by_id(self) -> dict[str, Bug]:
        return {b.id: b for b in self.bugs}

    # -- mutants ------------------------------------------------------------------------------
    def apply(self, bug: Bug) -> dict[str, str]:
        return apply(bug, self.solutions)

    def mutant_dir(self, bug_id: str) -> Path:
        """A folder holding the mutant submission of `bug_id` (built once per process)."""
        if self._root is None:
            self._root, self._root_pid = Path(tempfile.mkdtemp(prefix=f"{self.name}-mutants-")), os.getpid()
            atexit.register(self.cleanup)
        folder = self._root / bug_id
        if not folder.exists():
            write_patched(self.by_id[bug_id], self.solutions, folder)
        return folder

    def cleanup(self) -> None:
        """Remove this process's mutant folders. A multiprocessing worker ends with os._exit, which
        skips atexit, so the grading engine's workers call this themselves before they return."""
        if self._root is not None and self._root_pid == os.getpid():
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = self._root_pid = None
            self._transports.clear()
            self._adapters.clear()

    def transport(self, bug_id: str) -> InProcessTransport:
        if bug_id not in self._transports:
            self._transports[bug_id] = InProcessTransport(self.mutant_dir(bug_id), lesson=self.lesson)
        return self._transports[bug_id]

    def _adapter(self, bug_id: str) -> Adapter:
        if bug_id not in self._adapters:
            self._adapters[bug_id] = Adapter(self.transport(bug_id), cache={})
        return self._adapters[bug_id]

    # -- naming the misconception -------------------------------------------------------------
    def identify(self, component: str, test: str, calls, passed=(), agrees: dict | None = None) -> str | None:
        """The first bug of `component` whose mutant answers every recorded call as the student did.

        Bugs that name `test` are tried first, then the component's others, in catalogue order. `passed` are the
        calls of the part's tests the student passed: a bug whose mutant answers one of their numeric calls
        otherwise is ruled out (its numbers on this test alone are a coincidence: two mistakes can agree on one
        test and not on the next). Their errors and inspections are not compared: a student's own error message
        or an extra attribute passes a test as the reference's does, and says nothing about the mistake. `agrees`
        keeps each bug's verdict on `passed` for the next failing test of the same submission and part.
        """
        if not calls:
            return None
        candidates = [b for b in self.bugs if b.component == component and not b.forbidden]
        candidates.sort(key=lambda b: b.test != test)
        agrees = {} if agrees is None else agrees
        reference = self.lesson.reference if self.lesson is not None else None
        for bug in candidates:
            mutant = self._adapter(bug.id)
            match = bug.match or self.match
            answers = [mutant.call(c.header, c.arrays) for c in calls]
            if not all(results_match(c.result, answer, match, free_dtypes=_free(c))
                       for c, answer in zip(calls, answers)):
                continue
            # A mistake that leaves every one of these calls exactly as the reference answers it (a Pre-LN bug on
            # the Post-LN test) cannot be why they failed. A student just past the test's tolerance is within
            # `match` of the reference, and so of such a mutant too: the hint would name a mistake they did not make.
            if reference is not None and all(results_match(reference.call(c.header, c.arrays), answer, EXACT,
                                                           free_dtypes=_free(c))
                                             for c, answer in zip(calls, answers)):
                continue
            if bug.id not in agrees:  # only for a bug whose numbers are this test's: most failures match none
                agrees[bug.id] = not any(
                    _numbers_differ(c.result, mutant.call(c.header, c.arrays), match, _free(c))
                    for c in passed if _numeric(c))
            if agrees[bug.id]:
                return bug.id
        return None

    def identify_forbidden(self, component: str, names) -> str | None:
        for bug in self.bugs:
            if bug.component == component and set(bug.forbidden) & set(names):
                return bug.id
        return None


def _numeric(call) -> bool:
    """A call answered with numbers (a function's or a module's outputs), not an error or an inspection."""
    return (not call.result.error and bool(call.result.outputs) and isinstance(call.header, dict)
            and call.header.get("op") in ("function", "module"))


def _free(call) -> tuple[int, ...]:
    """The outputs of a recorded call whose dtype its contract leaves to the submission (calls.Adapter.free_dtypes)."""
    return tuple(call.header.get("free_dtypes") or ()) if isinstance(call.header, dict) else ()


def _numbers_differ(a, b, t: Tol, free_dtypes=()) -> bool:
    """Both answers are numbers, and they differ: what rules a mistake out. An answer replayed without its outputs
    (a call the replay could not make as the grading did) proves nothing either way."""
    if b.error or len(b.outputs) != len(a.outputs) or not b.outputs:
        return False
    return not results_match(a, b, t, free_dtypes=free_dtypes)


def results_match(a, b, t: Tol, *, free_dtypes=()) -> bool:
    """Two answers to the same call agree (same error, or outputs and gradients within `t`). The outputs listed in
    `free_dtypes` agree by their values whatever their dtypes: the contract lets the submission choose."""
    ea, eb = a.error, b.error
    if ea or eb:  # the same bug raises the same error; a different message is a different bug
        return bool(ea and eb) and all(ea.get(k) == eb.get(k) for k in ("type", "stage", "message"))
    if len(a.outputs) != len(b.outputs) or a.inspect != b.inspect:
        return False
    for i, (da, db) in enumerate(zip(a.outputs, b.outputs)):
        if da.get("kind") != db.get("kind") or (da.get("dtype") != db.get("dtype") and i not in free_dtypes):
            return False  # a float64 answer where the mutant gives float32 is another bug, whatever its values
        if da.get("kind") == "tensor" and not _close(a.array(i), b.array(i), t):
            return False
        if da.get("kind") == "value" and da.get("value") != db.get("value"):
            return False
    if not _values_agree(a, b, t):
        return False
    ga, gb = a.grad_error, b.grad_error
    if bool(ga) != bool(gb) or (ga and ga["type"] != gb["type"]):
        return False
    grads_a, grads_b = a.header.get("grads") or {}, b.header.get("grads") or {}
    if set(grads_a) != set(grads_b):
        return False
    for name in grads_a:
        x, y = a.grad(name), b.grad(name)
        if (x is None) != (y is None) or (x is not None and not _close(x, y, t)):
            return False
    return True


def _values_agree(a, b, t: Tol) -> bool:
    """The structured answers of a "call" or a "session" agree: the same value (numbers within `t`, a list
    never standing for a tuple: the same bug returns the same types) and, step by step, the same values or
    the same errors."""
    if ("value" in a.header) != ("value" in b.header):
        return False
    if "value" in a.header and first_difference(a.value, b.value, tol=t, strict_sequences=True) is not None:
        return False
    steps_a, steps_b = a.steps, b.steps
    if len(steps_a) != len(steps_b):
        return False
    for x, y in zip(steps_a, steps_b):
        if ("error" in x) != ("error" in y):
            return False
        if "error" in x:
            if any(x["error"].get(k) != y["error"].get(k) for k in ("type", "stage", "message")):
                return False
        elif first_difference(x["value"], y["value"], tol=t, strict_sequences=True) is not None:
            return False
    return True


def _close(x, y, t: Tol) -> bool:
    if x is None or y is None or x.shape != y.shape:
        return x is None and y is None
    x, y = x.astype(np.float64), y.astype(np.float64)
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    if not np.array_equal(nan_x, nan_y):
        return False
    finite = np.isfinite(y)
    scale = max(1.0, float(np.max(np.abs(y[finite]), initial=0.0)))
    return bool((nan_x | within(x, y, t.atol, t.rtol, scale)).all())

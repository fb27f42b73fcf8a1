"""The call executor: runs one grader call on a submission's modules and returns plain data.

It runs in two places (docs/architecture.md): inside the sandboxed child on student code,
and in the grader process on trusted code (reference, catalogue mutants, correct variants).
So it may import only torch, numpy and the standard library (and siblings.py beside it, which
imports nothing else; in the grader process only, the lesson's stand-ins): nothing here knows an expected value.

A call is (header, arrays). Values inside the header are JSON; `{"array": "name"}` refers
to an entry of `arrays`. Ops:

  function  {"op": "function", "module": "ops", "name": "normalize",
             "args": [...], "kwargs": {...}, "grad_wrt": ["x"], "grad_out": {"0": "g0"}}
  module    {"op": "module", "module": "layers", "cls": "Mixer",
             "init": [16, 4], "init_kwargs": {}, "dtype": "float64",
             "standins": {"inner": "mixer"},               # replace sub-modules first
             "params": [{"name": "proj.weight", "bind": {"names": ["proj.weight"]}, "array": "p0"}],
             "args": [{"array": "x"}], "kwargs": {}, "grad_wrt": ["x"], "grad_params": true,
             "grad_out": {"0": "g0"}}
  inspect   {"op": "inspect", "module": ..., "cls": ..., "init": [...],
             "attrs": [{"name": "W", "paths": ["W", "weight"]}]}

For contracts that are not a module's forward, arguments and answers are value trees (grader/running/protocol.py,
`pack`/`unpack`: str, bytes, numbers, None, lists, tuples, dicts, arrays):

  call      {"op": "call", "module": "words", "name": "count_words", "args": [tree...], "kwargs": {name: tree}}
            -> "value": tree
  session   {"op": "session", "module": "words", "cls": "Tally", "init": [tree...], "init_kwargs": {...},
             "steps": [{"method": "encode", "args": [...], "kwargs": {...}, "repeat": 1}, {"attr": "ids"},
                       {"argument": 0}],   # init argument 0 (or a keyword's name) as it is now
             "keep_going": false}
            -> "steps": [{"value": tree} | {"error": record}, ...], one per step that ran; an argument
            {"step": i} is what step i returned (a round trip: decode what encode gave). A step's error
            record says which step it was: "step": {"index": i, "of": cls, "method": name | "attr": path}.

A header may carry "standins_source": {name: source} of grader stand-ins lent to a sandboxed child,
each alone, with the first call that needs it (grader/sandbox/lending.py), never held by a child before.
A sandboxed child gets each parameter's binding rule once (grader/sandbox/transport.py, _as_sent): the
call that first needs it carries "rules": {number: rule}, and every call's params name it, {"name", "rule":
number, "array"}, in place of its "bind".
A header's "over_standins" lists graded names of the call's module bound to their stand-ins while
it runs (the answer repeats the list): the grader asks a call again that way when its error is
marked "inside" such a name, i.e. raised while that function of the student's ran, so that a crash
in a function costs only that function's tests (grader/judging/score.py, OverStandIns).

A header's "free_dtypes" lists the outputs whose dtype the lesson's contract leaves to the submission
(grader/running/calls.py, Adapter.free_dtypes): the executor ignores it; the answer is judged with it
(grader/judging/mutants.py).

The result header always holds "error" (None or {"type", "message", "traceback", "stage"}); a library
call the lesson forbids, switched off in the child (grader/running/forbidden.py), shows there as an error
naming it. Outputs are listed in
"outputs" (one entry per returned value: a tensor's array name, dtype and shape, or a short
description of a non-tensor); gradients in "grads" (name -> array name, or None when no
gradient reached that input) and a "grad_error" when backward itself raised.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import importlib.machinery
import itertools
import json
import math
import mmap
import operator
import os
import sys
import threading
import traceback
import types
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.utils._python_dispatch  # loaded by torch itself: named here for _LIFT_DISPATCH_MODES

from grader.running import forbidden, protocol
from grader.running import siblings

ROOT = Path(__file__).resolve().parents[2]  # the kit: paths in messages are shown relative to it

# Each part is graded on its own (the lesson's contract, "One bug costs one part"), over the grader's
# stand-ins for the parts it uses, so a bug (or a failed import) in one file never costs another file's
# points. Each ModuleLoader is handed the lesson (`lesson=`): a Lesson value in the grader's process, its
# LessonSpec (plain data) in a sandboxed child, which gets it from the zygote and never reads the kit.

MAX_ELEMENTS = 4_000_000  # per returned array: far above any call the graders make
LARGE_FILL = 1 << 16  # elements: a random fill this wide costs the CPU generator ~1 ms, drawn one number at a time
SEED = 0
_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_IMPORT_LOCK = threading.RLock()


def _seed(seed=None) -> None:
    """Reset the CPU generator before every stage that may draw random numbers, so unloaded
    parameters (a bug) and dropout come out the same every time. Only the CPU generator: calls
    run on CPU (the sandbox sees no accelerator), and torch.manual_seed would also queue seeds for
    every absent device type (~30-90 us a call, ~150 calls per submission) for the same effect."""
    torch.default_generator.manual_seed(SEED if seed is None else int(seed))  # a call may ask another seed


class _TorchSettings:
    """Torch's process-wide settings as they were before any student code ran in this process, put back wherever a
    submission's import or call changed them. These settings outlive the import or call that set them: red team s44r
    (torch_state) had a file set float64 at import, and a correct part of the same submission, graded later in the
    same process, lost 15 of 20 points (the grader's own stand-in, built in float64, raised a dtype mismatch). So
    `put_back()` runs before and after each call (execute) and each import of a submission's module
    (ModuleLoader.load): a change made by a call ends with it, and a change made by a file's import holds for that
    file's own calls only (ModuleLoader.import_settings), as it would in the student's own process, where their visible
    tests import it: it costs that file's tests what it costs there, and no other's.

    Each ModuleLoader makes its own when it is made, before any of its submission's code runs (in a child: before it
    serves a call), and its first `put_back()` takes the snapshot. Each later one reads every setting (~1 us in all)
    and writes only those that differ. The executor's own choices are not global settings: a float64 call converts the
    module and its inputs (_to_call_dtype), weights are written inside `torch.no_grad()`, and these all end inside the
    call. The generator is not kept here: _seed resets it before every stage that draws. Not covered: flush-denormal
    (torch cannot read it back), interop threads (torch sets them once), and torch function or dispatch modes a
    submission leaves on the stack (the executor's own reads run without them: _unmoded; and a child answers one
    module's calls). Readers and writers are bound when the loader is made, before any student code: a submission
    replacing torch.set_default_dtype cannot stop the put-back."""

    def __init__(self, settings: tuple):
        self.settings = settings  # (name, read(), write(value)): in order, inference mode before grad mode
        self.baseline: tuple | None = None
        self.held: list = []  # inference-mode guards that switched it back: alive, or they would switch it on again

    def now(self) -> tuple:
        return tuple(_read_or_mark(read) for _, read, _ in self.settings)

    def put_back(self, target: tuple | None = None) -> None:
        """Every setting as `target` has it (a file's own, from its import), or as the process had it."""
        if self.baseline is None:
            self.baseline = self.now()
        for (_, read, write), value in zip(self.settings, target or self.baseline):
            if value is _UNREADABLE:
                continue  # unreadable when the snapshot was taken: nothing to put back
            try:
                if read() != value:
                    write(value)
            except Exception:  # a setting a submission broke past mending: the others are still put back
                pass


_UNREADABLE = object()  # a setting a submission broke past reading


def _read_or_mark(read):
    try:
        return read()
    except Exception:
        return _UNREADABLE


def _torch_settings() -> _TorchSettings:
    """The settings _TorchSettings keeps, each read and written through functions bound here, once."""
    import torch._tensor_str as tensor_str

    c = torch._C
    device_holder, set_device = torch._GLOBAL_DEVICE_CONTEXT, torch.set_default_device  # thread-local, as grad mode
    inference_guard = c._InferenceMode
    get_det, get_warn, get_fill = (c._get_deterministic_algorithms, c._get_deterministic_algorithms_warn_only,
                                   c._get_deterministic_fill_uninitialized_memory)
    set_det, set_fill = c._set_deterministic_algorithms, c._set_deterministic_fill_uninitialized_memory
    anomaly_on, anomaly_nan, set_anomaly = torch.is_anomaly_enabled, torch.is_anomaly_check_nan_enabled, torch.set_anomaly_enabled
    print_names = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")
    print_read = operator.attrgetter(*print_names)

    def device():
        context = getattr(device_holder, "device_context", None)
        return None if context is None else context.device

    def inference(value):
        settings.held.append(inference_guard(value))  # a guard holds it while it lives, as torch.inference_mode does

    def deterministic(value):
        set_det(value[0], warn_only=value[1])
        set_fill(value[2])
        inductor = sys.modules.get("torch._inductor.config")  # use_deterministic_algorithms sets it too
        if inductor is not None:
            inductor.deterministic = value[0]

    def print_options(value):
        for name, v in zip(print_names, value):
            setattr(tensor_str.PRINT_OPTS, name, v)

    settings = _TorchSettings((
        ("default dtype", torch.get_default_dtype, c._set_default_dtype),
        ("default device", device, set_device),
        ("inference mode", torch.is_inference_mode_enabled, inference),
        ("grad mode", torch.is_grad_enabled, c._set_grad_enabled),
        ("threads", torch.get_num_threads, torch.set_num_threads),
        ("deterministic algorithms", lambda: (get_det(), get_warn(), get_fill()), deterministic),
        ("anomaly detection", lambda: (anomaly_on(), anomaly_nan()), lambda value: set_anomaly(*value)),
        ("float32 matmul precision", c._get_float32_matmul_precision, c._set_float32_matmul_precision),
        ("print options", lambda: print_read(tensor_str.PRINT_OPTS), print_options),
    ))
    return settings



class GraderCallError(Exception):
    """The call could not be set up on this submission (missing attribute, wrong shape...)."""


# -- what the executor needs of a lesson ----------------------------------------------------------------
@dataclass(frozen=True)
class CallLesson:
    """The executor's view of a lesson, read by attribute from a Lesson value (grading in this process) or
    from its LessonSpec (grader/lesson.py; what a sandboxed child is handed): the same names on both."""

    modules: tuple[str, ...]  # the contract's modules
    always_standin: dict  # module -> the modules it is always graded over stand-ins of
    standin_names: dict  # module -> {contract name: name in the stand-ins file}
    contract: str  # the contract's file as a student sees it named, for error messages
    standins_module: str | None = None  # importable stand-ins (a Lesson only: a child is lent them instead)

    @classmethod
    def of(cls, lesson) -> "CallLesson":
        if isinstance(lesson, CallLesson):
            return lesson
        return cls(modules=tuple(lesson.modules),
                   always_standin={m: tuple(v) for m, v in lesson.always_standin.items()},
                   standin_names={m: dict(v) for m, v in lesson.standin_names.items()},
                   contract=_shown(Path(lesson.contract)),
                   standins_module=getattr(lesson, "standins_module", None))


class ModuleLoader:
    """Imports a submission's modules by plain name and remembers import failures.

    isolated=False (the sandboxed child): the submission's folder is on sys.path and modules
    are imported normally. isolated=True (grader process, trusted code only): the modules live
    in this loader and sys.modules is left as it was found (see `active`), so several
    submissions (reference, mutants, variants) coexist in one process.
    """

    def __init__(self, directory, *, isolated: bool, lesson):
        self.directory = Path(directory).resolve()
        self.lesson = CallLesson.of(lesson)  # a Lesson value (this process) or its LessonSpec (a sandboxed child)
        self.isolated = isolated
        self.modules: dict[str, types.ModuleType] = {}
        self.errors: dict[str, dict] = {}
        # torch's settings as this loader found them, before any of the submission's code ran (in a child: before it
        # serves a call), and as a module's import left them, when it changed any: that file's own calls run with
        # them, as they would in the student's own process, and no other file's do.
        self.torch_settings = _torch_settings()
        self.torch_settings.put_back()  # the snapshot
        self.import_settings: dict[str, tuple] = {}
        self.calling: str | None = None  # the module of the call running (execute)
        self.standins = None  # the grader's stand-ins (a module, or _Lent in a child), once this loader has them
        self.rules: dict = {}  # binding rules a sandboxed child was sent, by their number (as a string)
        self._files: frozenset[str] | None = None  # the folder's module names (_module_files), listed once
        self._source_only_done = False  # _source_only has run for this folder
        # What a part graded over its siblings' stand-ins sees while its own code runs, not only while its file is
        # imported (held-out s48: an import inside forward or __init__, or the sibling's function reached through a
        # helper module, got the student's own sibling, and its bug cost this part too): the sys.modules entries its
        # import saw, and the globals of the student's other modules that hold the sibling's replaced objects.
        self.views: dict[str, dict[str, types.ModuleType]] = {}
        self.rebinds: dict[str, list[tuple[dict, str, object]]] = {}
        self._held: list | None = None  # what _standing_in put in place for the call running, to put back
        # Set by a sandboxed child's serve loop for each call: tells the grader the called file's import is done, so
        # the rest of that first call has the call's time limit, not the import's (grader/sandbox/transport.py).
        self.on_imported = None
        # Set likewise: tells the grader a module of the submission starts importing during the call (a helper imported
        # inside forward or __init__), which has the import's time limit, as the file's own import has.
        self.on_importing = None
        self._importing: str | None = None  # the module whose first import during this call was said to be starting
        self._ran: dict[str, types.ModuleType] = {}  # the folder's modules whose top level ran (_module_ran)

    def receive_standins(self, units: dict) -> None:
        """Stand-ins lent by the grader, each alone ({name: its own source}, grader/sandbox/lending.py):
        each runs in a namespace of its own that is in no sys.modules, so none reaches another."""
        lent = self.standins if isinstance(self.standins, _Lent) else _Lent()
        for name, source in units.items():
            lent.receive(name, source)
        self.standins = lent

    def standin_module(self) -> types.ModuleType:
        if self.standins is None:
            if not self.isolated:
                raise GraderCallError("the grader's stand-ins were not sent to this process (an engine fault)")
            if not self.lesson.standins_module:
                raise GraderCallError("this loader was given no lesson with stand-ins: pass the Lesson value (an engine fault)")
            self.standins = importlib.import_module(self.lesson.standins_module)  # trusted, the grader's process
        return self.standins

    # -- public -------------------------------------------------------------------------
    def load(self, name: str) -> types.ModuleType:
        """The module `name` of this submission, or raise ImportError carrying the first failure."""
        if name in self.modules:
            return self.modules[name]
        if name in self.errors:
            raise _ImportFailure(name, self.errors[name])
        try:
            stand_ins = {dep: self._over_standins(dep, name) for dep in self.lesson.always_standin.get(name, ())}
            self.torch_settings.put_back()  # each import starts as the process was
            try:
                module = self._import(name, stand_ins)
            finally:
                after = self.torch_settings.now()
                if after != self.torch_settings.baseline:
                    self.import_settings[name] = after
                self.torch_settings.put_back(self.import_settings.get(name) if name == self.calling else None)
                if name == self.calling and self.on_imported is not None:
                    self.on_imported()  # once: a module is imported once in a process
        except BaseException as exc:  # a student's import may raise anything, even SystemExit
            if _interrupts(exc, self):
                raise
            self.errors[name] = error_record(exc, "import", self.directory)
            raise _ImportFailure(name, self.errors[name]) from None
        self.modules[name] = module
        if stand_ins:
            self.views[name] = stand_ins
            self.rebinds[name] = self._held_elsewhere(name, stand_ins)
            if name == self.calling:
                self._hold(name)
        return module

    def _held_elsewhere(self, name: str, stand_ins: dict, within=None) -> list[tuple[dict, str, object]]:
        """Where the student's modules (`within`: those modules only) hold an object a sibling's file takes from a
        helper module of theirs and hands on as a contract name the stand-in replaces (siblings.handed_on, read from
        the sibling's source: the sibling is not imported here for it, so its own import still costs only its own
        tests)."""
        mine = self._student_modules()
        helpers = {n: m for n, m in mine.items() if n not in self.lesson.modules}
        if not helpers:
            return []
        namespaces = [vars(m) for n, m in mine.items() if n not in stand_ins] if within is None else \
            [vars(m) for m in within]
        found = []
        for dep, stand_in in stand_ins.items():
            source = siblings.module_source(self.directory, dep)
            if source is not None:
                found += siblings.held_in_helpers(namespaces, source, helpers, stand_in)
        return found

    def _student_modules(self) -> dict[str, types.ModuleType]:
        """The submission's modules loaded so far, helpers and packages of its own included: those this loader imported,
        and those the folder's import hook saw run (_module_ran). Never by walking sys.modules: reading each of ~3,000
        modules' __file__ in a forked child copied their pages and cost a child ~6 ms (make bench)."""
        return {**self._ran, **self.modules}

    def _module_starts(self, name: str) -> None:
        """A module of the submission is about to run its top level (the import hooks of _source_only). Said only
        once the called part's own file is imported (what its import imports has the file's import time already), and
        only for a module's first run in this process: one imported again (popped from sys.modules first) would give
        any call the import's time (held-out s50r)."""
        if (self.on_importing is not None and self._held is not None and self.calling in self.modules
                and name not in self._ran):
            said, self.on_importing = self.on_importing, None
            said()
            self._importing = name

    def _module_ran(self, module: types.ModuleType) -> None:
        """A module of the submission has run its top level. Imported during a call of a part graded over stand-ins
        (held-out s49r: a helper first imported inside __init__ or forward), its globals that hold a sibling's
        handed-on object hold the stand-in from now on, in this call and the part's later ones."""
        self._ran[module.__name__] = module
        if self._importing == module.__name__:
            # Its import is done: the rest of the call has the call's time again (held-out s50r: a trivial first
            # import before 7 s of work gave the work the import's 30 s).
            self._importing = None
            if self.on_imported is not None:
                self.on_imported()
        stand_ins = self.views.get(self.calling) if self._held is not None and self.calling else None
        if not stand_ins:
            return  # no call running, or the part's own import, which load() looks over once it is done
        found = self._held_elsewhere(self.calling, stand_ins, within=[module])
        self.rebinds.setdefault(self.calling, []).extend(found)
        for namespace, key, value in found:
            siblings.put(self._held, namespace, key, value)

    @contextlib.contextmanager
    def _standing_in(self):
        """While a call of a part graded over stand-ins runs: what its import saw of its siblings stays in place
        (views, rebinds), so code that reaches a sibling at call time reaches the stand-in; put back after."""
        self._held = []
        try:
            if self.calling in self.modules:
                self._hold(self.calling)
            yield
        finally:
            held, self._held = self._held, None
            siblings.put_back(held)

    def _hold(self, name: str) -> None:
        if self._held is None:
            return
        puts = [(sys.modules, dep, module) for dep, module in self.views.get(name, {}).items()]
        for namespace, key, value in puts + self.rebinds.get(name, []):
            siblings.put(self._held, namespace, key, value)

    def _over_standins(self, dep: str, name: str) -> types.ModuleType:
        """What `dep` is while `name`, graded over its stand-ins, imports: the grader's stand-ins of its contract names;
        and when `name`'s file takes a helper of the student's own from `dep` too (the contract lets the files import
        each other), the student's `dep` with its contract names bound to the stand-ins. Only then is their `dep`
        imported here: a `dep` that crashes or floods its output at import still costs only its own tests."""
        standin = _standin_module(dep, self.standin_module(), self.lesson)
        if not (self.directory / f"{name}.py").is_file():
            return standin  # _import says the file is missing
        if not siblings.takes_more_through(name, dep, self.lesson.standin_names.get(dep, {}),
                                           functools.partial(siblings.module_source, self.directory),
                                           parts=self.lesson.modules):
            return standin
        try:
            own = self.load(dep)
        except ImportError:
            return standin
        return siblings.bound_over(own, standin)

    @contextlib.contextmanager
    def active(self):
        """While student code runs: an isolated submission sees its own modules under their plain
        names, so an import inside a function body finds its sibling, not another submission's."""
        if not self.isolated:
            with self._standing_in():
                yield
            return
        with _IMPORT_LOCK:
            local = self._module_files() | set(self.modules)
            saved = {n: sys.modules.pop(n) for n in list(local) if n in sys.modules}
            sys.modules.update(self.modules)
            sys.path.insert(0, str(self.directory))
            self._source_only()
            dont_write = sys.dont_write_bytecode
            sys.dont_write_bytecode = True
            try:
                with self._standing_in():
                    yield
            finally:
                sys.dont_write_bytecode = dont_write
                sys.path.remove(str(self.directory))
                for n in local:
                    m = sys.modules.pop(n, None)
                    if m is not None and n not in self.modules and _is_from(m, self.directory):
                        self.modules[n] = m
                sys.modules.update(saved)

    def _source_only(self) -> None:
        """_source_only for this loader's folder, once: it walks sys.path_importer_cache (~80 us), and the grader's
        process makes ~150 calls a grading through an isolated loader. Once its hook is in, every finder made for
        the folder is a source-only one."""
        if not self._source_only_done:
            _source_only(self.directory, archives=self.isolated, watch=self)
            self._source_only_done = True

    def _module_files(self) -> frozenset[str]:
        """The names of the folder's .py files, listed once, not on every call (a grading makes ~150): an isolated
        folder is trusted code, written before grading starts, and no call adds a module file to it."""
        if self._files is None:
            self._files = frozenset(p.stem for p in self.directory.glob("*.py"))
        return self._files

    # -- importing ----------------------------------------------------------------------
    def _import(self, name: str, stand_ins: dict) -> types.ModuleType:
        if not (self.directory / f"{name}.py").exists():
            raise ModuleNotFoundError(f"{name}.py is missing: the submission needs a file named {name}.py at its top level"
                                      + _what_it_has_instead(self.directory, f"{name}.py"))
        if not self.isolated:
            if str(self.directory) not in sys.path:
                sys.path.insert(0, str(self.directory))
            self._source_only()
            saved = {dep: sys.modules.get(dep) for dep in stand_ins}
            sys.modules.update(stand_ins)
            try:
                return importlib.import_module(name)
            finally:
                for dep, previous in saved.items():
                    if previous is None:
                        sys.modules.pop(dep, None)
                    else:
                        sys.modules[dep] = previous
        return self._import_isolated(name, stand_ins)

    def _import_isolated(self, name: str, stand_ins: dict) -> types.ModuleType:
        local = self._module_files() | set(self.lesson.modules)
        with _IMPORT_LOCK:
            saved = {n: sys.modules.pop(n) for n in list(local) if n in sys.modules}
            # Siblings already imported for this submission stay the same objects.
            for n, m in self.modules.items():
                sys.modules[n] = m
            sys.modules.update(stand_ins)
            sys.path.insert(0, str(self.directory))
            self._source_only()
            dont_write = sys.dont_write_bytecode
            sys.dont_write_bytecode = True  # never leave __pycache__ in solutions/
            try:
                importlib.invalidate_caches()
                module = importlib.import_module(name)
            finally:
                sys.dont_write_bytecode = dont_write
                sys.path.remove(str(self.directory))
                for n in local:
                    m = sys.modules.pop(n, None)
                    if m is None or n in stand_ins:
                        continue
                    if _is_from(m, self.directory):
                        self.modules.setdefault(n, m)
                sys.modules.update(saved)
        return module


class _SourceFinder(importlib.machinery.FileFinder):
    """A FileFinder that loads .py source only: no sourceless .pyc, no compiled extension. With `handed` (a sandboxed
    child: _handed_in's record of the folder's .py files before any of the submission's code ran), only those files,
    as they were, and never a __pycache__ entry (_HandedInLoader)."""

    def __init__(self, path: str, handed: dict | None = None, watch: dict | None = None):
        watch = {} if watch is None else watch
        loader = (lambda name, origin: _WatchedLoader(name, origin, watch)) if handed is None \
            else (lambda name, origin: _HandedInLoader(name, origin, handed, watch))
        super().__init__(path, (loader, importlib.machinery.SOURCE_SUFFIXES))
        self.handed = handed


class _WatchedLoader(importlib.machinery.SourceFileLoader):
    """A source loader that tells the ModuleLoader of the folder (watch["loader"], a weak reference to the latest to put
    the folder on sys.path) when a module of it starts and ends running its top level: an import during a call is the grader's
    business too (its time, and the stand-ins its globals must hold)."""

    def __init__(self, name, path, watch: dict):
        super().__init__(name, path)
        self.watch = watch

    def exec_module(self, module):
        ref = self.watch.get("loader")
        loader = ref() if ref is not None else None
        if loader is not None:
            loader._module_starts(module.__name__)
        super().exec_module(module)
        if loader is not None:
            loader._module_ran(module)


class _HandedInLoader(_WatchedLoader):
    """Loads a .py file only when it is one handed in, unchanged, and from its source. What the scan, the similarity
    report and a reviewer read is the copy handed in: red team s41r ran other code under a helper's name by a .pyc
    written into __pycache__ at run time stamped with the helper's mtime and size (SourceFileLoader prefers such a
    cache to the source), by rewriting a helper before its first import, and by a .py written beside the files at run
    time (a classmate's, kept as base64) and imported inside a `try` the scan takes for an optional library."""

    def __init__(self, name, path, handed: dict, watch: dict):
        super().__init__(name, path, watch)
        self.handed = handed

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self._source(path), path)  # no bytecode cache read, none written

    def _source(self, path):
        # Only the module's source is checked: get_data also serves the data a module reads beside itself
        # (pkgutil.get_data, importlib.resources), handed in or written by its own code.
        with open(path, "rb") as f:
            before = os.fstat(f.fileno())
            data = f.read()
            after = os.fstat(f.fileno())
        if not (_identity(before) == _identity(after) == self.handed.get(_identity(before)[:2])):
            raise ImportError(f"{os.path.basename(path)} was written or changed while your code ran: the grader "
                              "imports the files you handed in, as you handed them in (hand in the module as a .py "
                              "file)", name=self.name, path=path)
        return data


def _identity(st) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _handed_in(root: str) -> dict:
    """(device, inode) -> _identity of every .py file under `root`, listed before the submission's code runs."""
    return {_identity(st)[:2]: _identity(st) for _, st in forbidden.py_files(root)}


def _source_only(directory: Path, *, archives: bool = True, watch=None) -> None:
    """Make every import from `directory` (and its subfolders) read .py source alone. Python imports a sourceless
    .pyc or a compiled extension from a folder on sys.path as readily as a .py, but the static scan, the similarity
    report and a person reviewing read source only: compiled code of anything (library calls, a classmate's files)
    would be graded unread. So such a file is no module (the import fails as for a missing file); a .pyc beside its
    .py was never used anyway (the source comes first). Idempotent and cheap: called whenever the folder goes on
    sys.path.

    The folder is known by its real path, whatever name a sys.path entry gives it (`//folder`, /proc/self/cwd, a
    link): red team s40r reached it as "//folder/lib.zip", and zipimport ran code from a zip nothing reads. With
    `archives` False (a sandboxed child, where only the submission's code adds entries), a sys.path entry that is no
    folder (a zip, in the folder or in memory by /proc/self/fd/N, or a place inside one) holds no module either: source
    comes from a folder; and only the .py files it holds now, before the submission's code runs, as they are now
    (_HandedInLoader)."""
    root = os.path.realpath(directory)
    handed = None if archives else _handed_in(root)
    # Weakly: the hook lives as long as the process, and an in-process run makes a loader per submission.
    watching = {"loader": weakref.ref(watch)} if watch is not None else {}

    def hook(path):
        where = os.path.realpath(path or ".")
        if where == root or where.startswith(root + os.sep):
            return _SourceFinder(path, handed, hook.watching)
        if not archives and not os.path.isdir(path):
            # lists no folder, so finds nothing: a file, and a place inside one ("/proc/self/fd/N/pkg", which
            # zipimport reads as a folder of the archive and os.path.exists does not see, red team s41r)
            return _SourceFinder(path)
        raise ImportError("not the submission's folder")

    same = [h for h in sys.path_hooks if getattr(h, "source_only_root", None) == root]
    if same and (same[0].handed is None) == (handed is None):
        if handed is not None:  # another loader's first import: what is handed in is what the folder holds now
            same[0].handed.clear()
            same[0].handed.update(handed)  # in place: the finders made for the folder hold this dict
        if watch is not None:  # the latest loader of the folder is told; in place, as for `handed`
            same[0].watching.clear()
            same[0].watching.update(watching)
    else:
        hook.source_only_root, hook.handed, hook.watching = root, handed, watching
        sys.path_hooks.insert(0, hook)
    # The finders cached before the hook went in were made for trusted code's imports, which name the folder as
    # it is, if at all: a plain comparison finds them (resolving each of the cache's few hundred entries cost a
    # child ~3 ms of lstat calls). Every entry made later passes the hook, which resolves it.
    plain = os.path.abspath(directory)
    for key, finder in list(sys.path_importer_cache.items()):
        kept = isinstance(finder, _SourceFinder) and (finder.handed is None) == (handed is None)
        if isinstance(key, str) and not kept:
            where = os.path.abspath(key or ".")
            if where in (root, plain) or where.startswith((root + os.sep, plain + os.sep)):
                del sys.path_importer_cache[key]


class _ImportFailure(ImportError):
    def __init__(self, name, record):
        super().__init__(f"{name}.py could not be imported: {record['type']}: {record['message']}")
        self.record = record


def _is_from(module, directory: Path) -> bool:
    origin = getattr(module, "__file__", None)
    return bool(origin) and Path(origin).resolve().parent == directory


def _standin_module(name: str, standins: types.ModuleType, lesson: CallLesson) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__doc__ = f"grader stand-in for {name}.py"
    for contract_name, standin_name in lesson.standin_names.get(name, {}).items():
        setattr(module, contract_name, getattr(standins, standin_name))
    return module


# -- errors ------------------------------------------------------------------------------
def error_record(exc: BaseException, stage: str, directory: Path | None = None) -> dict:
    """A JSON-able description of an exception: the student's own frames only, briefly."""
    if isinstance(exc, _ImportFailure):
        return dict(exc.record)
    frames = traceback.extract_tb(exc.__traceback__)
    message = _safe_str(exc)
    if isinstance(exc, OSError) and _starts_a_process(frames):
        message += f" ({ONE_PROCESS})"
    if directory is not None:
        # Only the student's own lines: the grader's or the import machinery's frames (a missing file,
        # a syntax error, whose message names its line) would say nothing to a student.
        frames = [f for f in frames if _under(f.filename, directory)]
    lines = [f'  File "{Path(f.filename).name}", line {f.lineno}, in {f.name}\n    {(f.line or "").strip()}' for f in frames[-4:]]
    record = {
        "type": type(exc).__name__,
        "message": message[:protocol.ERROR_TEXT_CAPS["message"]],
        "traceback": "\n".join(lines)[:protocol.ERROR_TEXT_CAPS["traceback"]],
        "stage": stage,
    }
    if type(exc) not in _BUILTIN_ERRORS:
        # A student's own exception class: the built-in ones it derives from, so that a test asking for a
        # ValueError accepts `class VocabError(ValueError)`. Read from the class's own __mro__ (a metaclass
        # cannot stand in for it), matched against the built-ins themselves (a class cannot claim to be one).
        mro = type.__dict__["__mro__"].__get__(type(exc))
        record["bases"] = [cls.__name__ for cls in mro if cls in _BUILTIN_ERRORS]
    return record


# The sandbox refuses a new process (seccomp, and no shared memory for multiprocessing's locks) with a bare
# "Permission denied"; the contracts say why, and so does the error.
ONE_PROCESS = ("the grader's sandbox runs your code in one process: it may not start another, with multiprocessing, "
               "subprocess or os.fork (threads are fine)")
_PROCESS_LIBRARIES = ("/multiprocessing/", "/concurrent/futures/process.py", "/subprocess.py")
_PROCESS_CALLS = ("fork(", "forkpty(", "posix_spawn", "spawnv", "spawnl", "system(", "popen(", "os.exec", "execv", "execl")


def _starts_a_process(frames) -> bool:
    """Whether the error came from starting a process: inside a library that starts them, or on a line that does."""
    innermost = (frames[-1].line or "") if frames else ""
    return (any(part in f.filename for f in frames for part in _PROCESS_LIBRARIES)
            or any(call in innermost for call in _PROCESS_CALLS))


_BUILTIN_ERRORS = frozenset(v for v in vars(builtins).values() if isinstance(v, type) and issubclass(v, BaseException))


def _under(filename: str, directory: Path) -> bool:
    try:
        return Path(filename).resolve().is_relative_to(directory)
    except (OSError, ValueError):
        return False


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a student's exception whose __str__ raises
        return f"<{type(exc).__name__} with an unprintable message>"


# -- decoding ----------------------------------------------------------------------------
def _decode(value, tensors: dict):
    if isinstance(value, dict):
        if "array" in value:
            return tensors[value["array"]]
        return {k: _decode(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    return value


def _tensors(header: dict, arrays: dict) -> dict:
    wrt = set(header.get("grad_wrt") or ())
    out = {}
    for name, array in arrays.items():
        t = torch.from_numpy(np.array(array, copy=True))
        if name in wrt:
            t.requires_grad_(True)
        out[name] = t
    return out


# -- encoding ----------------------------------------------------------------------------
# Bound when the executor is imported (in the zygote, before any student code): code that has read this file can
# replace torch's attributes, so that a counter says no mode is on while one is, but not these references.
_DISABLE_TORCH_FUNCTION = torch._C.DisableTorchFunction
_DISPATCH_MODES = torch._C._len_torch_dispatch_stack
_PRE_DISPATCH_MODES = torch._ops._len_torch_dispatch_stack_pre_dispatch
_LIFT_DISPATCH_MODES = torch.utils._python_dispatch._disable_current_modes  # imported with torch
# What the executor's reads of an answer (to_numpy, own, members, the inspect record) use of torch and numpy, bound
# here for the same reason: a submission can rebind torch.Tensor.detach, numpy.array or torch.float16 (class and
# module attributes) so that a float64 answer reads as float32, or torch.nn.Parameter so that a Parameter reads as
# none. TensorBase is torch's C type: its own attributes cannot be replaced, only the names that lead to it.
_TensorBase = torch._C.TensorBase
_Tensor, _Module, _Parameter, _Sequential = torch.Tensor, torch.nn.Module, torch.nn.Parameter, torch.nn.Sequential
_DETACH, _CPU, _TO, _CONTIGUOUS, _NUMPY, _NUMEL = (_TensorBase.detach, _TensorBase.cpu, _TensorBase.to,
                                                   _TensorBase.contiguous, _TensorBase.numpy, _TensorBase.numel)
_OWN = {name: getattr(_TensorBase, name) for name in ("dtype", "shape", "requires_grad")}
_DISPATCH_KEYS, _PYTHON_KEY = torch._C._dispatch_keys, torch._C.DispatchKey.Python
# A dtype the wire does not carry, and what it is sent as (read back as its own dtype: sent_dtype).
_WIDENED = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.int8: torch.int64,
            torch.int16: torch.int64, torch.int32: torch.int64, torch.uint8: torch.int64}
_CARRIED = frozenset({torch.float32, torch.float64, torch.int64, torch.bool})
_NP_ARRAY = np.array


@contextlib.contextmanager
def _unmoded():
    """While the executor reads what student code returned or built: no __torch_function__ (a subclass's or a mode's)
    and no __torch_dispatch__ mode runs. A mode the student's code entered and never left stays on torch's stacks
    for every later torch call, the executor's own reads included: it could answer detach() of a float64 answer with
    float32 bytes, or a weight's shape with another shape. Only the executor's reads run without them.
    Torch's own way of lifting the dispatch modes imports a module the first time and costs ~10 us a read (a few
    hundred reads a submission): it is taken only when some dispatch mode is on."""
    with _DISABLE_TORCH_FUNCTION():
        if not _DISPATCH_MODES() and not _PRE_DISPATCH_MODES():
            yield
            return
        with _LIFT_DISPATCH_MODES():
            yield


def own(tensor, attribute: str):
    """A tensor's own `attribute` (dtype, shape, requires_grad), read from torch's C type: a subclass's property
    of the same name (a float64 tensor whose `dtype` says float32) is never asked, nor a mode (_unmoded)."""
    with _unmoded():
        return (_OWN.get(attribute) or getattr(_TensorBase, attribute)).__get__(tensor)


def members(module, table: str, prefix: str = "") -> list[tuple[str, _Tensor]]:
    """(name, tensor) of each module's `table` ("_parameters" or "_buffers"), `module` first, then its children in
    order, each tensor once, as named_parameters() and named_buffers() give them: read from each module's own
    dicts, so a submission's override of those methods (a parameter reported as a buffer) is never asked."""
    found, seen_tensors, seen_modules = [], set(), set()

    def walk(m, name):
        if id(m) in seen_modules:
            return
        seen_modules.add(id(m))
        # dict's own methods: a dict subclass given as __dict__ (or as one of its tables) answers nothing itself.
        own_dict = object.__getattribute__(m, "__dict__")
        for key, value in dict.items(dict.get(own_dict, table) or {}):
            if isinstance(value, _Tensor) and id(value) not in seen_tensors:
                seen_tensors.add(id(value))
                found.append((name + key, value))
        for key, child in dict.items(dict.get(own_dict, "_modules") or {}):
            if isinstance(child, _Module):
                walk(child, f"{name}{key}.")

    walk(module, prefix)
    return found


def to_numpy(value) -> np.ndarray:
    """A plain numpy copy of a tensor, whatever subclass or dtype it came as (read with no mode on: _unmoded, and
    through torch's and numpy's own functions, bound at import)."""
    with _unmoded():
        t = _DETACH(value)
        if _DISPATCH_KEYS(t).has(_PYTHON_KEY):
            # A subclass with __torch_dispatch__ answers every operation below itself (a conversion could turn
            # what it holds into whatever its metadata claims): only a tensor torch itself holds is read.
            raise TypeError("a returned tensor is a subclass that answers torch's operations itself "
                            "(__torch_dispatch__): return a plain torch.Tensor")
        t = _CPU(t)
        dtype = own(t, "dtype")
        if dtype in _WIDENED:
            t = _TO(t, _WIDENED[dtype])
        elif dtype not in _CARRIED:
            raise TypeError(f"a tensor of dtype {dtype} cannot be graded: return float32 or float64")
        if _NUMEL(t) > MAX_ELEMENTS:
            raise ValueError(f"a returned tensor has {_NUMEL(t)} elements, far more than this call needs")
        t = _CONTIGUOUS(t)
        return _NP_ARRAY(_NUMPY(t), copy=True)


def sent_dtype(value, array: np.ndarray) -> str:
    """The dtype an output is judged by: the tensor's own (a float16 answer is sent widened to float32) when its
    array is what that dtype is sent as, else the array's. The array is the data that was read: a wrapper subclass
    whose metadata claims float32 answers detach() (its __torch_dispatch__, which DisableTorchFunctionSubclass
    does not turn off) with the float64 tensor it holds, and float64 is what is judged."""
    claimed = str(own(value, "dtype")).replace("torch.", "")
    return claimed if protocol.SENT_AS.get(claimed) == array.dtype.name else array.dtype.name


def _describe(value, name: str, arrays: dict) -> dict:
    if isinstance(value, _Tensor):
        array = arrays[name] = to_numpy(value)
        return {"kind": "tensor", "array": name, "dtype": sent_dtype(value, array),
                "shape": list(array.shape), "requires_grad": bool(own(value, "requires_grad"))}
    if value is None:
        return {"kind": "none"}
    if isinstance(value, (bool, int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            value = repr(value)  # strict JSON has no nan/inf
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
            value = repr(value)[:40]
        return {"kind": "value", "type": type(value).__name__, "value": value}
    return {"kind": "other", "type": type(value).__name__[:60]}


def _flatten(result) -> list:
    if isinstance(result, (tuple, list)):
        return list(result)
    return [result]


def _interrupts(exc: BaseException, loader) -> bool:
    """Whether `exc` must stop this process rather than become the call's error: a Ctrl-C in the grader's own
    process. In a sandboxed child no one can press Ctrl-C: a KeyboardInterrupt there is the student's code raising
    one (or signalling itself), and it costs its tests like any other exception (an import that raises it is
    remembered as failed, not tried again on every call)."""
    return isinstance(exc, KeyboardInterrupt) and loader.isolated  # isolated: the grader's process (ModuleLoader)


# -- the executor --------------------------------------------------------------------------
def execute(header: dict, arrays: dict, *, loader: ModuleLoader) -> tuple[dict, dict]:
    """Run one call; never raises for anything the student's code does."""
    # As before any student code ran (the first call in a process: the snapshot), but for what the called file's own
    # import set: a setting made at import is that file's, as in the student's own process, and no other file's.
    loader.calling = header.get("module") if isinstance(header, dict) and isinstance(header.get("module"), str) else None
    loader.torch_settings.put_back(loader.import_settings.get(loader.calling))
    try:
        return _execute(header, arrays, loader)
    finally:
        loader.calling = None
        loader.torch_settings.put_back()


def _execute(header: dict, arrays: dict, loader: ModuleLoader) -> tuple[dict, dict]:
    out_header: dict = {"error": None, "outputs": [], "grads": {}, "grad_error": None}
    out_arrays: dict = {}
    op = header.get("op")
    # Taken out of the header before any student code runs: the header stays on this frame, which student code can
    # walk up to, and the stand-ins' source is the grader's working code.
    lent = header.pop("standins_source", None)
    if isinstance(lent, dict):
        loader.receive_standins(lent)
    del lent
    if isinstance(header.get("rules"), dict):
        loader.rules.update(header["rules"])
    try:
        with loader.active(), _over_standins(header, loader, out_header):
            if op == "function":
                _run_function(header, arrays, loader, out_header, out_arrays)
            elif op == "module":
                _run_module(header, arrays, loader, out_header, out_arrays)
            elif op == "inspect":
                _run_inspect(header, loader, out_header)
            elif op == "call":
                _run_call(header, arrays, loader, out_header, out_arrays)
            elif op == "session":
                _run_session(header, arrays, loader, out_header, out_arrays)
            else:
                raise GraderCallError(f"unknown op {op!r}")
    except _Failed as failed:
        out_header["error"] = failed.record
    return out_header, out_arrays


class _Failed(Exception):
    def __init__(self, record):
        super().__init__(record["message"])
        self.record = record


@contextlib.contextmanager
def _stage(name: str, loader: ModuleLoader, graded: tuple | None = None):
    """Student code runs here; what it raises becomes the call's error record. `graded` is
    (module, module name, the graded name called) while a graded name of the contract runs."""
    try:
        yield
    except _Failed:
        raise
    except _ImportFailure as exc:
        raise _Failed(dict(exc.record)) from None
    except GraderCallError as exc:
        raise _Failed({"type": "GraderCallError", "message": str(exc), "traceback": "", "stage": name}) from None
    except protocol.ValueNotCarried as exc:  # a result the grader cannot read: what to return instead
        raise _Failed({"type": "UngradableResult", "message": str(exc)[:protocol.ERROR_TEXT_CAPS["message"]], "traceback": "", "stage": name}) from None
    except BaseException as exc:  # student code may raise SystemExit and friends
        if _interrupts(exc, loader):
            raise
        record = error_record(exc, name, loader.directory)
        inside = _raised_inside(exc, *graded, loader.lesson) if graded else []
        if inside:
            record["inside"] = inside
        raise _Failed(record) from None


# -- a crash in a function costs only that function's tests --------------------------------------
# A class of the contract may call a function of the same module: a wrong number there costs only the
# function's tests (the caller's tests accept the student's own function), but a crash would also stop
# every call of the caller. So an error raised while another graded name of the same module ran is marked `inside`
# it; the grader then asks the call again with that name bound to the grader's stand-in
# ("over_standins"), for the names the lesson declares stand-ins of ([standin_names]).
def _raised_inside(exc: BaseException, module, module_name: str, called: str, lesson: CallLesson) -> list[str]:
    """The other graded names of `module_name` with a stand-in whose own code was running when `exc`
    was raised (their frames are on its traceback)."""
    try:
        namespace = dict(vars(module))  # plain data: no attribute access runs student code
    except TypeError:
        return []
    codes: dict = {}
    for name in lesson.standin_names.get(module_name, {}):
        if name != called:
            for code in _code_objects(namespace.get(name)):
                codes.setdefault(code, name)
    found, tb, depth = set(), exc.__traceback__, 0
    while tb is not None and codes and depth < 10_000:  # a recursion error has ~1000 frames
        name = codes.get(tb.tb_frame.f_code)
        if name is not None:
            found.add(name)
        tb, depth = tb.tb_next, depth + 1
    return sorted(found)


def _code_objects(obj, limit: int = 1000) -> list:
    """The code a function (with the functions nested in it) or a class's methods run."""
    functions = []
    if isinstance(obj, types.FunctionType):
        functions = [obj]
    elif isinstance(obj, type):
        for value in list(vars(obj).values()):
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                functions += [f for f in (value.fget, value.fset, value.fdel) if isinstance(f, types.FunctionType)]
            elif isinstance(value, types.FunctionType):
                functions.append(value)
    codes, todo = [], [f.__code__ for f in functions]
    while todo and len(codes) < limit:
        code = todo.pop()
        codes.append(code)
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return codes


@contextlib.contextmanager
def _over_standins(header: dict, loader: ModuleLoader, out_header: dict):
    """While the call runs, the names in header["over_standins"] of its module are the stand-ins'."""
    names = header.get("over_standins")
    if not names:
        yield
        return
    module_name = header.get("module")
    declared = dict(loader.lesson.standin_names.get(module_name, {}))
    declared.pop(header.get("name") or header.get("cls"), None)  # never the name the call grades
    with _stage("import", loader):
        if not isinstance(names, list) or not all(isinstance(n, str) and n in declared for n in names):
            raise GraderCallError(f"no stand-in for {names!r} in {module_name}.py (an engine fault)")
        module = loader.load(module_name)
        standins = loader.standin_module()
    namespace = vars(module)
    missing = object()
    saved = {name: namespace.get(name, missing) for name in names}
    try:
        for name in names:
            namespace[name] = getattr(standins, declared[name])
        out_header["over_standins"] = list(names)
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = value


def _undefined(module, module_name: str, kind: str, name: str) -> str:
    """The words for a contract name a module lacks. A module the intake made of a notebook's cells says so, and
    which cells raised (each was skipped, with everything it would have defined): a notebook student has no
    module_name.py to look in."""
    raised = getattr(module, "_CELL_ERRORS", None)
    if not isinstance(raised, list):
        return f"{module_name}.py defines no {kind} {name}"
    cells = [f"code cell {entry[0]} raised {str(entry[1])[:200]}" for entry in raised[:3]
             if isinstance(entry, tuple) and len(entry) == 2]
    return (f"your notebook's code cells define no {kind} {name}"
            + (f" ({'; '.join(cells)}: a cell that raises is skipped, and what it defines with it)" if cells else ""))


def _run_function(header, arrays, loader, out_header, out_arrays):
    with _stage("import", loader):
        module = loader.load(header["module"])
        fn = getattr(module, header["name"], None)
        if not callable(fn):
            raise GraderCallError(_undefined(module, header["module"], "function", header["name"]))
    tensors = _tensors(header, arrays)
    with _stage("call", loader, (module, header["module"], header["name"])):
        _seed(header.get("seed"))
        result = fn(*_decode(header.get("args", []), tensors), **_decode(header.get("kwargs", {}), tensors))
    _finish(header, result, {n: tensors[n] for n in header.get("grad_wrt") or ()}, tensors, loader, out_header, out_arrays)


# -- plain functions and objects, structured values (protocol.pack / unpack) -------------------------
# A lesson whose contract is not a module's forward (text in and ids out, an optimizer, a data pipeline) asks for
# "call" (a function of the contract on structured arguments) and "session" (one instance of a class
# built, then a list of steps on it: methods called, attributes read). The instance lives only inside
# this call. What comes back is a value tree (grader/running/protocol.py): plain data, never a student's object.
MAX_STEPS = 1000
MAX_REPEAT = 10_000


def _arguments(header: dict, tensors: dict, earlier=None) -> tuple[list, dict]:
    """The call's arguments, decoded from their value trees (the grader wrote them: a bad one is an engine fault)."""
    try:
        args = [protocol.unpack(a, tensors, earlier=earlier) for a in header.get("args", [])]
        kwargs = {str(k): protocol.unpack(v, tensors, earlier=earlier) for k, v in (header.get("kwargs") or {}).items()}
    except protocol.ProtocolError as exc:
        raise GraderCallError(f"the call's arguments are not value trees: {exc} (an engine fault)") from None
    return args, kwargs


class _ResultPacker:
    """Turns what student code returned into value trees, one shared budget for the whole answer."""

    def __init__(self, out_arrays: dict):
        self.out_arrays, self.budget, self.written = out_arrays, {}, 0

    def __call__(self, value, prefix: str):
        tree = protocol.pack(value, self.out_arrays, prefix=prefix, special=self._tensor, budget=self.budget)
        # The packer's count stops a large value early; its JSON, measured, is what must fit in the answer's
        # header (a non-ASCII character is written as 6 or 12 characters).
        self.written += len(json.dumps(tree, separators=(",", ":")))
        cap = protocol.VALUE_LIMITS.max_chars
        if self.written > cap:
            raise protocol.ValueNotCarried(f"the result takes {self.written:,} characters to send, more than the "
                                           f"{cap:,} an answer may carry: far more than this call needs")
        return tree

    def _tensor(self, value):
        if not issubclass(type(value), _Tensor):  # not isinstance: __class__ may claim to be a tensor
            return None
        name = f"t{len(self.out_arrays)}"
        while name in self.out_arrays:
            name += "_"
        self.out_arrays[name] = to_numpy(value)
        if len(self.out_arrays) > protocol.VALUE_LIMITS.max_arrays:
            raise protocol.ValueNotCarried(f"the result holds more than {protocol.VALUE_LIMITS.max_arrays} tensors")
        return {"array": name}


def _graded(loader, header, key):
    """(module, the callable of the contract it names) for a call, or a GraderCallError naming what is missing."""
    with _stage("import", loader):
        module = loader.load(header["module"])
        found = getattr(module, header[key], None)
        if not callable(found):
            kind = "function" if key == "name" else "class"
            raise GraderCallError(_undefined(module, header["module"], kind, header[key]))
    return module, found


def _run_call(header, arrays, loader, out_header, out_arrays):
    module, fn = _graded(loader, header, "name")
    tensors = _tensors(header, arrays)
    with _stage("call", loader):
        args, kwargs = _arguments(header, tensors)
    with _stage("call", loader, (module, header["module"], header["name"])):
        _seed(header.get("seed"))
        result = fn(*args, **kwargs)
    with _stage("output", loader):
        out_header["value"] = _ResultPacker(out_arrays)(result, "v")


def _run_session(header, arrays, loader, out_header, out_arrays):
    """Build one instance, then run the steps on it in order; each step's value or error is answered.

    A step that raises ends the session (the instance may be half-changed), unless "keep_going"."""
    module, cls = _graded(loader, header, "cls")
    graded = (module, header["module"], header["cls"])
    tensors = _tensors(header, arrays)
    steps = header.get("steps") or []
    with _stage("construct", loader):
        if not isinstance(steps, list) or len(steps) > MAX_STEPS:
            raise GraderCallError(f"a session has at most {MAX_STEPS} steps (an engine fault)")
        init = _arguments({"args": header.get("init", []), "kwargs": header.get("init_kwargs")}, tensors)
    with _stage("construct", loader, graded):
        _seed(header.get("seed"))  # once: a session's steps go on from one random state, as a loop would
        obj = cls(*init[0], **init[1])
    returned, answers, pack = [], [], _ResultPacker(out_arrays)
    out_header["steps"] = answers

    def earlier(i):
        if not 0 <= i < len(returned) or returned[i] is _NOT_RUN:
            raise GraderCallError(f"step {i} did not return a value, so no later step can be given it")
        return returned[i]

    for i, step in enumerate(steps):
        value = _NOT_RUN
        try:
            with _stage("step", loader):
                if not isinstance(step, dict):
                    raise GraderCallError(f"step {i} is not a step (an engine fault)")
                repeat = step.get("repeat", 1)
                if type(repeat) is not int or not 1 <= repeat <= MAX_REPEAT:
                    raise GraderCallError(f"step {i} repeats {repeat!r} times, not 1 to {MAX_REPEAT} (an engine fault)")
                args, kwargs = _arguments(step, tensors, earlier) if "method" in step else ([], {})
                if "argument" in step:
                    value = _given(init, step["argument"])
            with _stage("step", loader, graded):
                if "argument" in step:
                    pass  # read back above: no student code runs to read it
                elif "attr" in step:
                    value = _resolve(obj, str(step["attr"]))
                else:
                    method = getattr(obj, str(step["method"]))
                    for _ in range(repeat):
                        value = method(*args, **kwargs)
            returned.append(value)
            with _stage("output", loader):
                answers.append({"value": pack(value, f"s{i}.")})
        except _Failed as failed:
            if len(returned) == i:
                returned.append(_NOT_RUN)
            answers.append({"error": _in_step(failed.record, i, step, header["cls"])})
            if not header.get("keep_going"):
                break


_NOT_RUN = object()


def _given(init: tuple[list, dict], key):
    """The argument `key` (a position, or a keyword's name) the session's instance was built with: the very
    object the student's code was handed, so what it did to it shows."""
    args, kwargs = init
    if type(key) is int and 0 <= key < len(args):
        return args[key]
    if isinstance(key, str) and key in kwargs:
        return kwargs[key]
    raise GraderCallError(f"the instance was built with no argument {key!r} (an engine fault)")


def _in_step(record: dict, i: int, step, cls: str) -> dict:
    """The error record of step `i`, saying which step it was (from the grader's own request, so that feedback
    names the method and its place: "while calling encode, step 3 on one Tokenizer")."""
    where = {"index": i, "of": str(cls)[:100]}
    if isinstance(step, dict) and isinstance(step.get("method"), str):
        where["method"] = step["method"][:100]
    elif isinstance(step, dict) and isinstance(step.get("attr"), str):
        where["attr"] = step["attr"][:100]
    return dict(record, step=where)


def _construct(header, loader, fills=None):
    with _stage("import", loader):
        module = loader.load(header["module"])
        cls = getattr(module, header["cls"], None)
        if cls is None:
            raise GraderCallError(_undefined(module, header["module"], "class", header["cls"]))
    with _stage("construct", loader, (module, header["module"], header["cls"])):
        _seed()  # unloaded parameters (a bug) then come out the same every time
        args, kwargs = header.get("init", []), header.get("init_kwargs", {})
        if fills is None and _wide(header):
            try:
                with _ZeroLargeFills():
                    obj = cls(*args, **kwargs)
            except Exception:
                # The zeros are a saving, not something a constructor may be judged on: an honest check of what the
                # fills drew (an orthogonal weight asserted orthogonal, rows scaled to unit length asserted finite)
                # fails on zeros. Built again as torch draws, as every build with these arguments is.
                _seed()
                obj = cls(*args, **kwargs)
        else:
            with fills or contextlib.nullcontext():
                obj = cls(*args, **kwargs)
        if not isinstance(obj, torch.nn.Module):
            raise GraderCallError(f"{header['cls']}(...) is not an nn.Module: subclass torch.nn.Module")
    return obj


def _run_module(header, arrays, loader, out_header, out_arrays):
    obj = _construct(header, loader)
    graded = (loader.load(header["module"]), header["module"], header["cls"])  # loaded by _construct
    tensors = _tensors(header, arrays)
    loaded = {}
    with _stage("load", loader):
        standins = loader.standin_module() if header.get("standins") else None
        for path, kind in (header.get("standins") or {}).items():
            parent, attr = _parent(obj, path)
            if not hasattr(parent, attr):
                raise GraderCallError(f"{header['cls']} has no attribute {path!r} (the contract names it)")
            own = getattr(parent, attr)
            stand_in = standins.make(kind, obj=own, header=header)
            setattr(parent, attr, stand_in)
            _hold_everywhere(obj, own, stand_in)
        dtype = _DTYPES[header.get("dtype", "float32")]
        _to_call_dtype(obj, dtype)  # float64 calls only: the student's module is judged as built
        obj.eval()  # dropout, if a student added it, must not make grading random
        for spec in header.get("params", []):
            value = tensors[spec["array"]].detach().to(dtype)
            for path, target in _bind(obj, _rule_of(spec, loader), header["cls"], loader.lesson):
                if tuple(target.shape) != tuple(value.shape):
                    raise GraderCallError(
                        f"{header['cls']}.{path} has shape {tuple(target.shape)}, "
                        f"the contract gives it shape {tuple(value.shape)}")
                how = _computed(obj, path, target)
                if how:
                    raise GraderCallError(
                        f"{header['cls']}.{path} is computed from other tensors {how}, so the weights the grader "
                        f"writes into it never reach forward: keep it a plain parameter of its layer, which the grader "
                        f"can load (see {loader.lesson.contract})")
                with torch.no_grad():
                    target.copy_(value)
                loaded.setdefault(spec["name"], target)
        for p in obj.parameters():
            p.requires_grad_(False)
        if header.get("grad_params"):
            for t in loaded.values():
                if isinstance(t, torch.nn.Parameter):
                    t.requires_grad_(True)
    with _stage("forward", loader, graded):
        _seed(header.get("seed"))
        result = obj(*_decode(header.get("args", []), tensors), **_decode(header.get("kwargs", {}), tensors))
    wrt = {n: tensors[n] for n in header.get("grad_wrt") or ()}
    if header.get("grad_params"):
        wrt.update({n: t for n, t in loaded.items() if isinstance(t, torch.nn.Parameter)})
    _finish(header, result, wrt, tensors, loader, out_header, out_arrays)


def _computed(obj, path: str, target) -> str | None:
    """How the tensor at `path` (just read: `target`) is made again from other tensors, so that nothing written into
    it reaches forward; None for a tensor the module keeps. Told by what it does, not by name: read a second time,
    it lies elsewhere in memory (a parametrization, such as weight_norm or spectral_norm, computes it at every
    read), or a forward pre-hook of its layer names it (the older torch.nn.utils.weight_norm sets it from weight_g
    and weight_v at every call). A property handing out a tensor the layer keeps, or a view of one, is the same
    memory at every read and is loaded as any parameter."""
    layer, name = _parent(obj, path)
    again = getattr(layer, name)
    with _unmoded():
        moved = isinstance(again, _Tensor) and _TensorBase.data_ptr(again) != _TensorBase.data_ptr(target)
    if moved:
        return "each time it is read (a parametrization such as weight_norm)"
    hooks = dict.get(object.__getattribute__(layer, "__dict__"), "_forward_pre_hooks") if isinstance(layer, _Module) else None
    for hook in dict.values(hooks) if isinstance(hooks, dict) else ():
        if getattr(hook, "name", None) == name:
            return "each time the layer runs (a forward pre-hook, such as the older torch.nn.utils.weight_norm's)"
    return None


def _what_it_has_instead(directory: Path, filename: str) -> str:
    """What the folder holds in place of `filename`, as the words that end the message saying it is missing: the file
    a folder too deep, the file under another case (Block.py), or a zip inside the zip (held-out s59: both were told
    only that the file was missing, though the student had handed it in)."""
    below = _found_below(directory, filename)
    if below:
        return f" (it has {below}: move it, and the files beside it, to the top level)"
    names = [entry.name for entry in itertools.islice(directory.iterdir(), 2000)]
    other_case = sorted(n for n in names if n.lower() == filename.lower() and n != filename)
    if other_case:
        return f" (it has {other_case[0]}: file names are case-sensitive here, so rename it {filename})"
    zips = sorted(n for n in names if n.lower().endswith(".zip"))
    if zips:
        return (f" (it has {zips[0]}, a zip inside the submission: only the outer one is opened, so hand in the files "
                "themselves, or one zip of them)")
    return ""


def _found_below(directory: Path, filename: str, limit: int = 2000) -> str | None:
    """Where `filename` is in a folder below `directory` (a zip or folder nested one level too deep), looking at
    no more than `limit` entries; None if nowhere."""
    seen = 0
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__MACOSX", "__pycache__"))
        if root != str(directory) and filename in files:
            return os.path.relpath(os.path.join(root, filename), directory)
        seen += len(dirs) + len(files)
        if seen > limit:
            return None
    return None


def _hold_everywhere(root, own, stand_in) -> None:
    """Put `stand_in` wherever `root`'s module tree also holds the module it replaces (a ModuleDict or ModuleList of
    the sub-layers, a second name): a forward that reaches the contract's attribute by another way runs the same
    module, and must run the stand-in too. The released tests do the same (the block's stand-ins)."""
    if not isinstance(own, torch.nn.Module):
        return
    for module in list(root.modules()):
        for name, child in list(module._modules.items()):
            if child is own:
                module._modules[name] = stand_in


def _finish(header, result, wrt, tensors, loader, out_header, out_arrays):
    values = _flatten(result)
    with _stage("output", loader):
        out_header["outputs"] = [_describe(v, f"out{i}", out_arrays) for i, v in enumerate(values)]
    grad_out = header.get("grad_out") or {}
    if not grad_out:
        return
    out_header["grads"] = {name: None for name in wrt}
    try:
        terms = []
        for index, gname in sorted(grad_out.items()):
            i = int(index)
            if i < len(values) and isinstance(values[i], torch.Tensor) and values[i].requires_grad:
                terms.append((values[i] * tensors[gname].to(values[i].dtype)).sum())
        targets = [t for t in wrt.values() if t.requires_grad]
        if not terms or not targets:
            out_header["grad_error"] = {"type": "NoGradient", "message": "the outputs are not connected to the inputs by autograd (detach, no_grad or a numpy round trip?)", "traceback": "", "stage": "backward"}
            return
        _seed()
        grads = torch.autograd.grad(sum(terms), targets, allow_unused=True)
    except BaseException as exc:
        if _interrupts(exc, loader):
            raise
        out_header["grad_error"] = error_record(exc, "backward", loader.directory)
        return
    by_id = {id(t): g for t, g in zip(targets, grads)}
    for name, t in wrt.items():
        g = by_id.get(id(t))
        if g is not None:
            out_arrays[f"grad:{name}"] = to_numpy(g)
            out_header["grads"][name] = f"grad:{name}"


def _run_inspect(header, loader, out_header):
    # Built on CPU, as the module that runs is: a build of its own for the inspect (on the meta device, which costs
    # no initialisation) could be told apart by the code it builds (torch.empty(0).is_meta, or a class that
    # remembers the previous build's device), and answered with another structure than the one that runs.
    # Trusted code in the grader's own process (an isolated loader: the reference, the catalogue's mutants, the
    # correct variants) is built without its random initialisation, which fills values an inspect never reads.
    obj = _construct(header, loader, _SkipInit() if loader.isolated else None)
    with _stage("inspect", loader):
        out_header["inspect"] = _inspect_record(obj, header)


_RANDOM_FILLS = frozenset({torch.nn.init.kaiming_uniform_, torch.nn.init.kaiming_normal_, torch.nn.init.xavier_uniform_,
                           torch.nn.init.xavier_normal_, torch.nn.init.uniform_, torch.nn.init.normal_,
                           torch.nn.init.trunc_normal_, torch.nn.init.orthogonal_, torch.Tensor.uniform_,
                           torch.Tensor.normal_})


WIDE_ARGUMENT = 256  # a square weight this wide holds LARGE_FILL elements


def _wide(header) -> bool:
    """Whether a build's arguments ask for a wide module (a number of WIDE_ARGUMENT or more): only such a build runs
    under _ZeroLargeFills, whose torch function mode costs every torch call of a build ~2 us (~8 ms a grading over
    the narrow builds). The choice is made from the arguments alone, which the code reads too: it tells nothing they
    do not, and a run with an inspect's arguments is built the same way."""
    values = [*header.get("init", []), *(header.get("init_kwargs") or {}).values()]
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= WIDE_ARGUMENT for v in values)


class _RandomFills(torch.overrides.TorchFunctionMode):
    """While a module is built: each random fill (_RANDOM_FILLS) of `smallest` elements or more is `instead(tensor)`
    rather than drawn; every other torch call runs as it is."""

    _FILLS = _RANDOM_FILLS
    smallest = 0

    def instead(self, tensor):
        raise NotImplementedError

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self._FILLS:
            tensor = args[0] if args else kwargs.get("tensor")  # torch.nn.init hands its tensor on by keyword
            if isinstance(tensor, torch.Tensor) and tensor.numel() >= self.smallest:
                return self.instead(tensor)
        return func(*args, **kwargs)


class _ZeroLargeFills(_RandomFills):
    """Every wide build (_wide), in a submission's child and in the grader's process alike: a random fill of
    LARGE_FILL elements or more writes zeros. The hidden tests inspect wide modules for the handout's parameter
    counts (a 768x3072 block: ~40 ms of the generator, most of a child's CPU) and run only narrow ones, so no values
    a test reads change. Being the same in every build with the same arguments, an inspect's and a run's, it tells
    code nothing about which build it is in; and narrow fills are drawn as torch draws them, so the generator's
    state and unloaded parameters do not move."""

    smallest = LARGE_FILL

    def instead(self, tensor):
        return _zeroed(tensor)


def _zeroed(tensor):
    """`tensor`, zeros. When it is the whole of its storage, it is pointed at a fresh anonymous mapping, whose zero
    pages cost nothing until they are used: writing 11 million zeros faults in ~44 MB, ~20 ms of a child's CPU, for
    weights an inspect never reads. Otherwise (a view of a larger tensor) zeros are written where it lies."""
    with torch.no_grad():
        try:
            nbytes = tensor.numel() * tensor.element_size()
            if (tensor.device.type == "cpu" and tensor.is_contiguous() and tensor.storage_offset() == 0
                    and tensor.untyped_storage().nbytes() == nbytes):
                memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
                return tensor.set_(torch.frombuffer(memory, dtype=tensor.dtype).view(tensor.shape))
        except Exception:  # a dtype frombuffer does not take, a subclass of its own ways, no memory: written below
            pass
        return tensor.zero_()


class _SkipInit(_RandomFills):
    """torch.nn.init's random fills leave their tensor as it is (shapes, dtypes and devices are the same): a
    768x3072 block's kaiming initialisation costs ~45 ms, which every inspect of trusted code would pay again.
    Never used where a submission's code runs: code could tell its weights were left unfilled."""

    def instead(self, tensor):
        return tensor


def _inspect_record(obj, header) -> dict:
    attrs = {}
    for spec in header.get("attrs", []):
        attrs[spec["name"]] = _inspect_attr(obj, spec["paths"])
    return {
        "type": type(obj).__name__,
        "parameters": {n: list(own(p, "shape")) for n, p in members(obj, "_parameters")},
        "trainable": {n: bool(own(p, "requires_grad")) for n, p in members(obj, "_parameters")},
        "buffers": {n: list(own(b, "shape")) for n, b in members(obj, "_buffers")},
        "attrs": attrs,
    }


def _inspect_attr(obj, paths) -> dict:
    for path in paths:
        try:
            value = _resolve(obj, path)
        except AttributeError:
            continue
        info = {"path": path, "type": type(value).__name__}
        if isinstance(value, _Module):
            info["kind"] = "module"
            info["parameters"] = {n: list(own(p, "shape")) for n, p in members(value, "_parameters")}
            info["sequential"] = isinstance(value, _Sequential)  # a contract may ask for one
        elif isinstance(value, _Tensor):
            info["kind"] = "tensor"
            info["shape"] = list(own(value, "shape"))
            info["is_parameter"] = isinstance(value, _Parameter)
        elif isinstance(value, (bool, int, float)):
            info["kind"] = "value"
            info["value"] = value
        else:
            info["kind"] = "other"
        return info
    return {"kind": "missing", "paths": list(paths)}


# -- attribute paths ----------------------------------------------------------------------
def _resolve(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _parent(obj, path: str):
    *head, last = path.split(".")
    return (_resolve(obj, ".".join(head)) if head else obj), last


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


class _Lent:
    """The stand-ins a sandboxed child was lent: one attribute each, each run alone in its own namespace."""

    def receive(self, name: str, source: str) -> None:
        # No __name__: a module name that no sys.modules holds made torch.compile (Dynamo), tracing a student's
        # compiled forward into the stand-in, try to import it and fail the call.
        code = compile(source, f"<grader stand-in {name}>", "exec")
        namespace = _made(code)
        changed = _changed_as_made(namespace, code)
        if changed is not None:  # made again with the hooks its bases were given set aside
            with _subclass_hooks_set_aside(changed.__mro__[1:-1]):
                namespace = _made(code)
            changed = _changed_as_made(namespace, code)
        vars(self)[name] = namespace[name] if changed is None else _changed_stand_in(changed.__name__)

    def __getattr__(self, name: str):
        raise _NotLent(f"the grader's stand-in {name} was not lent to this process (an engine fault)")


# Python's builtins as the child started, before any code of the submission ran: a stand-in's code looks its builtins
# up in a dict made from these, so a submission that replaces one (builtins.__build_class__, which every class
# statement calls, or isinstance) changes nothing in the grader's stand-ins. A tuple: code that finds it (through
# the garbage collector, red team s58r) cannot write into it.
_BUILTINS = tuple(vars(builtins).items())


def _made(code: types.CodeType) -> dict:
    namespace = {"__builtins__": dict(_BUILTINS)}
    exec(code, namespace)
    return namespace


@contextlib.contextmanager
def _subclass_hooks_set_aside(bases):
    """`bases` without the __init_subclass__ a submission set on them (none of torch's own classes defines one)."""
    held = [(base, vars(base)["__init_subclass__"]) for base in bases if "__init_subclass__" in vars(base)]
    for base, _ in held:
        delattr(base, "__init_subclass__")
    try:
        yield
    finally:
        for base, hook in held:
            setattr(base, "__init_subclass__", hook)


def _changed_as_made(namespace: dict, code: types.CodeType) -> type | None:
    """The class that a lent stand-in's `code` made in `namespace` and that code other than its own changed while
    it was made, or None. Making a class runs hooks a submission may have set on its bases (nn.Module.__init_subclass__):
    red team s56r wrapped a lent stand-in that way, to add what its own module left out; s58r put a descriptor of its
    own in place of a method, and a class of its own among the bases. A class the stand-in makes is a plain class
    whose bases are the libraries' and its own, and whose methods and descriptors are its own code."""
    made = {c.co_name for c in code.co_consts if isinstance(c, types.CodeType)}
    for cls in (namespace.get(name) for name in sorted(made)):
        if not isinstance(cls, type):
            continue  # a function of the stand-in's own
        bases_foreign = [b for b in cls.__mro__[1:] if b.__name__ not in made
                         and not (b.__module__ or "").split(".")[0] in ("torch", "builtins")]
        entries_foreign = [v for k, v in vars(cls).items() if not _own_entry(k, v, code.co_filename)]
        if type(cls) is not type or bases_foreign or entries_foreign:
            return cls
    return None


def _own_entry(key: str, value, filename: str) -> bool:
    """Whether `value`, the class dict's entry `key`, is what a class statement of the stand-in's source makes: its
    own function (bare, or as a static or class method, or a property's), the dict's and weak reference's slots
    Python adds, or a plain value."""
    if key in ("__dict__", "__weakref__"):
        return True
    if isinstance(value, property):
        parts = [value.fget, value.fset, value.fdel]
    elif isinstance(value, (staticmethod, classmethod)):
        parts = [value.__func__]
    elif isinstance(value, types.FunctionType):
        parts = [value]
    else:
        return not (callable(value) or hasattr(type(value), "__get__"))
    return all(part is None or (isinstance(part, types.FunctionType) and part.__code__.co_filename == filename)
               for part in parts)


def _changed_stand_in(changed: str):
    """What a submission gets in place of a stand-in whose class `changed` its code altered as it was made, even with
    its bases' hooks set aside: each use fails the call, in words the student can act on."""
    def refuse(*args, **kwargs):
        raise RuntimeError(f"code in your submission changed the grader's {changed} while it was being made (a hook "
                           "on how nn.Module subclasses are made), so the tests that run your code over it cannot grade "
                           "it: leave nn.Module's class machinery as torch has it")
    return refuse


class _NotLent(GraderCallError, AttributeError):
    """An engine fault when the executor asks; an attribute that is not there to student code."""


# -- binding to the contract ------------------------------------------------------------------------
# Where the grader's weights go in a student's module is the lesson's data (a rule in each call's
# header, see grader/running/calls.py Adapter.binding); the executor applies it and knows no name.
def _to_call_dtype(obj, dtype) -> None:
    """The one change the executor makes to a student's module before judging it: a float64 call
    converts it as `model.double()` would, since a module is built in float32 (torch's default) and the
    contract asks it to work on whatever dtype x has. A float32 call uses the module as the student
    built it, so a float64 table or layer inside shows in the output's dtype, never repaired."""
    if dtype == torch.float64:
        obj.to(dtype)


def _rule_of(spec: dict, loader: ModuleLoader) -> dict:
    """The parameter's spec with its binding rule in it: as the call carries it, or the one this child was
    sent under the number the spec gives."""
    if "rule" not in spec:
        return spec
    rule = loader.rules.get(str(spec["rule"]))
    if not isinstance(rule, dict):
        raise GraderCallError(f"binding rule {spec['rule']!r} of {spec.get('name')!r} was not sent to this process (an engine fault)")
    return dict(spec, bind=rule)


def _bind(obj, spec: dict, cls_name: str, lesson: CallLesson) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) pairs of a student's module that receive the grader's values for `spec`.

    {"names": [...]}: every accepted path present as a tensor (the same tensor once), so that a module
    holding two accepted names (W_q and Wq, one of them unused) is loaded whichever it uses.
    {"within", "type", "index", "count", "tensor"}: the index-th layer of that torch.nn type inside
    `within`, in registration order, whatever the keys; there must be exactly `count` of them."""
    rule = spec.get("bind") or {"names": spec.get("paths") or [spec["name"]]}
    where = f"(see {lesson.contract})"
    contract = rule.get("contract") or f"{cls_name} needs {' or '.join(rule.get('names', ()))}"
    if "within" not in rule:
        found, seen = [], set()
        for path in rule["names"]:
            try:
                value = _resolve(obj, path)
            except AttributeError:
                continue
            if isinstance(value, torch.Tensor) and id(value) not in seen:
                seen.add(id(value))
                found.append((path, value))
        if not found:
            raise GraderCallError(f"{cls_name} has no tensor at {' or '.join(rule['names'])}: {contract} {where}")
        return found
    kind = getattr(torch.nn, rule["type"], None)
    if not (isinstance(kind, type) and issubclass(kind, torch.nn.Module)):
        raise GraderCallError(f"the lesson binds to torch.nn.{rule['type']}, which is no module type (an engine fault)")
    try:
        container = _resolve(obj, rule["within"])
    except AttributeError:
        container = None
    if not isinstance(container, torch.nn.Module):
        raise GraderCallError(f"{cls_name} has no module {rule['within']}: {contract} {where}")
    layers = [(name, m) for name, m in container.named_modules() if isinstance(m, kind)]
    if len(layers) != rule["count"]:
        raise GraderCallError(f"{contract}; found {len(layers)} {where}")
    name, layer = layers[rule["index"]]
    path = ".".join(p for p in (rule["within"], name, rule["tensor"]) if p)
    value = getattr(layer, rule["tensor"], None)
    if not isinstance(value, torch.Tensor):
        raise GraderCallError(f"{cls_name}.{path} is missing: {contract} {where}")
    return [(path, value)]


"""The library functions a lesson forbids, switched off inside the sandboxed child where student code runs.

A lesson may forbid the library forms of what it asks students to write, so that using them costs the
part that does. What is forbidden, and the words a refusal says, are lesson data (the lesson folder's
forbidden.toml: `lesson.forbidden_policy`, or the zygote's `LessonSpec.forbidden`).
Two layers enforce it, and neither rests on anything student code can reach and change:

- the grader's static scan of the submission's source, in the grader's own process (grader/judging/score.py);
- this module, in the sandbox: `prepare(policy)` runs once in the zygote, before any child exists, and
  makes the forbidden functions give no answer in every child:
    * each aten operator the policy lists ([kernels] ops) gets a kernel that raises, for every dispatch
      key that has one (CPU, autograd, meta, nested, vmap, autocast...). The registration handle is kept
      alive by a reference count that no Python object holds, so student code can neither find it to undo
      it nor reach the kernels it replaced (registering its own kernel only runs its own code);
    * each library function written in Python out of ordinary ops ([python] functions) gets its code
      replaced by code that raises, so every reference to it, however it was reached, raises;
  and the function it returns arms each child before student code runs: an audit hook (which Python
  never lets anyone remove) refuses to open the source of those modules (no reload, no second copy),
  the kit's own files, and the means to open them indirectly (links, a changed working directory,
  `..` in a path, a directory above them, ctypes). The hook and everything it uses are untracked by
  the collector, so no heap walk finds them.

Every refusal says "<what> is switched off in the grader" (MARK, after the policy's [message] `what`),
then the policy's `why`: the grader reads MARK in a call's error and costs the part with its rubric
message.

Imports only torch and the standard library (the zygote imports it before anything else).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import tomllib
import warnings
from pathlib import Path

# What every refusal says after the name of what is refused; the grader finds it in a call's error.
MARK = "is switched off in the grader"
# Foreign-function interfaces: each calls native code by address, below every guard of the child's (the audit
# hook, the switched-off kernels). ctypes is refused by its audit events; these are refused at import, in every
# lesson, and the scan shows the staff an import of one (grader/judging/source_scan.py).
NATIVE_FFI = frozenset({"cffi", "_cffi_backend"})
# Modules that start an interpreter of their own (which has no audit hook: Python's hooks belong to one
# interpreter), or that exist to poke at CPython's internals: refused at import like NATIVE_FFI, and flagged.
INTERPRETER_MODULES = frozenset({"_xxsubinterpreters", "_xxinterpchannels", "_interpreters", "_interpchannels",
                                 "_interpqueues", "_testcapi", "_testinternalcapi", "_testmultiphase", "_ctypes_test"})
REFUSED_IMPORTS = NATIVE_FFI | INTERPRETER_MODULES
# A policy's [message] table names what it switches off and why; these say it when a lesson does not.
DEFAULT_WHAT = "this library function"
# What a part's record names when its code opened a file the audit hook keeps from submissions. A forbidden
# library's source is reaching the library (the lesson's forbidden_message words it); the grader's own files
# are not a library, and the feedback words them with the engine's own sentence.
LIBRARY_FILES = "the source files of a forbidden library"
KIT_FILES = "the grader's own files"
KIT_FILES_SENTENCE = ("Your code opens the grader's own files, which a submission may not read: it costs this part's "
                      "points. Your code may read only the files of your own folder; remove that read and this part "
                      "is graded on its answers again.")


def refusal(policy: dict, name: str) -> str:
    """The words a call of the forbidden `name` raises with: what is switched off, and the lesson's why."""
    words = policy.get("message", {})
    why = str(words.get("why", "")).strip()
    return f"{words.get('what', DEFAULT_WHAT)} {MARK}: {name}." + (f" {why}" if why else "")


# The tables of a forbidden.toml; a policy read here has each of them (possibly empty).
POLICY_TABLES = ("names", "kernels", "python", "flags", "standins", "audit", "message")


def load_policy(path) -> dict:
    """The forbidden.toml at `path` as a dict, every table present: the one reader of the file (a lesson's
    own policy is `lesson.forbidden_policy`, read by this through grader.lesson.read_policy)."""
    with open(path, "rb") as f:
        policy = tomllib.load(f)
    for table in POLICY_TABLES:
        policy.setdefault(table, {})
    return policy


# -- in the zygote --------------------------------------------------------------------------------
def prepare(policy: dict, *, kit_root: str | None = None, shipped: dict | None = None):
    """Switch the policy's library functions off in this process (irreversibly) and return
    `arm(scratch)`, which each child calls on itself before any student code runs. `shipped` (path in a
    release -> the digests of every version of it a release shipped) names the kit's own files that a
    submission hands back: the child never runs them (`_runnable`)."""
    import torch  # noqa: F401  (the kernels below belong to it)

    policy = {table: policy.get(table, {}) for table in ("names", "kernels", "python", "message")}
    _disable_kernels(policy["kernels"].get("ops", ()), policy)
    _remove_c_methods(policy["python"].get("c_methods", ()))
    sources = _disable_python(policy["python"].get("functions", ()), policy)
    sources |= _deny_modules(policy["python"].get("modules", ()), policy)
    denied = _identities(sources)
    kit = [Path(kit_root, p) for p in policy["names"].get("kit_packages", ())] if kit_root else []
    kit_files = [f for folder in kit if folder.is_dir() for f in folder.rglob("*") if f.is_file()]
    kit_denied = _identities(kit_files) - denied
    folders = _identities({parent for f in [*sources, *kit_files] for parent in Path(f).parents})
    # Named now, not in each child: walking sys.modules in a forked child writes to every name's
    # reference count and so copies each page they sit on (~2 ms a child).
    kit_packages = tuple(policy["names"].get("kit_packages", ()))
    kit_modules = tuple(n for n in sys.modules if n.split(".")[0] in kit_packages)
    import linecache

    linecache.clearcache()  # no source line of the disabled code stays in memory
    what = str(policy["message"].get("what", DEFAULT_WHAT))

    shipped = {path: frozenset(digests) for path, digests in (shipped or {}).items()}

    def arm(scratch: str) -> None:
        for name in kit_modules:
            sys.modules.pop(name, None)  # the executor keeps its own references
        runnable = _runnable(scratch, shipped)
        _arm_hook(frozenset(denied), frozenset(kit_denied), frozenset(folders), os.stat(scratch).st_dev, what,
                  runnable=runnable, scratch=os.path.realpath(scratch))

    return arm


def _disable_kernels(ops, policy: dict) -> None:
    import torch

    def kernel_for(name):
        message = refusal(policy, f"torch.ops.aten.{name}")

        def refuse(*args, **kwargs):
            raise RuntimeError(message)

        return refuse

    keys = list(torch._C.DispatchKey.__members__)
    handle = torch._C._dispatch_library("IMPL", "aten", "", "", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        for op in ops:
            packet = getattr(torch.ops.aten, op, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                name = op if overload == "default" else f"{op}.{overload}"
                for key in keys:
                    with contextlib.suppress(Exception):
                        if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", key):
                            handle.impl(name, key, kernel_for(name), False)
    # Kept alive by a reference no object holds (the handle is not tracked by the collector either):
    # dropping it would undo every registration above, and no student code can reach it to do so.
    import ctypes

    # (So a process that did this ends with os._exit: at a normal exit the dispatcher would release
    # these Python kernels after the interpreter is gone.)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(handle))


def _remove_c_methods(specs) -> None:
    """Delete each "module:Type.method" from its C type's own dict. Such a method (torch's
    StorageBase.from_file) opens a file from C++, where the child's audit hook never sees it; its type
    is immutable and refuses `del`, so the dict is reached as the collector sees it. Once deleted, no
    Python object refers to the C function any more: student code cannot call it, however it looks."""
    import ctypes
    import gc

    for spec in specs:
        module_name, _, qualname = spec.partition(":")
        type_path, _, method = qualname.rpartition(".")
        try:
            owner = importlib.import_module(module_name)
            for part in type_path.split("."):
                owner = getattr(owner, part)
        except Exception:
            continue
        if not isinstance(owner, type) or method not in owner.__dict__:
            continue
        mapping = next(r for r in gc.get_referents(owner.__dict__) if isinstance(r, dict))
        del mapping[method]
        ctypes.pythonapi.PyType_Modified(ctypes.py_object(owner))  # drop the type's method cache


def _disable_python(functions, policy: dict) -> set[str]:
    """Replace the code of each library function by code that raises; the source files they came from."""
    sources = set()
    for spec in functions:
        module_name, _, qualname = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception:
            continue
        owner, *path = [module, *qualname.split(".")]
        target = owner
        for part in path:
            owner, target = target, (vars(target).get(part) if isinstance(target, type) else getattr(target, part, None))
        function = getattr(target, "__func__", target)
        if not hasattr(function, "__code__"):
            continue
        _refuse_in_place(function, refusal(policy, f"{module_name}.{qualname}"))
        if getattr(module, "__file__", None):
            sources.add(module.__file__)
            for level in ("", 1, 2):
                with contextlib.suppress(Exception):
                    sources.add(importlib.util.cache_from_source(module.__file__, optimization=level))
    return sources


def _deny_modules(names, policy: dict) -> set[str]:
    """The source and bytecode files of whole modules the policy forbids (a pattern library of plain
    functions that each compute what the lesson forbids, too costly to import in the zygote): the child
    may not open them, so it cannot import them. One already imported here has every function in it made
    to raise."""
    files = set()
    for name in names:
        module = sys.modules.get(name)
        if module is not None:
            for qualname, function in _functions_in(module):
                _refuse_in_place(function, refusal(policy, f"{name}.{qualname}"))
            path = getattr(module, "__file__", None)
        else:
            path = _source_of(name)
        if path:
            files.add(str(path))
            for level in ("", 1, 2):
                with contextlib.suppress(Exception):
                    files.add(importlib.util.cache_from_source(str(path), optimization=level))
    return files


def _source_of(name: str) -> Path | None:
    """Where the module `name` would be loaded from, found from its top package's folder without
    importing it (importing its parent packages could be what the policy avoids)."""
    top, *rest = name.split(".")
    package = sys.modules.get(top)
    if package is None or not getattr(package, "__file__", None) or not rest:
        return None
    base = Path(package.__file__).parent.joinpath(*rest)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _functions_in(module) -> list:
    found = []
    for name, value in vars(module).items():
        if getattr(value, "__module__", None) != module.__name__:
            continue
        if hasattr(value, "__code__"):
            found.append((name, value))
        elif isinstance(value, type):
            found += [(f"{name}.{n}", getattr(v, "__func__", v)) for n, v in vars(value).items()
                      if hasattr(getattr(v, "__func__", v), "__code__")]
    return found


def _refuse_in_place(function, message: str) -> None:
    """Give `function` (and whatever it wraps) code that raises `message`. In place: every reference to
    it, however it was reached (an alias, a subclass, a module imported before), raises too."""
    seen = set()
    while function is not None and id(function) not in seen and hasattr(function, "__code__"):
        seen.add(id(function))
        name, frees = function.__code__.co_name, function.__code__.co_freevars
        # A replacement must have as many free variables as the code it replaces: it names them after
        # the raise (never run, but still free variables of the new code).
        source = (f"def _outer():\n" + "".join(f"    {v} = None\n" for v in frees)
                  + f"    def {name}(*args, **kwargs):\n        raise RuntimeError({message!r})\n"
                  + "".join(f"        {v}\n" for v in frees) + f"    return {name}\n")
        namespace: dict = {}
        exec(compile(source, "<switched off in the grader>", "exec"), namespace)
        function.__code__ = namespace["_outer"]().__code__
        function = vars(function).pop("__wrapped__", None)


def _identities(paths) -> set:
    found = set()
    for path in paths:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            found.add((st.st_dev, st.st_ino))
    return found


# -- in each child ----------------------------------------------------------------------------------
SOURCE_ENTRIES = 50_000  # folder entries py_files lists at most (the intake copies at most 500 files)


def py_files(root: str, limit: int = SOURCE_ENTRIES):
    """(path, lstat) of every .py regular file under `root`, iteratively, no link followed, from at most `limit`
    folder entries: what a submission holds before any of its code runs."""
    folders, seen = [root], 0
    while folders and seen < limit:
        try:
            with os.scandir(folders.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                    elif entry.name.endswith(".py") and entry.is_file(follow_symlinks=False):
                        yield entry.path, entry.stat(follow_symlinks=False)
        except OSError:
            continue


def _runnable(scratch: str, shipped: dict) -> frozenset:
    """The sha256 digests of the source of each .py file the submission handed in, read before any of its code runs
    (its bytes, and its text as Python decodes it): the only code a child compiles under the name of a file in the
    submission's folder. Not the kit's own files handed back as a release shipped them (tests/, tools/): the scan
    never reads those, and red team s44r ran code it wrote at run time through the release's tools/deliverables.py,
    which loads a checks file by path. By content, not by name: red team s45r compiled a data file's text under the
    name of a file handed in (imp.load_source), and rewrote one in place with its times put back."""
    import hashlib

    found = set()
    for path, _ in py_files(scratch):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        digests = shipped.get(os.path.relpath(path, scratch).replace(os.sep, "/"))
        if digests and hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest() in digests:
            continue
        found.add(hashlib.sha256(data).hexdigest())
        with contextlib.suppress(SyntaxError, UnicodeError, LookupError):
            found.add(hashlib.sha256(importlib.util.decode_source(data).encode("utf-8")).hexdigest())
    return frozenset(found)


def _submission_only(device: int, scratch: str) -> bool:
    """Whether nothing but the submission's copy is on `device`: no folder of the import path outside `scratch` is
    (a root grader gives each slot a tmpfs of its own). Without root the copy shares /tmp with whatever is there."""
    for entry in sys.path:
        where = os.path.abspath(entry or ".")
        with contextlib.suppress(OSError):
            if not (where + "/").startswith(scratch + "/") and os.stat(where).st_dev == device:
                return False
    return True


def _arm_hook(denied: frozenset, kit_denied: frozenset, folders: frozenset, scratch_device: int,
              what: str = DEFAULT_WHAT, *, runnable: dict | None = None, scratch: str | None = None) -> None:
    """Install the audit hook. It looks up no global name (all it uses is closed over, and none of it
    can be changed), so rebinding a builtin or a module attribute changes nothing it does; and it runs
    no student code (open() hands it the path already converted to a string)."""
    import ctypes
    import gc
    import hashlib
    import stat as stat_module

    stat, kind, oserror, refused, bad_name = os.stat, type, OSError, PermissionError, ValueError
    is_dir = stat_module.S_ISDIR
    kinds, int_type, bytes_type = (str, bytes, int), int, bytes
    messages = (f"{what} {MARK}: this file (the source of {what}) cannot be opened from student code",
                "the grader's sandbox does not open a path with '..' for student code",
                "the grader's sandbox does not open a folder outside the submission for student code",
                "the grader's sandbox does not allow this to student code",
                "the grader's sandbox opens only a str or bytes path for student code",
                f"{KIT_FILES} {MARK}: this file cannot be opened from student code",
                "the grader's sandbox runs only the .py files handed in, as they were handed in: not a file written "
                "or changed while grading, and not the kit's own tests/ or tools/")
    # cpython.PyInterpreterState_New: a sub-interpreter, where this hook does not run.
    # sys.setprofile, sys.settrace: a profile or trace function sees every frame, the executor's answer on its way
    # out among them (red team s43r rewrote it there, after the executor's own checks).
    closed_events = frozenset({"os.symlink", "os.link", "os.chdir", "os.fchdir", "os.chroot",
                               "cpython.PyInterpreterState_New", "sys.setprofile", "sys.settrace"})
    refused_imports, dot = REFUSED_IMPORTS, "."
    dotdot = ("..", b"..")
    separators = ("/", b"/")
    # compile() of a file's source (an import, runpy, a loader built by hand) by the file's name. A relative name is
    # the child's folder (it cannot chdir); an absolute one is inside it by its prefix, or on the scratch tmpfs.
    runnable = None if runnable is None else frozenset(runnable)
    inside = None if scratch is None else (scratch + "/", (scratch + "/").encode())
    # /proc/self/fd/N, /dev/fd/N: a memfd or a pipe, on no device of the submission's (red team s45r).
    nowhere = (("/proc/", "/dev/"), (b"/proc/", b"/dev/"))
    digest = hashlib.sha256
    own_device = scratch_device if scratch is not None and _submission_only(scratch_device, scratch) else None

    def hook(event, args):
        if event == "open":
            path = args[0]
            if kind(path) not in kinds:
                raise refused(messages[4])
            if kind(path) is int_type:
                return
            binary = kind(path) is bytes_type
            if dotdot[binary] in path.split(separators[binary]):
                raise refused(messages[1])
            try:
                st = stat(path)
            except oserror:
                return  # nothing there to protect
            if (st.st_dev, st.st_ino) in denied:
                raise refused(messages[0])
            if (st.st_dev, st.st_ino) in kit_denied:
                raise refused(messages[5])
            if is_dir(st.st_mode) and ((st.st_dev, st.st_ino) in folders or st.st_dev != scratch_device):
                raise refused(messages[2])  # a folder's fd would open files by paths this hook never sees
        elif event == "compile" and runnable is not None:
            source, name = args[0], args[1]
            if kind(name) not in kinds[:2]:
                return
            binary = kind(name) is bytes_type
            special = name.startswith(nowhere[binary])
            try:
                st = stat(name)
            except (oserror, bad_name):
                if special:
                    raise refused(messages[6]) from None
                return  # "<string>" and the like: no file
            if special or name[:1] != separators[binary] or name.startswith(inside[binary]) or st.st_dev == own_device:
                if kind(source) is bytes_type:
                    seen = digest(source).hexdigest()
                elif kind(source) is kinds[0]:
                    seen = digest(source.encode("utf-8", "surrogatepass")).hexdigest()
                else:
                    raise refused(messages[6])  # a tree or a buffer, under a file's name
                if seen not in runnable:
                    raise refused(messages[6])
        elif event in closed_events or event[:7] == "ctypes.":
            raise refused(messages[3] + f" ({event})")
        elif event == "import" and kind(args[0]) is kinds[0] and args[0].partition(dot)[0] in refused_imports:
            raise refused(messages[3] + f" (import {args[0].partition(dot)[0]})")

    # Out of every heap walk: the hook, what it closes over, and the interpreter's list of hooks. The
    # list exists once a first hook is added: a no-op one, so ctypes still works to untrack it all
    # before the real hook (which refuses ctypes) goes in.
    untrack = ctypes.pythonapi.PyObject_GC_UnTrack
    untrack.argtypes = [ctypes.py_object]
    untrack.restype = None

    def nothing(event, args):
        return None

    sys.addaudithook(nothing)
    holders = [r for r in gc.get_referrers(nothing) if kind(r) is list]
    for obj in [nothing, hook, hook.__closure__, *hook.__closure__, denied, kit_denied, folders, closed_events, kinds, dotdot,
                separators, messages, refused_imports, *holders, *([runnable] if runnable is not None else []),
                *([inside] if inside is not None else []), nowhere, *nowhere]:
        untrack(obj)
    sys.addaudithook(hook)

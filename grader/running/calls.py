"""The one seam between hidden tests and a submission: calls, their answers, and how they travel.

Hidden tests never touch student objects: they call methods of the lesson's adapter (a subclass of
`Adapter` whose request builders the lesson writes, declared in its lesson.toml), which turn each
request into a call (header + arrays, see grader/running/executor.py) and send it through a transport.
A module's forward has its own builder (`_module`); any other contract uses `run` (a function on
structured arguments) and `session` (one instance built, then `Method`/`Attr`/`Argument` steps on it), whose
answers a test reads as plain data (`Result.value`, `Result.step(i)`).

- `InProcessTransport(directory, lesson=...)` runs the executor in this process on trusted code only
  (the reference, catalogue mutants, correct variants);
- `SandboxTransport` (grader/sandbox/transport.py) runs it in the sandboxed child on student code.

The adapter records every call with the student's answer, so that grader/judging/score.py can replay
the calls of a failing test on the bug-catalogue mutants and name the misconception.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import marshal
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from grader.running import protocol
from grader.running.executor import ModuleLoader, execute
from grader.running.forbidden import KIT_FILES, LIBRARY_FILES, MARK


class InProcessTransport:
    """Executes calls in this process on a folder of trusted code (never a student's). `lesson`: the
    lesson value (or its executor spec) whose contract the code follows."""

    def __init__(self, directory, *, lesson):
        self.directory, self.lesson = Path(directory), lesson
        self.loader = ModuleLoader(self.directory, isolated=True, lesson=lesson)

    def call(self, header: dict, arrays: dict) -> tuple[dict, dict]:
        return execute(header, arrays, loader=self.loader)

    def call_many(self, calls: list[tuple[dict, dict]]) -> list[tuple[dict, dict]]:
        return [self.call(header, arrays) for header, arrays in calls]

    def close(self) -> None:
        pass


class Result:
    """A submission's answer to one call; in a batch, filled in when the batch is sent (on first use)."""

    def __init__(self, header: dict | None = None, arrays: dict | None = None, request: str = "", *, send=None):
        self._header, self._arrays = header, arrays
        self.request = request  # what was asked, in words, for feedback
        self._send = send  # sends the batch this answer belongs to, while it is pending

    def fill(self, header: dict, arrays: dict) -> None:
        self._header, self._arrays, self._send = header, arrays, None

    @property
    def header(self) -> dict:
        return self._answer()[0]

    @property
    def arrays(self) -> dict:
        return self._answer()[1]

    def _answer(self) -> tuple[dict, dict]:
        if self._send is not None:
            self._send()
        return self._header, self._arrays

    @property
    def error(self) -> dict | None:
        return self.header.get("error")

    @property
    def outputs(self) -> list[dict]:
        return self.header.get("outputs") or []

    def array(self, i: int) -> np.ndarray | None:
        outs = self.outputs
        if i < len(outs) and outs[i].get("kind") == "tensor":
            return self.arrays.get(outs[i]["array"])
        return None

    def grad(self, name: str) -> np.ndarray | None:
        key = (self.header.get("grads") or {}).get(name)
        return None if key is None else self.arrays.get(key)

    @property
    def grad_error(self) -> dict | None:
        return self.header.get("grad_error")

    @property
    def inspect(self) -> dict:
        return self.header.get("inspect") or {}

    @property
    def value(self):
        """What a "call" returned, as plain data (str, bytes, numbers, lists, tuples, dicts, numpy
        arrays), None if it raised (see `error`)."""
        tree = self.header.get("value")
        return None if tree is None else protocol.unpack(tree, self.arrays)

    @property
    def steps(self) -> list[dict]:
        """A session's answers, one per step that ran, in order: {"value": plain data} or {"error": record}."""
        return [self.step(i) for i in range(self.steps_run)]

    @property
    def steps_run(self) -> int:
        return len(self.header.get("steps") or [])

    def step(self, i: int) -> dict:
        """Step i's answer, {"value": plain data} or {"error": record} (decoded afresh on each read, so a
        test that changes what it got changes no other test's)."""
        answer = (self.header.get("steps") or [])[i]
        if "error" in answer:
            return {"error": answer["error"]}
        return {"value": protocol.unpack(answer.get("value"), self.arrays)}

    @property
    def forbidden(self) -> list[str]:
        """Library calls the lesson forbids that this call met (switched off in the sandboxed child, which says
        so in the error)."""
        found = []
        steps = [answer.get("error") for answer in self.header.get("steps") or () if isinstance(answer, dict)]
        for error in (self.header.get("error"), self.header.get("grad_error"), *steps):
            message = str(error.get("message", "")) if isinstance(error, dict) else ""
            if MARK in message:
                what, said = message.split(MARK, 1)
                if what.rstrip().endswith(KIT_FILES):  # the audit hook kept one of the grader's files
                    found.append(KIT_FILES)
                    continue
                # "...: torch.nn.modules.linear.Linear.forward. <the lesson's why> ..." -> Linear
                dotted = said.lstrip(": ").split(" ", 1)[0].rstrip(".").split(".")
                if dotted[0] != "torch":  # "...: this file (the source of ...)": a forbidden library's source
                    found.append(LIBRARY_FILES)
                    continue
                found.append(next(p for p in reversed(dotted) if p not in ("forward", "__init__", "_forward_impl")))
        return found


# -- the steps of a session ---------------------------------------------------------------------------
class Method:
    """A session step: call a method of the instance, `Method("encode", "hello")`; `.times(n)` calls it
    n times and answers the last return value (an optimizer's step)."""

    def __init__(self, name: str, *args, **kwargs):
        self.name, self.args, self.kwargs, self.repeat = name, args, kwargs, 1

    def times(self, n: int) -> "Method":
        self.repeat = int(n)
        return self

    def header(self, arrays: dict) -> dict:
        step = {"method": self.name, "args": [_pack(a, arrays) for a in self.args],
                "kwargs": {k: _pack(v, arrays) for k, v in self.kwargs.items()}}
        if self.repeat != 1:
            step["repeat"] = self.repeat
        return step

    def __repr__(self) -> str:
        shown = ", ".join([*(_short(a) for a in self.args), *(f"{k}={_short(v)}" for k, v in self.kwargs.items())])
        return f".{self.name}({shown})" + (f" x{self.repeat}" if self.repeat != 1 else "")


@dataclass(frozen=True)
class Attr:
    """A session step: read an attribute of the instance (a dotted path: "state.lr")."""

    path: str

    def header(self, arrays: dict) -> dict:
        return {"attr": self.path}

    def __repr__(self) -> str:
        return f".{self.path}"


@dataclass(frozen=True)
class Argument:
    """A session step: read back an argument the instance was built with, as it is now: `Argument(0)` the first
    positional one, `Argument("vocab")` a keyword. A contract that says "the dict passed in is not changed"
    is checked by comparing it with what was passed."""

    key: int | str

    def header(self, arrays: dict) -> dict:
        return {"argument": self.key}

    def __repr__(self) -> str:
        return f".<argument {self.key!r} as it is now>"


@dataclass(frozen=True)
class Earlier:
    """An argument: the value step `index` of the same session returned, as the student's code returned it."""

    index: int

    def __repr__(self) -> str:
        return f"<step {self.index}>"


def _pack(value, arrays: dict):
    """A value tree of the grader's own argument (grader/running/protocol.py); arrays go into `arrays` as a0, a1..."""
    def special(v):
        return {"step": int(v.index)} if isinstance(v, Earlier) else None
    return protocol.pack(value, arrays, prefix=f"a{len(arrays)}_", special=special, noun="an argument")


def _fits(header: dict) -> dict:
    """The header, if a sandboxed child will accept it (a frame's JSON header is capped); else say so here,
    in the hidden test that built it, rather than as a broken child."""
    size = len(json.dumps(header, separators=(",", ":")))
    cap = protocol.DEFAULT_LIMITS.max_header_bytes - 4096  # room for the frame's own keys
    if size > cap:
        raise ValueError(f"this call's arguments take {size:,} bytes of JSON, over the {cap:,} a call may carry: "
                         "pass less text per call, or large numeric data as numpy arrays (they travel beside the header)")
    return header


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class Recorded:
    test: str
    header: dict
    arrays: dict
    result: Result
    _key: str | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> str:
        """call_key of this call, computed once: the calls of a passed test are keyed again when some are
        asked again, and a batch's first call seeds its order."""
        if self._key is None:
            self._key = call_key(self.header, self.arrays)
        return self._key


def _same_answer(first: tuple[dict, dict], second: tuple[dict, dict]) -> bool:
    """The same answer bit for bit: the same header and the same arrays (names, dtypes, shapes, bytes)."""
    (h1, a1), (h2, a2) = first, second
    if a1.keys() != a2.keys() or not _same_header(h1, h2):
        return False
    return all(a1[k].dtype == a2[k].dtype and a1[k].shape == a2[k].shape and
               np.ascontiguousarray(a1[k]).tobytes() == np.ascontiguousarray(a2[k]).tobytes() for k in a1)


def _same_header(h1: dict, h2: dict) -> bool:
    """The same JSON text, keys sorted. Two answers alike in every byte (the usual case) are told so by
    marshal, ~6x quicker than writing both as JSON; anything else is compared as JSON, as always."""
    with contextlib.suppress(ValueError):
        if marshal.dumps(h1, 2) == marshal.dumps(h2, 2):
            return True
    return json.dumps(h1, sort_keys=True, default=str) == json.dumps(h2, sort_keys=True, default=str)


def call_key(header: dict, arrays: dict) -> str:
    """A digest that is the same for the same call: a header built the same way (the same keys in the same
    order, the same values of the same types) and the same arrays (names, dtypes, shapes, bytes). The
    request builders build a call's header the same way every time, which is what the reference's cache,
    a test's distinct calls and the answers replayed when a test is judged again rely on."""
    try:
        # marshal, not JSON: ~6x quicker, and each call is keyed at least once. Version 2 writes no
        # back-references, so the bytes depend on the values alone, not on which objects are shared.
        text = marshal.dumps(header, 2)
    except ValueError:  # a subclass of a built-in type, which marshal refuses: the JSON text instead
        text = b"json" + json.dumps(header, sort_keys=True).encode()
    digest = hashlib.sha1(text)
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(marshal.dumps((name, a.dtype.str, a.shape), 2))
        digest.update(a.tobytes())
    return digest.hexdigest()


@dataclass
class AskedAgain:
    """Calls of one test asked once more (Adapter.queue_again): the first answers of all its distinct calls, and
    a Result for each call that comes back, filled in when the batch it went with is answered."""

    first: dict  # call key -> (header, arrays), the first answer
    again: dict  # call key -> Result of the second asking

    def result(self) -> tuple[dict, bool]:
        """(answers, changed), as Adapter.ask_again returns them. A second asking the code never answered (it
        rode in a batch where another test's call timed out, condemned the module or used up the budget) says
        nothing about the call, so the first answer stands for it."""
        answers, changed = dict(self.first), False
        for key, result in self.again.items():
            second = (result.header, result.arrays)
            if protocol.unanswered(second[0]):
                continue
            changed = changed or not _same_answer(answers[key], second)
            answers[key] = second
        return answers, changed


@dataclass
class Adapter:
    """Records and sends the calls of the hidden tests; one per submission (or the reference).

    A lesson subclasses it with its request builders (one method per thing its tests ask) and the
    names its contract allows for parameters and attributes. batch=True (a submission's adapter):
    calls are not sent when made but together, when one of their answers is first read or at
    `send()`; a hidden test asks all its calls before it checks any, so each test's calls go to
    the sandboxed child as one pipelined batch, in an order drawn from `seed` (the run's seed,
    grader/running/run_seed.py) and the test: a child cannot tell a probe from the call it stands for by
    where it comes. The lesson's tests draw their probes' inputs from `seed` too (`rng`)."""

    # Parameter name in the hidden tests -> where the contract puts it in a student's module: a rule the
    # executor applies (grader/running/executor.py, _bind), {"names": [paths...]} or {"within", "type", "index",
    # "count", "tensor"}, with the contract's words for it. `param_paths` is the short form of the first
    # kind (name -> paths, most usual first); a name neither lists is looked for under its own path.
    bindings: ClassVar[dict[str, dict]] = {}
    param_paths: ClassVar[dict[str, tuple[str, ...]]] = {}
    # Attribute name in the hidden tests -> the paths the contract allows, most usual first.
    attr_paths: ClassVar[dict[str, tuple[str, ...]]] = {}
    # "<module>.<function or class>" -> the outputs (by index) whose dtype the contract leaves to the submission
    # (0/1 entries as bool, integers or floats). Each such call carries them as "free_dtypes", so that a catalogued
    # mistake is recognised in those outputs by their values (grader/judging/mutants.py); in every other output a
    # dtype that differs is a mistake of its own.
    free_dtypes: ClassVar[dict[str, tuple[int, ...]]] = {}

    transport: object
    cache: dict | None = None  # call key -> Result (the reference shares one across a batch)
    record: bool = False
    batch: bool = False
    calls: list = field(default_factory=list)
    current_test: str = ""
    memo: dict = field(default_factory=dict)  # answers the hidden tests share (a probe of the student's function)
    seed: int = 0  # the run's seed: the order of each batch, and the inputs of the lesson's probes
    replay: dict | None = None  # call key -> answer (header, arrays) given when asked again (`ask_again`)
    _pending: list = field(default_factory=list)  # Recorded calls not sent yet

    # -- plumbing ---------------------------------------------------------------------
    def call(self, header: dict, arrays: dict, request: str = "") -> Result:
        free = self.free_dtypes.get(f"{header.get('module')}.{header.get('name') or header.get('cls')}")
        if free:
            header = {**header, "free_dtypes": list(free)}
        arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
        if self.batch:  # sent later: the caller may change its arrays meanwhile
            arrays = {k: v.copy() for k, v in arrays.items()}
        key = call_key(header, arrays) if self.replay is not None or self.cache is not None else None
        if self.replay is not None and (answer := self.replay.get(key)) is not None:
            # A test judged again: this call's second answer (its own copy, as a first answer is).
            result = Result(answer[0], {k: v.copy() for k, v in answer[1].items()}, request)
            if self.record:
                self.calls.append(Recorded(self.current_test, header, arrays, result, key))
            return result
        if self.cache is not None and key in self.cache:
            result = self.cache[key]
            call = Recorded(self.current_test, header, arrays, result, key)
        elif self.batch:
            result = Result(request=request, send=self.send)
            call = Recorded(self.current_test, header, arrays, result, key)
            self._pending.append(call)
        else:
            h, a = self.transport.call(header, arrays)
            result = Result(h, a, request)
            if self.cache is not None:
                self.cache[key] = result
            call = Recorded(self.current_test, header, arrays, result, key)
        if self.record:
            self.calls.append(call)
        return result

    def send(self) -> None:
        """Send the pending calls as one batch and fill in their answers."""
        pending, self._pending = self._pending, []
        if pending:
            # Sent in an order of the run's seed, the test and this batch's first call, answered in place.
            random.Random(f"{self.seed}|{self.current_test}|{pending[0].key}").shuffle(pending)
            answers = self._send_all([(call.header, call.arrays) for call in pending])
            for call, (h, a) in zip(pending, answers):
                call.result.fill(h, a)

    def _send_all(self, requests: list) -> list:
        call_many = getattr(self.transport, "call_many", None)  # any transport with call() will do
        return call_many(requests) if call_many else [self.transport.call(h, a) for h, a in requests]

    def ask_again(self, calls: list, count: int) -> tuple[dict, bool]:
        """`count` of the distinct calls among `calls` (Recorded), drawn from the run's seed and the test, asked
        once more in one batch, in that drawn order. Returns (answers, changed): call key -> answer for every
        call, the second answer where it was asked again and the first elsewhere, and whether any second
        answer differs from the first in any bit. Set as `replay`, the answers are what the same test gets
        when it is judged again (grader/judging/score.py): an answer that depends on when, how often or
        beside what a call was asked is judged as it was given the second time too. A submission cannot
        tell which calls come back, so it cannot answer only those alike."""
        asked = self.queue_again(calls, count)
        self.send()
        return asked.result()

    def queue_again(self, calls: list, count: int) -> "AskedAgain":
        """`ask_again`'s calls, drawn the same way, queued to go with the next batch this adapter sends (the
        next test's calls, among which the run's order places them) instead of alone: the child gets one
        batch less to wait for, and a call that comes back is one among others. `AskedAgain.result()` gives
        what ask_again returns once they are answered (sending them alone if nothing has sent them by then)."""
        distinct: dict = {}
        for c in calls:
            distinct.setdefault(c.key, c)
        order = list(distinct)
        random.Random(f"{self.seed}|{self.current_test}|asked again").shuffle(order)
        chosen = {}
        for key in order[:count]:
            c = distinct[key]
            chosen[key] = Result(request=c.result.request, send=self.send)
            self._pending.append(Recorded(c.test, c.header, c.arrays, chosen[key], key))
        first = {key: (c.result.header, c.result.arrays) for key, c in distinct.items()}
        return AskedAgain(first, chosen)

    def rng(self, *labels) -> "np.random.Generator":
        """A generator for one probe of a test, from the run's seed, the current test and `labels`: the same
        inputs whenever this run grades this test, other inputs in another run."""
        text = "|".join(map(str, (self.seed, self.current_test, *labels)))
        return np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))

    # -- inspection ---------------------------------------------------------------------
    def inspect(self, module: str, cls: str, init: list, init_kwargs: dict | None = None,
                attrs: tuple[str, ...] = ()) -> Result:
        header = {"op": "inspect", "module": module, "cls": cls, "init": list(init), "init_kwargs": init_kwargs or {},
                  "attrs": [{"name": a, "paths": list(self.attr_paths.get(a, (a,)))} for a in attrs]}
        args = ", ".join([*map(str, init), *(f"{k}={v}" for k, v in (init_kwargs or {}).items())])
        return self.call(header, {}, f"{cls}({args})")

    # -- plain functions and objects ---------------------------------------------------------------
    def run(self, module: str, name: str, *, args=(), kwargs: dict | None = None, request: str = "",
            seed: int | None = None) -> Result:
        """Call function `name` of the contract's `module` on structured arguments (str, bytes, numbers,
        None, lists, tuples, dicts, numpy arrays, which arrive as tensors); `Result.value` is what it returned."""
        arrays: dict = {}
        header = {"op": "call", "module": module, "name": name, "args": [_pack(a, arrays) for a in args],
                  "kwargs": {k: _pack(v, arrays) for k, v in (kwargs or {}).items()}}
        if seed is not None:
            header["seed"] = int(seed)
        shown = ", ".join([*(_short(a) for a in args), *(f"{k}={_short(v)}" for k, v in (kwargs or {}).items())])
        return self.call(_fits(header), arrays, request or f"{name}({shown})")

    def session(self, module: str, cls: str, *, init=(), init_kwargs: dict | None = None, steps=(),
                keep_going: bool = False, request: str = "", seed: int | None = None) -> Result:
        """Build `cls(*init, **init_kwargs)` of the contract's `module` once, in one call, then run the steps
        on it in order (Method, Attr, Argument); `Result.steps` answers each. A raising step ends the session,
        unless keep_going (the later steps run on whatever state it left)."""
        arrays: dict = {}
        header = {"op": "session", "module": module, "cls": cls, "init": [_pack(a, arrays) for a in init],
                  "init_kwargs": {k: _pack(v, arrays) for k, v in (init_kwargs or {}).items()},
                  "steps": [step.header(arrays) for step in steps]}
        if keep_going:
            header["keep_going"] = True
        if seed is not None:
            header["seed"] = int(seed)
        return self.call(_fits(header), arrays, request or f"{cls}(...)" + "".join(map(repr, steps)))

    # -- building calls ----------------------------------------------------------------------
    def binding(self, name: str) -> dict:
        """The rule that finds parameter `name` in a student's module (sent in the call's header)."""
        if name in self.bindings:
            return dict(self.bindings[name])
        return {"names": list(self.param_paths.get(name, (name,)))}

    def _module(self, module, cls, init, init_kwargs, x, weights, mask, *, dtype, grad_out=None,
                standins=None, request="", seed=None):
        arrays = {"x": np.asarray(x, dtype=dtype)}
        args = [{"array": "x"}]
        if mask is not None:
            arrays["mask"] = mask
            args.append({"array": "mask"})
        params = []
        for i, (name, value) in enumerate(sorted(weights.items())):
            arrays[f"p{i}"] = np.asarray(value, dtype=dtype)
            params.append({"name": name, "bind": self.binding(name), "array": f"p{i}"})
        header = {"op": "module", "module": module, "cls": cls, "init": list(init), "init_kwargs": init_kwargs,
                  "dtype": dtype, "params": params, "args": args}
        if standins:
            header["standins"] = standins
        if seed is not None:  # the same call under another random seed: shows whether randomness runs in it
            header["seed"] = int(seed)
        if grad_out is not None:
            header["grad_params"] = True
        self._grads(header, arrays, grad_out, wrt=["x"])
        return self.call(header, arrays, request)

    @staticmethod
    def _grads(header, arrays, grad_out, *, wrt):
        if grad_out is None:
            return
        if not isinstance(grad_out, (tuple, list)):
            grad_out = (grad_out,)
        header["grad_wrt"] = list(wrt)
        header["grad_out"] = {}
        for i, g in enumerate(grad_out):
            if g is not None:
                arrays[f"g{i}"] = g
                header["grad_out"][str(i)] = f"g{i}"

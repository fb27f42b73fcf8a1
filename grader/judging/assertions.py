"""Assertions for any lesson's hidden tests: each failure says what was expected, what came out and where.

The lesson decides how close is close: every comparison takes its tolerance (grader/judging/tolerances.py
`Tol`) from the caller, and a lesson's own checks module (beside its hidden tests) binds its
numbers once.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from grader.judging import diagnose
from grader.judging.tolerances import Tol, within

SMALL = 36  # arrays with at most this many elements are printed whole


class GradeFailure(AssertionError):
    """A hidden test's verdict: the message is shown to the student."""

    def __init__(self, message: str, *, evidence: dict | None = None, error: dict | None = None,
                 facts: list | None = None):
        super().__init__(message)
        self.message = message
        self.evidence = evidence
        self.error = error  # the student's exception record, when their code raised
        self.facts = list(facts or [])  # what the numbers show (grader/judging/diagnose.py): data, never words
        self.compared = []  # [(got, expected, fact options, tolerance)] the facts were found in


class facts_on_failure:
    """Adds facts found by other calls (a repeated call, a changed batch) to a GradeFailure raised inside:

        with facts_on_failure(lambda: diagnose.repeat(a, b)):
            same_outputs(...)

    The facts are computed only when a comparison fails."""

    def __init__(self, *makers):
        self.makers = makers

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if isinstance(error, GradeFailure) and error.error is None:
            for make in self.makers:
                try:
                    found = make()
                except Exception:  # noqa: BLE001 - a fact that cannot be computed is not claimed
                    found = []
                error.facts += [f for f in found if f not in error.facts]
        return False


# -- inputs --------------------------------------------------------------------------------
def randn(seed: int, *shape, dtype="float32", scale=1.0) -> np.ndarray:
    """Seeded normal numbers: one seed per input tensor, so cases never depend on order.

    Made once per process and copied out (a generator costs ~15 us, a copy ~1 us; every submission
    asks for the same ~200 inputs), so a caller may still change what it gets."""
    key = (seed, shape, str(dtype), scale)
    made = _RANDN.get(key)
    if made is None:
        made = _RANDN[key] = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)
    return made.copy()


_RANDN: dict = {}


# -- answers -------------------------------------------------------------------------------
# Where in a call an error of the submission's came (the executor's `stage`), as a student reads it.
STAGE_WORDS = {"import": "importing your file", "construct": "constructing the module",
               "load": "loading the grader's weights", "forward": "running forward", "call": "calling the function",
               "step": "calling a method", "output": "reading the result", "backward": "running backward"}


def ok(res, what: str):
    """The call ran without an exception, or fail with the student's error (and what its message shows)."""
    if res.error:
        e = res.error
        where = STAGE_WORDS.get(e.get("stage"), "running")
        text = f"{what}: {error_words(e, where)}"
        if e.get("traceback"):
            text += f"\n{e['traceback']}"
        raise GradeFailure(text, error=e, facts=error_facts(e))
    return res


def error_facts(error: dict) -> list[dict]:
    """What an error's own message shows, as facts the lesson may word: autograd refusing an in-place change of a
    tensor whose gradient is asked for (`inplace_leaf`: `x += ...` on the caller's input, say); torch refusing
    arithmetic on a bool tensor (`bool_arithmetic`: `1 - m` on a tensor of booleans)."""
    message = str(error.get("message", ""))
    if error.get("type") == "RuntimeError" and "in-place operation" in message and "requires grad" in message:
        return [{"id": "inplace_leaf"}]
    if error.get("type") == "RuntimeError" and BOOL_ARITHMETIC in message:
        return [{"id": "bool_arithmetic"}]
    return []


# How torch words its refusal of `-` on a bool tensor ("Subtraction, the `-` operator, with a bool tensor is not
# supported", "Negation, the `-` operator, on a bool tensor is not supported").
BOOL_ARITHMETIC = "bool tensor is not supported"
# The facts error_facts finds: the same for every test one error stopped (grader/results/feedback.py tells them there).
ERROR_FACTS = frozenset({"inplace_leaf", "bool_arithmetic"})


def error_words(error: dict, where: str) -> str:
    """An error of the submission's, in words: its type, where it came, its message. The grader's own words about
    the submission ("... defines no class ...", a GraderCallError) need no exception's name."""
    if error.get("type") == "GraderCallError":
        return str(error.get("message", ""))
    return f"{error.get('type', 'Error')} while {where}: {error.get('message', '')}"


def output(res, i: int, what: str, *, count: int | None = None) -> np.ndarray:
    ok(res, what)
    outs = res.outputs
    if count is not None and len(outs) != count:
        raise GradeFailure(f"{what}: expected {count} return value{'s' if count > 1 else ''}, got {len(outs)}"
                           + (" (return a tuple (out, weights))" if count == 2 else ""))
    if i >= len(outs) or outs[i].get("kind") != "tensor":
        got = outs[i] if i < len(outs) else "nothing"
        raise GradeFailure(f"{what}: expected a tensor, got {_kind(got)}")
    return res.array(i)


def _kind(desc) -> str:
    if isinstance(desc, dict):
        if desc.get("kind") == "value":
            return f"{desc['type']} {desc['value']!r}"
        return desc.get("type") or desc.get("kind", "?")
    return str(desc)


def dtype_of(res, i: int) -> str:
    return res.outputs[i].get("dtype", "?")


# -- comparisons ---------------------------------------------------------------------------
def close(got, expected, t: Tol, what: str, *, evidence: bool = False, facts: dict | None = None) -> None:
    """Elementwise |got - expected| <= atol·scale + rtol·|expected| with scale = max(1, max|expected|).

    On a failure the GradeFailure carries what grader/judging/diagnose.py finds in the numbers; `facts` are its
    keyword arguments (allowed, probabilities, constants, axes)."""
    expected = np.asarray(expected, dtype=np.float64)
    got_arr = np.asarray(got)
    if got_arr.shape != expected.shape:
        failure = GradeFailure(f"{what}: expected shape {tuple(expected.shape)}, got shape {tuple(got_arr.shape)}",
                               facts=_facts(got_arr, expected, facts, t))
        failure.compared = [(got_arr, expected, dict(facts or {}), t)]
        raise failure
    got64 = got_arr.astype(np.float64)
    peak = float(np.abs(expected).max(initial=0.0))
    if not math.isfinite(peak):  # nan or inf expected somewhere: the scale comes from the finite values
        peak = float(np.abs(expected[np.isfinite(expected)]).max(initial=0.0))
    scale = max(1.0, peak)
    bad = ~within(got64, expected, t.atol, t.rtol, scale)
    if not bad.any():
        return  # (the nan check below can only clear entries: skipped when none is bad)
    bad &= ~(np.isnan(expected) & np.isnan(got64))
    if not bad.any():
        return
    failure = GradeFailure(describe(got64, expected, bad, what), evidence=_evidence(got64, expected) if evidence else None,
                           facts=_facts(got64, expected, facts, t))
    failure.compared = [(got64, expected, dict(facts or {}), t)]  # the numbers the facts were found in
    raise failure


def _facts(got, expected, options: dict | None, t: Tol | None = None) -> list[dict]:
    """What the numbers show about a failed comparison (never raises: a fact that cannot be computed is not claimed)."""
    try:
        tolerance = {"atol": t.atol, "rtol": t.rtol} if t is not None else {}
        return diagnose.compare(got, expected, **tolerance, **(options or {}))
    except Exception:  # noqa: BLE001
        return []


def describe(got: np.ndarray, expected: np.ndarray, bad: np.ndarray, what: str) -> str:
    n_bad, n = int(bad.sum()), bad.size
    if expected.size <= SMALL:
        return (f"{what}: {n_bad} of {n} values differ\n"
                f"  expected:\n{fmt(expected)}\n  got:\n{fmt(got)}")
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(np.isnan(got) | np.isnan(expected), np.inf, np.abs(got - expected))
    where = np.unravel_index(int(np.argmax(err)), err.shape)
    return (f"{what}: {n_bad} of {n} values differ (shape {tuple(expected.shape)}); "
            f"largest error {_num(err[where])} at index {tuple(int(i) for i in where)}: "
            f"expected {_num(expected[where])}, got {_num(got[where])}")


def fmt(a: np.ndarray) -> str:
    text = np.array2string(np.asarray(a), precision=4, suppress_small=True, separator=", ")
    return "\n".join("    " + line for line in text.splitlines())


def _num(x) -> str:
    return "nan" if np.isnan(x) else ("inf" if np.isinf(x) else f"{float(x):.6g}")


def _evidence(got: np.ndarray, expected: np.ndarray) -> dict:
    """The first (T_q, T_k) slice of a weights tensor, rounded for the report's heatmaps."""
    while got.ndim > 2:
        got, expected = got[0], expected[0]
    got = np.where(np.isfinite(got), got, -1.0)  # nan/inf cannot go to JSON: shown as -1, outside [0, 1]
    return {"expected": np.round(expected, 4).tolist(), "got": np.round(got, 4).tolist()}


def same_outputs(got_res, exp_res, what: str, names: tuple[str, ...], *, values: Callable[[str], Tol],
                 dtype="float32", evidence_output: int | None = None, probabilities: tuple[str, ...] = (),
                 facts: dict | None = None) -> None:
    """Each named output of the student's call equals the reference's, within `values(dtype)`. The outputs
    named in `probabilities` hold distributions along their last axis (their facts check that too);
    `facts` goes on to grader/judging/diagnose.py (constants, axes, allowed)."""
    ok(exp_res, f"reference for {what}")  # a broken reference is the grader's bug, never the student's

    def options(name):
        found = dict(facts or {}, probabilities=name in probabilities)
        if not found["probabilities"]:
            found.pop("allowed", None)
        return found

    for i, name in enumerate(names):
        expected = exp_res.array(i)
        got = output(got_res, i, f"{what}: {name}", count=len(names))
        try:
            close(got, expected, values(_judged_as(got_res, i, dtype)), f"{what}: {name}",
                  evidence=(i == evidence_output), facts=options(name))
        except GradeFailure as failure:
            swapped = _in_other_order(got_res, exp_res, names, i, values, dtype)
            if swapped is not None:
                failure.facts.append(swapped)
            # A wrong output often comes from wrong weights, which show more (their sums, their scaling).
            for j, other in enumerate(names):
                if j > i and other in probabilities and j < len(got_res.outputs):
                    tolerance = values(_judged_as(got_res, j, dtype))
                    found = _facts(got_res.array(j), exp_res.array(j), options(other), tolerance)
                    failure.facts += [f for f in found if f["id"] != "differs" and f not in failure.facts]
                    if found:
                        failure.compared.append((got_res.array(j), exp_res.array(j), options(other), tolerance))
            raise


def _in_other_order(got_res, exp_res, names, i: int, values, dtype: str) -> dict | None:
    """The fact that output i of the student's call is the reference's output j, and output j is output i:
    every number right, handed back in another order (a pair returned as (weights, out))."""
    for j, other in enumerate(names):
        if j == i or j >= len(got_res.outputs):
            continue
        crossed = ((got_res.array(i), exp_res.array(j), j), (got_res.array(j), exp_res.array(i), i))
        if all(got is not None and expected is not None and got.shape == expected.shape
               and not changed(expected, got, values(_judged_as(got_res, k, dtype))) for got, expected, k in crossed):
            return {"id": "outputs_in_other_order", "name": names[i], "other": other, "order": ", ".join(names)}
    return None


def _judged_as(res, i: int, dtype: str) -> str:
    """A float64 call answered in float32 is judged at float32 precision: a detour through float32
    is a precision choice, not a wrong answer."""
    return "float32" if dtype == "float64" and dtype_of(res, i) == "float32" else dtype


def same_grads(got_res, exp_res, what: str, names, *, grads: Callable[[str], Tol], dtype="float32") -> None:
    """Every gradient the reference has, the student's call has too, and they agree within `grads(dtype)`."""
    ok(exp_res, f"reference for {what}")
    ok(got_res, what)
    if got_res.grad_error:
        e = got_res.grad_error
        raise GradeFailure(f"{what}: backward failed: {e['type']}: {e['message']}"
                           + (f"\n{e['traceback']}" if e.get("traceback") else ""), error=e)
    # A gradient that never arrives is said before any that differs: a weight the answer does not use (or whose
    # path autograd lost) also moves every other gradient, which would hide it.
    for name in names:
        if got_res.grad(name) is None:
            raise GradeFailure(f"{what}: no gradient reached {name}: keep the computation inside autograd "
                               "(no .detach(), torch.no_grad() or numpy round trip), and make sure it is used",
                               facts=[{"id": "no_gradient", "name": name}])
    for name in names:
        close(got_res.grad(name), exp_res.grad(name), grads(dtype), f"{what}: gradient of {name}")


def check(condition: bool, message: str, *, pattern: str | None = None) -> None:
    """A rule the answer must keep (a shape, an attribute, a count): when it does not, that is the fact. `pattern`
    says which way it is broken, when a lesson words that way alone (a hint on `rule.<pattern>`, diagnose.keys)."""
    if not condition:
        raise GradeFailure(message, facts=[{"id": "rule", **({"pattern": pattern} if pattern else {})}])


# -- the student's own function does the work -------------------------------------------------
# Property and self-consistency tests (rows sum to 1, masks, causality, permutation, "equals your
# own answer") also hold for answers that compute nothing: uniform weights, zeros, the input handed
# back, a constant table. They award points only when the answers show that the function reacts to
# what it is given, judged from its answers, never from anything the submission says.
def changed(before, after, t: Tol) -> bool:
    """The two answers differ by more than `t` (relative to max(1, max|before|)), or one has nan or
    inf where the other has not."""
    a, b = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if a.shape != b.shape:
        return True
    finite = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(finite, np.isfinite(a) | np.isfinite(b)):
        return True  # a number on one side, nan or inf on the other
    with np.errstate(invalid="ignore"):
        if not np.all((a[~finite] == b[~finite]) | (np.isnan(a[~finite]) & np.isnan(b[~finite]))):
            return True
    scale = max(1.0, float(np.abs(a[finite]).max(initial=0.0)))
    return bool(np.any(np.abs(a[finite] - b[finite]) > t.atol * scale))


def require_real(reasons: list[str], what: str, fix: str) -> None:
    """Fail with every sign that the answers compute nothing, and the formula that would."""
    if reasons:
        raise GradeFailure(f"{what}: these points need code that computes the answer, but "
                           + "; ".join(reasons) + f". {fix}")


# -- structured answers (a "call" or a "session", grader/running/calls.py Adapter.run and .session) -----------
_MISSING = object()


def value(res, what: str, *, count: int | None = None):
    """What a call returned (plain data), or fail with the student's error; `count` = n asks for a tuple
    or list of n values (a function that returns several)."""
    ok(res, what)
    found = res.value
    if count is not None:
        if not isinstance(found, (tuple, list)) or len(found) != count:
            got = f"{len(found)} values" if isinstance(found, (tuple, list)) else _type_words(found)
            raise GradeFailure(f"{what}: expected {count} return values (a tuple), got {got}",
                               facts=[{"id": "value_differs", "where": "", "kind": "count"}])
    return found


def step(res, i: int, what: str):
    """The value step `i` of a session returned, or fail with its error (or the error that stopped the
    session before it)."""
    ok(res, what)
    answer = res.step(i) if i < res.steps_run else {}
    if "value" in answer:
        return answer["value"]
    if "error" in answer:
        ok(_Answered(answer["error"]), what)
    stopped = next((a["error"] for a in res.header.get("steps") or () if "error" in a), None)
    if stopped is not None:
        raise GradeFailure(f"{what}: not run, because an earlier step raised {stopped['type']}: {stopped['message']}",
                           error=stopped)
    raise GradeFailure(f"{what}: the session answered no step {i}")


class _Answered:
    def __init__(self, error):
        self.error = error


def same_value(got, expected, what: str, *, tol: Tol | None = None, strict_sequences: bool = False) -> None:
    """`got` equals `expected`, structure and all: fail at the first difference, naming where it is
    (``[3][1]``, ``["merges"]``) with what was expected there and what came. Numbers are compared within
    `tol` (exactly without one); arrays inside with `close`; a list and a tuple of equal items are equal
    unless `strict_sequences`; a bool is never a number, a str never bytes."""
    found = first_difference(got, expected, tol=tol, strict_sequences=strict_sequences)
    if found is None:
        return
    where, kind, detail, exp_part, got_part = found
    text = f"{what}: differs" + (f" at {where}" if where else "") + (f": {detail}" if detail else "")
    if exp_part is not _MISSING or got_part is not _MISSING:
        text += f"\n  expected: {_shown(exp_part)}\n  got:      {_shown(got_part)}"
    raise GradeFailure(text, facts=[{"id": "value_differs", "where": where, "kind": kind}])


def first_difference(got, expected, *, tol: Tol | None = None, strict_sequences: bool = False, where: str = ""):
    """None if equal, else (where, kind, words, expected part, got part) for the first difference, in the
    order the expected value lists its items."""
    if isinstance(expected, bool) or expected is None:
        if type(got) is type(expected) and got == expected:
            return None
        return where, "value" if type(got) is type(expected) else "type", "", expected, got
    if isinstance(expected, (int, float)):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return where, "type", f"a {_type_words(got)} where a number was expected", expected, got
        if _numbers_match(got, expected, tol):
            return None
        return where, "value", "", expected, got
    if isinstance(expected, (str, bytes)):
        if type(got) is not type(expected):
            return where, "type", f"a {_type_words(got)} where {_type_words(expected)} was expected", expected, got
        if got == expected:
            return None
        at = next((k for k, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        unit = "character" if isinstance(expected, str) else "byte"
        said = f"first at {unit} {at}" if max(len(got), len(expected)) > 20 else ""  # short ones are shown whole
        if at == min(len(got), len(expected)):
            said = f"length {len(got)}, expected {len(expected)}"
        if max(len(got), len(expected)) > 80:  # a window around the difference, not the whole text
            start = max(0, at - 20)
            said += f" (shown from {unit} {start})"
            return where, "value", said, expected[start:start + 60], got[start:start + 60]
        return where, "value", said, expected, got
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or (strict_sequences and type(got) is not type(expected)):
            return where, "type", f"a {_type_words(got)} where {_type_words(expected)} was expected", expected, got
        for k, (g, e) in enumerate(zip(got, expected)):
            found = first_difference(g, e, tol=tol, strict_sequences=strict_sequences, where=f"{where}[{k}]")
            if found is not None and found[0] != f"{where}[{k}]" and _small_item(e) and isinstance(g, (list, tuple)):
                # A pair (or any short item) is shown whole: one of its parts means little on its own.
                return f"{where}[{k}]", found[1], "", e, g
            if found is not None:
                return found
        if len(got) != len(expected):
            k = min(len(got), len(expected))
            said = f"length {len(got)}, expected {len(expected)} (the first " + \
                   ("missing" if len(got) < len(expected) else "extra") + " item)"
            return (f"{where}[{k}]", "length", said,
                    expected[k] if k < len(expected) else _MISSING, got[k] if k < len(got) else _MISSING)
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return where, "type", f"a {_type_words(got)} where a dict was expected", _MISSING, _MISSING
        for key, e in expected.items():
            g = got.get(key, _MISSING) if _hashable(key) else _MISSING
            if g is _MISSING:
                return f"{where}[{key!r}]", "missing_key", f"key {_shown(key)} is missing", e, _MISSING
            found = first_difference(g, e, tol=tol, strict_sequences=strict_sequences, where=f"{where}[{key!r}]")
            if found is not None:
                return found
        extra = [key for key in got if key not in expected]
        if extra:
            return f"{where}[{extra[0]!r}]", "extra_key", \
                f"{len(extra)} key{'s' if len(extra) > 1 else ''} not expected, the first {_shown(extra[0])}", \
                _MISSING, got[extra[0]]
        return None
    if isinstance(expected, np.ndarray):
        if not isinstance(got, np.ndarray):
            return where, "type", f"a {_type_words(got)} where an array was expected", _MISSING, _MISSING
        try:
            close(got, expected, tol or Tol(0.0, 0.0), what="")
        except GradeFailure as failure:
            return where, "value", failure.message.lstrip(": ").split("\n")[0], _MISSING, _MISSING
        return None
    raise TypeError(f"same_value cannot compare with a {type(expected).__name__} (the expected value)")


def _small_item(value) -> bool:
    """A short sequence of plain values (a pair of tokens, a shape): read as one thing."""
    return (isinstance(value, (list, tuple)) and len(value) <= 4 and len(repr(value)) <= 120
            and all(v is None or isinstance(v, (str, bytes, int, float, bool)) for v in value))


def _numbers_match(got, expected, tol: Tol | None) -> bool:
    if got == expected:
        return True
    g, e = float(got), float(expected)
    if math.isnan(g) and math.isnan(e):
        return True
    if tol is None or not (math.isfinite(g) and math.isfinite(e)):
        return False
    return abs(g - e) <= tol.atol * max(1.0, abs(e)) + tol.rtol * abs(e)


def _hashable(key) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def _type_words(value) -> str:
    names = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes", list: "list", tuple: "tuple",
             dict: "dict", type(None): "None", np.ndarray: "array"}
    return names.get(type(value), type(value).__name__)


def _shown(value, limit: int = 200) -> str:
    if value is _MISSING:
        return "(nothing)"
    if isinstance(value, np.ndarray):
        return f"array of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."

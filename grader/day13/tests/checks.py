"""Assertions for the hidden tests: each failure says what was expected, what came out and where."""
from __future__ import annotations

import math

import numpy as np

from grader.day13 import tolerances as tol

SMALL = 36  # arrays with at most this many elements are printed whole


class GradeFailure(AssertionError):
    """A hidden test's verdict: the message is shown to the student."""

    def __init__(self, message: str, *, evidence: dict | None = None, error: dict | None = None):
        super().__init__(message)
        self.message = message
        self.evidence = evidence
        self.error = error  # the student's exception record, when their code raised


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


def causal(T: int, kind="float32") -> np.ndarray:
    return np.tril(np.ones((T, T))).astype(kind)


def padding(lengths, T: int, kind="float32") -> np.ndarray:
    """(B, 1, 1, T): sequence b has lengths[b] real tokens, then padding."""
    m = np.zeros((len(lengths), 1, 1, T))
    for b, n in enumerate(lengths):
        m[b, ..., :n] = 1
    return m.astype(kind)


# -- answers -------------------------------------------------------------------------------
def ok(res, what: str):
    """The call ran without an exception, or fail with the student's error."""
    if res.error:
        e = res.error
        where = {"import": "importing your file", "construct": "constructing the module",
                 "load": "loading the grader's weights", "forward": "running forward",
                 "call": "calling the function", "output": "reading the result"}.get(e.get("stage"), "running")
        text = f"{what}: {e['type']} while {where}: {e['message']}"
        if e.get("traceback"):
            text += f"\n{e['traceback']}"
        raise GradeFailure(text, error=e)
    return res


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
def close(got, expected, t: tol.Tol, what: str, *, evidence: bool = False) -> None:
    """Elementwise |got - expected| <= atol·scale + rtol·|expected| with scale = max(1, max|expected|)."""
    expected = np.asarray(expected, dtype=np.float64)
    got_arr = np.asarray(got)
    if got_arr.shape != expected.shape:
        raise GradeFailure(f"{what}: expected shape {tuple(expected.shape)}, got shape {tuple(got_arr.shape)}")
    got64 = got_arr.astype(np.float64)
    peak = float(np.abs(expected).max(initial=0.0))
    if not math.isfinite(peak):  # nan or inf expected somewhere: the scale comes from the finite values
        peak = float(np.abs(expected[np.isfinite(expected)]).max(initial=0.0))
    scale = max(1.0, peak)
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~((got64 == expected) | (np.abs(got64 - expected) <= t.atol * scale + t.rtol * np.abs(expected)))
    if not bad.any():
        return  # (the nan check below can only clear entries: skipped when none is bad)
    bad &= ~(np.isnan(expected) & np.isnan(got64))
    if not bad.any():
        return
    raise GradeFailure(describe(got64, expected, bad, what), evidence=_evidence(got64, expected) if evidence else None)


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


def same_outputs(got_res, exp_res, what: str, names: tuple[str, ...], *, dtype="float32",
                 evidence_output: int | None = None) -> None:
    """Each named output of the student's call equals the reference's."""
    ok(exp_res, f"reference for {what}")  # a broken reference is the grader's bug, never the student's
    for i, name in enumerate(names):
        expected = exp_res.array(i)
        got = output(got_res, i, f"{what}: {name}", count=len(names))
        close(got, expected, tol.values(_judged_as(got_res, i, dtype)), f"{what}: {name}",
              evidence=(i == evidence_output))


def _judged_as(res, i: int, dtype: str) -> str:
    """A float64 call answered in float32 is judged at float32 precision: a detour through float32
    is a precision choice, not a wrong answer."""
    return "float32" if dtype == "float64" and dtype_of(res, i) == "float32" else dtype


def same_grads(got_res, exp_res, what: str, names, *, dtype="float32") -> None:
    """Every gradient the reference has, the student's call has too, and they agree."""
    ok(exp_res, f"reference for {what}")
    ok(got_res, what)
    if got_res.grad_error:
        e = got_res.grad_error
        raise GradeFailure(f"{what}: backward failed: {e['type']}: {e['message']}"
                           + (f"\n{e['traceback']}" if e.get("traceback") else ""), error=e)
    for name in names:
        expected = exp_res.grad(name)
        got = got_res.grad(name)
        if got is None:
            raise GradeFailure(f"{what}: no gradient reached {name}: keep the computation inside autograd "
                               "(no .detach(), torch.no_grad() or numpy round trip)")
        close(got, expected, tol.grads(dtype), f"{what}: gradient of {name}")


def check(condition: bool, message: str) -> None:
    if not condition:
        raise GradeFailure(message)



# -- the student's own function does the work -------------------------------------------------
# Property and self-consistency tests (rows sum to 1, masks, causality, permutation, "equals your
# own attention") also hold for answers that compute nothing: uniform weights, zeros, the input
# handed back, a constant table. They award points only when the answers show that the function
# reacts to what it is given, judged here from its answers, never from anything the submission says.
def changed(before, after) -> bool:
    """The two answers differ by more than rounding (or one has nan or inf where the other has not)."""
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
    return bool(np.any(np.abs(a[finite] - b[finite]) > tol.DEPENDS.atol * scale))


def require_real(reasons: list[str], what: str, fix: str) -> None:
    """Fail with every sign that the answers compute nothing, and the formula that would."""
    if reasons:
        raise GradeFailure(f"{what}: these points need code that computes the answer, but "
                           + "; ".join(reasons) + f". {fix}")


def attention_probe(student) -> dict:
    """Three calls of the student's scaled_dot_product_attention: fixed Q, K, V, then Q changed, then K
    changed. Asked once per submission and kept in the adapter's memo: it is a property of the function."""
    probe = student.memo.get("attention probe")
    if probe is None:
        Q, K, V = (randn(1500 + j, 2, 4, 3, scale=1.5) for j in range(3))
        Q2, K2 = randn(1503, 2, 4, 3, scale=1.5), randn(1504, 2, 4, 3, scale=1.5)
        probe = student.memo["attention probe"] = {
            "base": student.sdpa(Q, K, V), "Q": student.sdpa(Q2, K, V), "K": student.sdpa(Q, K2, V)}
    return probe


def attention_reasons(probe: dict) -> list[str]:
    """Signs that the probed attention computes nothing: an empty list when it reacts to Q and to K."""
    what = "scaled_dot_product_attention(Q, K, V), each of shape (2, 4, 3)"
    answers = {name: (output(res, 0, what, count=2), output(res, 1, what, count=2))  # its error, if it raised
               for name, res in probe.items()}
    out, weights = answers["base"]
    reasons = [f"its weights stayed the same when {x} changed" for x in ("Q", "K") if not changed(weights, answers[x][1])]
    if not changed(out, answers["Q"][0]):
        reasons.append("its output stayed the same when Q changed")
    return reasons


def attention_is_real(student) -> bool:
    try:
        return not attention_reasons(attention_probe(student))
    except GradeFailure:
        return False


def require_real_attention(student, what: str) -> None:
    reasons = attention_reasons(attention_probe(student))
    reasons[:1] = [r.replace("its ", "scaled_dot_product_attention's ", 1) for r in reasons[:1]]
    require_real(reasons, what,
                 "The weights are softmax(Q Kᵀ / √d_k) along the keys, and the output is weights @ V (handout §3)")


def table_reasons(table) -> list[str]:
    """Signs that a positional table encodes nothing: it must change along the positions and across the
    features, and each feature must be a wave along the positions, as the sine or cosine of an angle
    proportional to the position is (whatever its wavelength or phase)."""
    pe = np.asarray(table, dtype=np.float64)
    if pe.ndim != 2 or not np.isfinite(pe).all():
        return [f"the table is not a finite (T, d_model) matrix (shape {pe.shape})"]
    reasons = []
    if pe.shape[0] > 1 and not changed(np.repeat(pe[:1], pe.shape[0], 0), pe):
        reasons.append("the table has the same row at every position")
    if pe.shape[1] > 1 and not changed(np.repeat(pe[:, :1], pe.shape[1], 1), pe):
        reasons.append("each position has the same value in every feature")
    if pe.shape[0] >= 4 and not reasons:
        # sin(a·p + b) and cos(a·p + b) satisfy s[p+1] + s[p-1] = 2·cos(a)·s[p] at every position p.
        middle, sides = pe[1:-1], pe[2:] + pe[:-2]
        norm = (middle * middle).sum(0)
        c = np.divide((middle * sides).sum(0), norm, out=np.zeros_like(norm), where=norm > 0)
        residual = float(np.abs(sides - c * middle).max(initial=0.0))
        if residual > tol.WAVE.atol * float(np.abs(pe).max()):
            reasons.append("the table's features are not sines or cosines of the position "
                           f"(s[p+1] + s[p-1] = c·s[p] misses by {residual:.3g})")
    return reasons


def require_real_table(table, what: str) -> None:
    require_real(table_reasons(table), what,
                 "PE[pos, 2i] = sin(pos / 10000^(2i/d_model)) and PE[pos, 2i+1] = cos of the same angle (handout §8)")

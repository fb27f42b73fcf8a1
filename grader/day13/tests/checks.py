"""Day 13's assertions for the hidden tests: its masks, its "does the work" probes, and the engine's
comparisons (grader/judging/assertions.py) bound to Day 13's tolerances (grader/day13/tolerances.py)."""
from __future__ import annotations

from functools import partial

import numpy as np

from grader.judging import assertions as engine
from grader.judging.assertions import (  # noqa: F401  (the hidden tests reach every assertion through this module)
    SMALL, GradeFailure, check, close, describe, dtype_of, fmt, ok, output, randn, require_real)
from grader.day13 import tolerances as tol

# The engine's comparisons at Day 13's tolerances.
same_outputs = partial(engine.same_outputs, values=tol.values, probabilities=("weights",))
facts_on_failure = engine.facts_on_failure
TOKENS = ("sentence", "token", "feature")  # the axes of a (B, T, d_model) answer, as the facts name them


def sizes(Q, V) -> dict:
    """The sizes a constant factor of the scores may be named after (grader/judging/diagnose.py)."""
    return {"d_k": int(np.shape(Q)[-1]), "d_v": int(np.shape(V)[-1])}


def cases(results) -> None:
    """Compare several cases, all of them, and fail with the first failure plus what the set of cases shows:
    `results` is [(label, masked, compare)] with compare() raising GradeFailure. When the answers are wrong
    only with a mask (or only without), the failure says so as facts (only_with, only_with_mask)."""
    failures, passed, failed = [], [], []
    for label, masked, compare in results:
        try:
            compare()
            passed.append((label, masked))
        except GradeFailure as failure:
            failures.append(failure)
            failed.append((label, masked))
    if not failures:
        return
    first = failures[0]
    if first.error is None and passed:
        first.facts.append({"id": "only_with", "conditions": [l for l, _ in failed], "right_with": [l for l, _ in passed]})
        if all(m for _, m in failed) and not any(m for _, m in passed):
            first.facts.append({"id": "only_with_mask"})
    raise first
same_grads = partial(engine.same_grads, grads=tol.grads)
# "Your function reacts to its input": two answers differ when some entry moves by more than DEPENDS.
changed = partial(engine.changed, t=tol.DEPENDS)


# -- inputs --------------------------------------------------------------------------------
def causal(T: int, kind="float32") -> np.ndarray:
    return np.tril(np.ones((T, T))).astype(kind)


def padding(lengths, T: int, kind="float32") -> np.ndarray:
    """(B, 1, 1, T): sequence b has lengths[b] real tokens, then padding."""
    m = np.zeros((len(lengths), 1, 1, T))
    for b, n in enumerate(lengths):
        m[b, ..., :n] = 1
    return m.astype(kind)


# -- the student's own function does the work -------------------------------------------------
# The engine's `changed` and `require_real` judge whether answers compute anything; these probes
# ask Day 13's functions the questions that show it.
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

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
    if passed:
        # An error in one case too: the student reads in which cases their code ran and was right.
        first.facts.append({"id": "only_with", "conditions": [l for l, _ in failed], "right_with": [l for l, _ in passed]})
        if first.error is None and all(m for _, m in failed) and not any(m for _, m in passed):
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
# ask Day 13's functions the questions that show it. A probe a submission could recognise could be
# answered apart from the calls it stands for, so a gate is judged on the test's own calls: each probe
# changes one input of one of them (the test's shape, dtype and spread, numbers drawn from the run's
# seed by `student.rng`), and is sent among the test's calls in the run's order (grader/running/calls.py).
# Each also asks that call again with its tokens in another order: an answer that changes with when or
# beside what a call is asked fails the gate of the test whose call it was.
def attention_probes(student, bases, label: str = "") -> list[dict]:
    """Asks, for each of a test's own calls of scaled_dot_product_attention, given as
    (Q, K, V, mask, answer), the same call with Q drawn afresh, with K drawn afresh, and again with its
    queries and keys reordered. A call with one key cannot show anything (its weight is always 1)."""
    probes = []
    for n, (Q, K, V, mask, answer) in enumerate(bases):
        T_q, T_k = np.shape(Q)[-2] if np.ndim(Q) > 1 else 1, np.shape(K)[-2] if np.ndim(K) > 1 else 1
        if np.ndim(Q) < 2 or T_k < 2:
            continue
        rng = student.rng("attention", label, n)
        # Token orders: one for queries and keys together when they are the same tokens (a mask then keeps
        # its meaning whichever of its axes a submission reads), otherwise one each.
        p = token_order(rng, T_q)
        r = p if T_q == T_k else token_order(rng, T_k)
        m = None if mask is None else _reorder_mask(np.asarray(mask), p, r)
        probes.append({
            "answer": answer, "p": p, "r": r, "dtype": str(np.asarray(Q).dtype), "call": (Q, K, V, mask),
            "Q": student.sdpa(_like(rng, Q), K, V, mask),
            "K": student.sdpa(Q, _like(rng, K), V, mask),
            "again": student.sdpa(Q[..., p, :], K[..., r, :], V[..., r, :], m),
        })
    return probes


def _like(rng, a) -> np.ndarray:
    """Normal numbers of `a`'s shape, dtype and spread (the test's range)."""
    a = np.asarray(a)
    spread = float(np.std(a)) or 1.0
    return (rng.standard_normal(a.shape) * spread).astype(a.dtype)


def token_order(rng, n: int) -> np.ndarray:
    """A permutation of n tokens that moves at least one (when n > 1)."""
    order = rng.permutation(n)
    if n > 1 and np.array_equal(order, np.arange(n)):
        order = np.roll(order, 1)
    return order


def _reorder_mask(mask, p, r):
    """The mask of the reordered call: its query axis by p and its key axis by r (an axis of size 1 broadcasts)."""
    if mask.ndim >= 2 and mask.shape[-2] == len(p):
        mask = mask[..., p, :]
    if mask.ndim >= 1 and mask.shape[-1] == len(r):
        mask = mask[..., r]
    return mask


def attention_reasons(probes: list[dict], student=None, *, random_is_real: bool = False) -> list[str]:
    """Signs that the probed attention computes nothing, or answers a call by where it is asked: an empty
    list when, on every call probed, it reacts to Q and to K and answers the reordered call the same way.
    A reordered call answered otherwise is asked once more by `student` (when given), to tell randomness apart:
    answers that follow the run's seed are a reason of their own, or none with `random_is_real`."""
    reasons = []
    for probe in probes:
        base = probe["answer"]
        what = base.request or "scaled_dot_product_attention"
        out, weights = output(base, 0, what, count=2), output(base, 1, what, count=2)
        answers = {name: (output(probe[name], 0, probe[name].request, count=2),
                          output(probe[name], 1, probe[name].request, count=2)) for name in ("Q", "K", "again")}
        found = [f"its weights stayed the same when {x} changed" for x in ("Q", "K") if not changed(weights, answers[x][1])]
        if not changed(out, answers["Q"][0]):
            found.append("its output stayed the same when Q changed")
        if not found and not _same_reordered(out, weights, *answers["again"], probe["p"], probe["r"], probe["dtype"]):
            random = _random_reason(student, probe, out, weights)
            if random is None:
                found.append("its outputs did not follow the tokens when the same tokens came in another order "
                             "(each token's output must depend on the tokens, not on the order they come in)")
            elif not random_is_real:
                found.append(random)
        reasons += [r for r in found if r not in reasons]
    return reasons


def _random_reason(student, probe, out, weights) -> str | None:
    """Why a reordered call was answered otherwise, when it is dropout left on: the probed call asked again gives the
    same answer under the run's seed and another under another seed (as F.dropout does unless told otherwise), each
    entry either dropped (0) or kept at one value whatever the seed, and the entries kept, put together, answer the
    reordered call (asked under both seeds too) as a real attention does. The dropout may be on the weights, or on
    the output only (`F.dropout(weights @ V)`: then the weights follow the tokens exactly). Asked only then. An
    attention that answers by what it saw before answers the same call otherwise even under the same seed, and noise
    that merely follows the seed keeps no value from one seed to the next: both are told they do not follow the
    tokens."""
    if student is None:
        return None
    Q, K, V, mask = probe["call"]
    p, r = probe["p"], probe["r"]
    reordered = None if mask is None else _reorder_mask(np.asarray(mask), p, r)
    what = "scaled_dot_product_attention, asked again"
    try:
        calls = {"same": student.sdpa(Q, K, V, mask), "other": student.sdpa(Q, K, V, mask, seed=1),
                 "again": probe["again"],
                 "again_other": student.sdpa(Q[..., p, :], K[..., r, :], V[..., r, :], reordered, seed=1)}
        answers = {name: (output(call, 0, what, count=2), output(call, 1, what, count=2))
                   for name, call in calls.items()}
    except GradeFailure:
        return None
    t = tol.values(probe["dtype"])
    if changed(weights, answers["same"][1]):
        return None
    if changed(weights, answers["other"][1]):  # dropout on the weights
        first, i, order = weights, 1, lambda a: a[..., p, :][..., r]
    elif not changed(out, answers["same"][0]) and changed(out, answers["other"][0]):
        # dropout on the output only: the weights, the same under every seed, must follow the tokens themselves
        try:
            if engine.changed(np.asarray(weights)[..., p, :][..., r], answers["again"][1], t):
                return None
        except IndexError:
            return None
        first, i, order = out, 0, lambda a: a[..., p, :]
    else:
        return None
    kept = _kept(first, answers["other"][i], t)
    kept_again = _kept(answers["again"][i], answers["again_other"][i], t)
    if kept is None or kept_again is None:
        return None
    try:
        expected = order(kept)
    except IndexError:
        return None
    both = (expected != 0) & (kept_again != 0)
    if expected.shape != kept_again.shape or not both.any() or engine.changed(expected[both], kept_again[both], t):
        return None
    moved = int(np.sum(~np.isclose(np.asarray(first, np.float64), np.asarray(answers["other"][i], np.float64),
                                   rtol=0.0, atol=tol.DEPENDS.atol)))
    which = "weights" if i == 1 else "output"
    return (f"its {which} changed when the same call was asked again under another random seed ({moved} of "
            f"{np.size(first)} moved): something random runs even in eval mode, such as F.dropout, whose training "
            "argument is True unless you pass it (a function has no eval mode: leave dropout to the modules)")


def _kept(a, b, t) -> np.ndarray | None:
    """Two seeds' weights of one call put together, if they are one set of weights with some dropped (0) in each: a
    weight both kept is the same in both. None when a weight both kept differs (noise, not dropout)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return None
    both = (a != 0) & (b != 0)
    if engine.changed(a[both], b[both], t):
        return None
    return np.where(a != 0, a, b)


def _same_reordered(out, weights, out2, weights2, p, r, dtype) -> bool:
    t = tol.values(dtype)
    try:
        expected_w = np.asarray(weights)[..., p, :][..., r]
        expected_out = np.asarray(out)[..., p, :]
    except IndexError:
        return True  # answers of the wrong shape: the value tests say so
    return not engine.changed(expected_w, weights2, t) and not engine.changed(expected_out, out2, t)


def same_in_another_order(first, again, order, dtype) -> bool:
    """Whether `again`, the answer to a call asked again with its tokens (axis -2) in `order`, is `first`'s
    answer in that order, within the value tolerance: a layer whose tokens attend to each other without a
    mask or a position owes the same answer to the same tokens, whatever their order."""
    try:
        expected = np.asarray(first)[..., order, :]
    except IndexError:
        return True  # answers of the wrong shape: the value tests say so
    return not engine.changed(expected, again, tol.values(dtype))


def attention_is_real(student, bases, label: str = "") -> bool:
    """The gate's verdict without its words (a test that compares with the student's own attention
    only when that attention computes something). An attention whose answers follow the seed (dropout left on)
    computes attention: each call is seeded alike, so SelfAttention is compared with it on equal terms, and the
    randomness is charged to the attention's own tests only."""
    try:
        return not attention_reasons(attention_probes(student, bases, label), student, random_is_real=True)
    except GradeFailure:
        return False


def require_real_attention(student, what: str, bases, label: str = "") -> None:
    reasons = attention_reasons(attention_probes(student, bases, label), student)
    reasons[:1] = [r.replace("its ", "scaled_dot_product_attention's ", 1).replace(
        "it answered", "scaled_dot_product_attention answered", 1) for r in reasons[:1]]
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

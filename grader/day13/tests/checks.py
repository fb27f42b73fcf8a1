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


def fails(test, student, reference) -> bool:
    """Whether the hidden test `test` fails the student (its points are lost), asked from inside another test."""
    try:
        test(student, reference)
    except GradeFailure:
        return True
    return False


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
    """A permutation of n tokens that moves every one (when n > 1): one cycle through all of them, in an order of
    `rng`. An order that left a token in place could not show a mistake at that place (red team s39r: a first query
    that attends to nothing passed a module test under the seeds whose order kept query 0 first)."""
    visit = rng.permutation(n)
    order = np.empty(n, dtype=visit.dtype)
    order[visit] = np.roll(visit, -1)  # the token at visit[i] goes where visit[i + 1] was
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


# The seeds a call is asked again under, to tell dropout on a real attention apart (with the run's own: 1 in 256 of
# the weights of an F.dropout(p=0.5) is dropped under all of them, and 1 in 10^8 at the usual p=0.1).
DROPOUT_SEEDS = (1, 2, 3, 4, 5, 6, 7)


def _random_reason(student, probe, out, weights) -> str | None:
    """Why a reordered call was answered otherwise, when it is dropout left on (as F.dropout is unless told
    otherwise): the probed call asked again gives the same answer under the run's seed and another under other
    seeds, asked under 8 seeds in all, with the reordered call too. Asked only then. The dropout may be
    - on the weights: each weight dropped (0) or kept at one value whatever the seed, the output the weights it came
      with @ V, and the weights kept answering the reordered call as a real attention does: the same values and
      (all but a few dropped under every seed) the same places kept;
    - on the output only (`F.dropout(weights @ V)`, held-out s39): the weights the same under every seed and following
      the tokens exactly, and each output entry dropped or kept at one constant times weights @ V.
    An attention that answers by what it saw before answers the same call otherwise even under the same seed; noise
    that merely follows the seed keeps no value from one seed to the next; an output that is not its weights @ V
    (times a constant) is no dropout's; and an entry that is 0 under every seed at one place is no dropout either
    (red team s39r): all are told they do not follow the tokens."""
    if student is None:
        return None
    Q, K, V, mask = probe["call"]
    p, r = probe["p"], probe["r"]
    reordered = None if mask is None else _reorder_mask(np.asarray(mask), p, r)
    calls = ((Q, K, V, mask), (Q[..., p, :], K[..., r, :], V[..., r, :], reordered))
    what = "scaled_dot_product_attention, asked again"
    try:
        same = student.sdpa(Q, K, V, mask)
        same_out, same_weights = output(same, 0, what, count=2), output(same, 1, what, count=2)
        asked = [[(output(a, 0, what, count=2), output(a, 1, what, count=2))
                  for a in [first, *(student.sdpa(*call, seed=seed) for seed in DROPOUT_SEEDS)]]
                 for first, call in zip((probe["answer"], probe["again"]), calls)]
    except GradeFailure:
        return None
    if changed(weights, same_weights) or changed(out, same_out):
        return None
    t = tol.values(probe["dtype"])
    try:
        if changed(weights, asked[0][1][1]):
            which, first, other = "weights", weights, asked[0][1][1]
            real = _dropout_on_weights(asked, calls, p, r, t)
        elif changed(out, asked[0][1][0]):
            which, first, other = "output", out, asked[0][1][0]
            real = _dropout_on_output(asked, calls, p, r, t)
        else:
            return None
    except (ValueError, IndexError):
        return None  # answers of shapes that do not go together: the value tests say so
    if not real:
        return None
    moved = int(np.sum(~np.isclose(np.asarray(first, np.float64), np.asarray(other, np.float64), rtol=0.0,
                                   atol=tol.DEPENDS.atol)))
    return (f"its {which} changed when the same call was asked again under another random seed ({moved} of "
            f"{np.size(first)} moved): something random runs even in eval mode, such as F.dropout, whose training "
            "argument is True unless you pass it (a function has no eval mode: leave dropout to the modules)")


def _dropout_on_weights(asked, calls, p, r, t) -> bool:
    kept = []
    for answers, call in zip(asked, calls):
        v = np.asarray(call[2], np.float64)
        if any(engine.changed(out, np.asarray(w, np.float64) @ v, t) for out, w in answers):
            return False  # the output is not the weights' (red team s39r: an output that is no attention)
        together = _kept_over(answers, 1, t)
        if together is None:
            return False
        kept.append(together)
    expected, kept_again = kept[0][..., p, :][..., r], kept[1]
    if expected.shape != kept_again.shape:
        return False
    both = (expected != 0) & (kept_again != 0)
    if not both.any() or engine.changed(expected[both], kept_again[both], t):
        return False
    # A weight 0 under every seed on one side only: kept on the other, so not blocked by the mask. Dropout leaves a
    # few; an attention that zeroes a place (red team s39r: its first query's row) leaves them all.
    alone = int(np.sum((expected != 0) != (kept_again != 0)))
    return alone <= _few(np.sum((expected != 0) | (kept_again != 0)))


def _dropout_on_output(asked, calls, p, r, t) -> bool:
    weights = [np.asarray(answers[0][1], np.float64) for answers in asked]
    if any(engine.changed(weights[n], w, t) for n, answers in enumerate(asked) for _, w in answers[1:]):
        return False  # the weights move too: neither kind of dropout alone
    if engine.changed(weights[0][..., p, :][..., r], weights[1], t):
        return False  # the weights themselves do not follow the tokens
    for answers, call, w in zip(asked, calls, weights):
        attended = w @ np.asarray(call[2], np.float64)
        kept = _kept_over(answers, 0, t)
        if kept is None or kept.shape != attended.shape:
            return False
        nonzero = kept != 0
        if np.sum(attended != 0) - np.sum(nonzero & (attended != 0)) > _few(np.sum(attended != 0)):
            return False  # outputs 0 under every seed at places weights @ V is not: no dropout
        big = nonzero & (np.abs(attended) > 1e-3)
        if not big.any():
            return False
        scale = float(np.median(kept[big] / attended[big]))
        if not scale >= 1.0 or engine.changed(kept[nonzero], scale * attended[nonzero], t):
            return False  # the kept outputs are not one constant (1 / (1 - p)) times weights @ V
    return True


def _few(count) -> int:
    """Entries dropout may leave at 0 under every one of the 8 seeds and still be dropout: 1 in 8, at least 1."""
    return max(1, int(count) // 8)


def _kept_over(answers, i: int, t) -> np.ndarray | None:
    """The i-th output of every seed's answer put together (_kept), or None if they are no one answer with drops."""
    together = answers[0][i]
    for answer in answers[1:]:
        together = _kept(together, answer[i], t)
        if together is None:
            return None
    return together


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

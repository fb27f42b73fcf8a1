"""Facts about a wrong answer, established from the numbers alone.

A hint that names a cause the numbers do not show sends a student to "fix" correct code. This module
never guesses a cause: each check below establishes one fact about what a student's answer is, compared
with the expected one (or with the student's own answer to a second call), and a fact is data: an id and
its parameters (plain numbers, strings and lists), never text. The words a student reads are chosen from
the ids by the lesson (its rubric's [facts.<id>] and each test's `when`), never parsed back out of text.

    compare(got, expected)        facts about one comparison: where and how much it differs, NaN/inf,
                                  a constant factor, a flipped sign, permuted axes, scores scaled by a
                                  constant (for probabilities), rows that do not sum to 1, weight on a
                                  blocked entry, a difference confined to some positions
    distributions(weights)        rows of weights that do not sum to 1, weight on a blocked entry
    repeat(first, second)         two answers to the same call differ: something random runs
    mixes(alone, together, ...)   one item's answer changes when the other items of its batch change
    only_with(passed, failed)     the answers are wrong only under some of the conditions tried

Standalone on purpose (numpy and the standard library only): the visible tests ship a copy, so a student's
own machine computes the same facts from the visible inputs and the shipped answers.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

ATOL, RTOL = 1e-4, 1e-3  # how close two numbers must be to count as the same, relative to the answer's size
FIT = 2e-3  # how well a fitted constant must explain every entry (relative to the answer's size)
MAX_INDICES = 8  # positions listed in a fact; more are summarised by a pattern or a count


# -- one comparison ---------------------------------------------------------------------------
def compare(got, expected, *, allowed=None, probabilities=False, constants=None, axes=None,
            atol: float = ATOL, rtol: float = RTOL) -> list[dict]:
    """Every fact this module can establish about `got` against `expected` (an empty list when they agree).

    allowed       for probabilities: a boolean array broadcastable to `expected`, False where an entry must be 0
    probabilities the last axis holds distributions (attention weights): also checks their sums and a scaling
                  of the scores they come from
    constants     {name: value} the lesson's sizes (e.g. {"d_k": 5}), to name a constant factor
    axes          names of `expected`'s axes, copied into the facts that name an axis
    """
    g = np.asarray(got, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    names = _factor_names(constants or {})
    axes = list(axes) if axes is not None else None
    if g.shape != e.shape:
        facts = [{"id": "shape", "expected": list(e.shape), "got": list(g.shape)}]
        perm = _permutation(g, e, atol, rtol)
        if perm is not None:
            facts.append({"id": "permuted", "axes": perm, **_axis_names(axes, perm)})
        return facts
    bad = ~_same(g, e, atol, rtol)
    if not bad.any():
        return []
    facts = [_differs(g, e, bad)]
    nonfinite = ~np.isfinite(g) & np.isfinite(e)
    if nonfinite.any():
        facts.append({"id": "nonfinite", "count": int(nonfinite.sum()), "at": _index(np.argwhere(nonfinite)[0])})
        return facts  # every other fit would only restate the NaN
    if g.ndim >= 2:
        perm = _permutation(g, e, atol, rtol)
        if perm is not None:
            facts.append({"id": "permuted", "axes": perm, **_axis_names(axes, perm)})
    factor = _constant_factor(g, e)
    if factor is not None and abs(factor + 1) <= RTOL:
        facts.append({"id": "sign_flipped"})
    elif factor is not None:
        facts.append({"id": "scaled", "factor": _round(factor), "name": _name(factor, names)})
    if probabilities:
        facts += _probability_facts(g, e, allowed, names)
    facts += _only_at(bad, axes)
    return facts


def _same(g, e, atol, rtol):
    scale = max(1.0, float(np.abs(e[np.isfinite(e)]).max(initial=0.0)))
    # tolerances.within's rule, written out: this file ships alone in the students' tests (numpy only). An infinite
    # expected value is met only by itself, else its infinite relative allowance would let any number pass for it.
    magnitude = np.abs(np.where(np.isfinite(e), e, 0.0))
    with np.errstate(invalid="ignore", over="ignore"):
        return (g == e) | (np.abs(g - e) <= atol * scale + rtol * magnitude) | (np.isnan(g) & np.isnan(e))


def _differs(g, e, bad) -> dict:
    """How many entries differ, and the largest difference: where, expected, got."""
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.where(np.isfinite(g) & np.isfinite(e), np.abs(g - e), np.inf)
    gap = np.where(bad, gap, -1.0)
    where = np.unravel_index(int(np.argmax(gap)), gap.shape) if gap.size else ()
    return {"id": "differs", "count": int(bad.sum()), "of": int(bad.size), "at": _index(where),
            "expected": _number(e[where]), "got": _number(g[where])}


def _constant_factor(g, e) -> float | None:
    """c when got = c · expected everywhere (c ≠ 1), else None."""
    norm = float((e * e).sum())
    if norm == 0.0 or np.count_nonzero(e) < 2:
        return None  # a single number is a multiple of any other: no evidence
    c = float((g * e).sum()) / norm
    scale = max(1e-12, float(np.abs(e).max()))
    if abs(c - 1.0) <= RTOL or not np.all(np.abs(g - c * e) <= FIT * max(1.0, abs(c)) * scale):
        return None
    return c


def distributions(weights, allowed=None) -> list[dict]:
    """Facts about weights that must be distributions along their last axis, without an expected answer:
    rows that do not sum to 1 (and the axis they do sum to 1 along, if any), weight where `allowed` is False."""
    g = np.asarray(weights, dtype=np.float64)
    facts = []
    if g.ndim == 0 or not np.isfinite(g).all():
        return facts
    sums = g.sum(-1)
    if not np.allclose(sums, 1.0, atol=1e-4):
        facts.append({"id": "rows_not_normalised", "largest": _round(float(np.abs(sums - 1).max()))})
        other = [a - g.ndim for a in range(g.ndim - 1) if g.shape[a] > 1 and np.allclose(g.sum(a), 1.0, atol=1e-4)]
        if other:
            facts.append({"id": "sums_to_1_along", "axis": other[-1]})
    if allowed is not None:
        blocked = ~np.broadcast_to(np.asarray(allowed, dtype=bool), g.shape)
        leaked = blocked & (g != 0)
        if leaked.any():
            where = np.argwhere(leaked)[int(np.argmax(np.abs(g[leaked])))]
            facts.append({"id": "blocked_weight", "count": int(leaked.sum()), "largest": _number(g[tuple(where)]),
                          "at": _index(where)})
    return facts


def _probability_facts(g, e, allowed, names) -> list[dict]:
    facts = distributions(g, allowed)
    # The softmax of any scores sums to 1 along each row: weights that do not are no scale of the expected scores,
    # however well their logarithms fit one (dropout's survivors, scaled by 1/(1-p), fit a constant row by row).
    normalised = not any(f["id"] == "rows_not_normalised" for f in facts)
    factor = _score_factor(g, e, allowed) if normalised else None
    if factor is not None:
        facts.append({"id": "score_scale", "factor": _round(factor), "name": _name(factor, names)})
    return facts


def _score_factor(g, e, allowed) -> float | None:
    """c when got = softmax(c · s) for the scores s of expected = softmax(s), along the last axis: the
    logarithms of each row agree up to the row's own constant, times c. None when no such c fits."""
    ok = (g > 1e-12) & (e > 1e-12)
    if allowed is not None:
        ok &= np.broadcast_to(np.asarray(allowed, dtype=bool), g.shape)
    if not ok.any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        lg, le = np.where(ok, np.log(g), 0.0), np.where(ok, np.log(e), 0.0)
    count = ok.sum(-1, keepdims=True)
    if int(np.maximum(count - 1, 0).sum()) < 2:
        return None  # one row of two weights fits some constant whatever it holds: no evidence
    mean_g = lg.sum(-1, keepdims=True) / np.maximum(count, 1)
    mean_e = le.sum(-1, keepdims=True) / np.maximum(count, 1)
    cg, ce = np.where(ok, lg - mean_g, 0.0), np.where(ok, le - mean_e, 0.0)
    norm = float((ce * ce).sum())
    if norm < 1e-12:
        return None  # every row of the expected weights is uniform: no scores to compare
    c = float((cg * ce).sum()) / norm
    spread = max(1e-12, float(np.abs(ce).max()))
    if abs(c - 1.0) <= 1e-3 or abs(c) < 1e-3 or not np.all(np.abs(cg - c * ce) <= 1e-3 * max(1.0, abs(c)) * spread + 1e-6):
        return None
    if _vanished(g, e, allowed, c):
        return None
    return c


def _vanished(g, e, allowed, c) -> bool:
    """Whether got is 0 where softmax(c · s) is not: the fit above sees only the weights both sides hold, and weights
    masked out where the answer lets keys through fit some constant on what is left."""
    live = e > 1e-12
    if allowed is not None:
        live &= np.broadcast_to(np.asarray(allowed, dtype=bool), g.shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        z = np.where(live, c * np.log(np.where(live, e, 1.0)), -np.inf)
        z = z - np.max(z, axis=-1, keepdims=True)
        p = np.exp(z)
        p = p / p.sum(-1, keepdims=True)
    return bool(np.any(live & (g <= 1e-12) & (np.nan_to_num(p) > 1e-6)))


def _permutation(g, e, atol, rtol) -> list[int] | None:
    """The axis order p with got = expected.transpose(p) (p not the identity), else None."""
    if g.ndim != e.ndim or g.ndim < 2 or g.ndim > 5 or sorted(g.shape) != sorted(e.shape):
        return None
    for p in itertools.permutations(range(e.ndim)):
        if list(p) == list(range(e.ndim)):
            continue
        moved = np.transpose(e, p)
        if moved.shape == g.shape and _same(g, moved, atol, rtol).all():
            return list(p)
    return None


def _only_at(bad, axes) -> list[dict]:
    """For each axis along which only some positions differ: which ones (first, last, even, odd, from i on,
    or the list). A wrong answer everywhere gives nothing here."""
    facts = []
    for axis in range(bad.ndim):
        n = bad.shape[axis]
        if n < 2:
            continue
        hit = bad.any(axis=tuple(a for a in range(bad.ndim) if a != axis))
        where = [int(i) for i in np.flatnonzero(hit)]
        if len(where) == n:
            continue
        fact = {"id": "only_at", "axis": axis - bad.ndim, "size": n, "pattern": _pattern(where, n),
                "name": axes[axis] if axes is not None and len(axes) == bad.ndim else f"axis {axis - bad.ndim}",
                "start": where[0], "end": where[-1]}
        if len(where) <= MAX_INDICES:
            fact["indices"] = where
        else:
            fact["count"] = len(where)
        facts.append(fact)
    return facts


def _pattern(where: list[int], n: int) -> str:
    if where == [0]:
        return "first"
    if where == [n - 1]:
        return "last"
    if n >= 4 and where == list(range(0, n, 2)):
        return "even"
    if n >= 4 and where == list(range(1, n, 2)):
        return "odd"
    if where == list(range(where[0], n)):
        return "from"
    if where == list(range(0, where[-1] + 1)):
        return "up_to"
    return "some"


# -- several calls ----------------------------------------------------------------------------
def repeat(first, second, *, atol: float = ATOL, rtol: float = RTOL) -> list[dict]:
    """Two answers to the same call: a fact when they differ (something random runs in the function)."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if a.shape != b.shape:
        return [{"id": "random", "shapes": [list(a.shape), list(b.shape)]}]
    bad = ~_same(b, a, atol, rtol)
    if not bad.any():
        return []
    with np.errstate(invalid="ignore"):
        gap = np.where(bad, np.abs(a - b), -1.0)
    return [{"id": "random", "count": int(bad.sum()), "of": int(bad.size), "largest": _number(np.nanmax(gap))}]


def mixes(alone, together, *, axis: int = 0, changed=(), atol: float = ATOL, rtol: float = RTOL) -> list[dict]:
    """Items along `axis` whose answer changed when only the items `changed` of their batch were changed:
    `alone` and `together` are the answers to the two batches. A fact when an unchanged item's answer moved."""
    a, b = np.asarray(alone, dtype=np.float64), np.asarray(together, dtype=np.float64)
    if a.shape != b.shape:
        return []
    moved = [i for i in range(a.shape[axis]) if i not in set(changed)
             and not _same(np.take(b, i, axis), np.take(a, i, axis), atol, rtol).all()]
    return [{"id": "batch_mixing", "moved": moved[:MAX_INDICES], "changed": list(changed)}] if moved else []


def only_with(passed: list[str], failed: list[str]) -> list[dict]:
    """The conditions (the caller's words for them: "mask", "float64") under which the answers were wrong,
    when others were right."""
    return [{"id": "only_with", "conditions": list(failed), "right_with": list(passed)}] if passed and failed else []


# -- words ------------------------------------------------------------------------------------
def ids(facts) -> list[str]:
    return [f["id"] for f in facts]


def keys(fact: dict) -> list[str]:
    """The names a lesson may attach words or a hint to, most particular first: only_at.from.feature,
    only_at.from, only_at (the pattern and the axis's name, for the facts that have them)."""
    found = [fact["id"]]
    if "pattern" in fact:
        found.insert(0, f"{fact['id']}.{fact['pattern']}")
        if "name" in fact:
            found.insert(0, f"{fact['id']}.{fact['pattern']}.{fact['name']}")
    return found


def matched(facts, wanted) -> list[str]:
    """The keys in `wanted` that one of the facts has (see `keys`)."""
    wanted = set(wanted)
    return [k for f in facts for k in keys(f) if k in wanted]


def words(facts, texts: dict[str, str]) -> list[str]:
    """The lesson's sentence for each fact that has one, its parameters filled in ({name}, {count}, ...).
    A fact with no sentence, or whose sentence needs a parameter the fact lacks, says nothing."""
    said = []
    for fact in facts:
        text = next((texts[k] for k in keys(fact) if texts.get(k)), None)
        if not text:
            continue
        try:
            line = text.format(**{k: _shown(v) for k, v in fact.items()})
        except (KeyError, IndexError, ValueError):
            continue
        if line not in said:
            said.append(line)
    return said


def _shown(value):
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return "(" + ", ".join(str(v) for v in value) + ")"
    if isinstance(value, list):
        return "; ".join(str(v) for v in value)
    return value


# -- naming a constant --------------------------------------------------------------------------
def _factor_names(constants: dict) -> list[tuple[str, float]]:
    """Candidate names of a constant factor: each size n of the lesson as √n, n, 1/√n, 1/n, then ratios
    of two sizes, then plain numbers (2, √2, 1/2, 1/√2). A size comes first: with d_k = 2, a factor √2
    is more telling as √d_k."""
    found = []
    sizes = [(str(k), float(v)) for k, v in constants.items() if isinstance(v, (int, float)) and v > 0]
    for k, v in sizes:
        found += [(f"√{k}", math.sqrt(v)), (k, v), (f"1/√{k}", 1 / math.sqrt(v)), (f"1/{k}", 1 / v)]
    for (a, x), (b, y) in itertools.permutations(sizes, 2):
        if x != y:
            found += [(f"√({a}/{b})", math.sqrt(x / y)), (f"{a}/{b}", x / y)]
    return found + [("2", 2.0), ("√2", math.sqrt(2)), ("1/2", 0.5), ("1/√2", 1 / math.sqrt(2)), ("−1", -1.0)]


def _name(value: float, names) -> str:
    for name, v in names:
        if abs(value - v) <= 2e-3 * abs(v):
            return name
    return f"{value:.4g}"


def _round(x: float) -> float:
    return float(f"{x:.5g}")


def _number(x) -> float | str:
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return _round(x)


def _index(where) -> list[int]:
    return [int(i) for i in where]


def _axis_names(axes, perm) -> dict:
    return {"names": [axes[p] for p in perm]} if axes is not None and len(axes) == len(perm) else {}

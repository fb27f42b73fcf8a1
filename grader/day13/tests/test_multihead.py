"""Hidden tests for multihead.py (handout §7). Points: rubric.toml [multihead.*]."""
import numpy as np

from grader.day13 import tolerances as tol
from grader.judging import diagnose
from grader.day13.tests import checks as ck

F32, F64 = "float32", "float64"


def _weights(seed, d_model, dtype=F32):
    s = 1 / np.sqrt(d_model)
    return {
        "qkv.weight": ck.randn(seed, 3 * d_model, d_model, dtype=dtype, scale=s),
        "qkv.bias": ck.randn(seed + 1, 3 * d_model, dtype=dtype, scale=0.1),
        "out.weight": ck.randn(seed + 2, d_model, d_model, dtype=dtype, scale=s),
        "out.bias": ck.randn(seed + 3, d_model, dtype=dtype, scale=0.1),
    }


def test_rejects_bad_heads(student, reference):
    bad = student.inspect("multihead", "MultiHeadAttention", [10, 3])
    good = student.inspect("multihead", "MultiHeadAttention", [12, 3])
    e = bad.error
    if e is not None and e.get("stage") == "import":
        ck.ok(bad, "MultiHeadAttention(10, 3)")  # multihead.py does not import: said as such, not as a wrong error
    ck.check(e is not None and e.get("stage") == "construct" and e["type"] in ("ValueError", "AssertionError"),
             "MultiHeadAttention(10, 3) must raise ValueError (or fail an assert) at construction: "
             "10 features cannot be split into 3 equal heads"
             + (f"; it raised {e['type']}: {e['message']}" if e else "; it raised nothing"))
    ck.ok(good, "MultiHeadAttention(12, 3) must construct")


def test_attributes(student, reference):
    res = student.inspect("multihead", "MultiHeadAttention", [16, 4], attrs=("h", "d_k", "qkv", "out"))
    big = student.inspect("multihead", "MultiHeadAttention", [512, 8], attrs=("qkv", "out"))
    attrs = ck.ok(res, "MultiHeadAttention(16, 4)").inspect["attrs"]
    for name, value in (("h", 4), ("d_k", 4)):
        a = attrs[name]
        ck.check(a.get("kind") == "value" and a.get("value") == value,
                 f"MultiHeadAttention(16, 4).{name} must be {value}, got {a.get('value', a.get('kind'))}")
    for name, shapes in (("qkv", {"weight": [48, 16], "bias": [48]}), ("out", {"weight": [16, 16], "bias": [16]})):
        a = attrs[name]
        ck.check(a.get("kind") == "module", f"MultiHeadAttention(16, 4) needs an attribute {name} (an nn.Linear)")
        ck.check(a.get("parameters") == shapes,
                 f"MultiHeadAttention(16, 4).{name}: expected parameters {shapes}, got {a.get('parameters')}")
    # §7 worked problem: d_model = 512, 8 heads -> 4 x 512 x 512 = 1,048,576 projection weights.
    attrs = ck.ok(big, "MultiHeadAttention(512, 8)").inspect["attrs"]
    n = sum(int(np.prod(attrs[m]["parameters"].get("weight", [0]))) for m in ("qkv", "out"))
    ck.check(n == 1_048_576, f"MultiHeadAttention(512, 8): the Q, K, V and output projections should hold "
                             f"1,048,576 weights (§7), got {n:,}")


REFERENCE_CASES = [  # (what, B, T, d_model, heads, dtype)
    ("B=2, T=5, d_model=16, 4 heads", 2, 5, 16, 4, F32),
    ("B=1, T=1, d_model=8, 2 heads", 1, 1, 8, 2, F32),
    ("head size 1: d_model=8, 8 heads", 3, 4, 8, 8, F32),
    ("one head: d_model=12", 2, 3, 12, 1, F32),
    ("T=7 ≠ d_model=24, 3 heads", 2, 7, 24, 3, F32),
    ("float64, d_model=16, 4 heads", 2, 6, 16, 4, F64),
]


def test_reference(student, reference):
    asked = [(what, dtype, dict(x=ck.randn(700 + n, B, T, D, dtype=dtype), weights=_weights(750 + 10 * n, D, dtype),
                                n_heads=h, dtype=dtype)) for n, (what, B, T, D, h, dtype) in enumerate(REFERENCE_CASES)]
    pairs = [(what, dtype, student.mha(**call), reference.mha(**call)) for what, dtype, call in asked]
    # Every case compared, the first failure raised: a mistake that only more than one head shows is said so.
    with ck.facts_on_failure(lambda: _random_facts(student, pairs[0][2], asked[0][2])):
        ck.cases([(what, False, lambda what=what, dtype=dtype, got=got, exp=exp: ck.same_outputs(
            got, exp, f"MultiHeadAttention ({what})", ("output",), dtype=dtype)) for what, dtype, got, exp in pairs])


def _random_facts(student, answer, call: dict) -> list[dict]:
    """`call` (student.mha's arguments), whose answer was `answer`, asked again under another random seed, only once
    a comparison has failed (a layer that passes would answer it for nothing): dropout left on in eval mode answers
    no call the same twice (red team s53r)."""
    again = student.mha(**call, seed=1)
    return diagnose.repeat(answer.array(0), again.array(0)) if not (answer.error or again.error) else []


# 2 heads of 8 features, not 4 of 4: with d_k = √d_model, scores divided by d_k (queries scaled before an attention that
# scales again) are scores divided by √d_model, and the test could not tell those two mistakes apart.
def test_masks(student, reference):
    B, T, D, h = 2, 5, 16, 2
    x, w = ck.randn(800, B, T, D), _weights(801, D)
    cases = [
        ("causal (T, T) float 0/1", ck.causal(T)),
        ("causal (T, T) bool", ck.causal(T, bool)),
        ("padding (B, 1, 1, T) float, lengths 3 and 5", ck.padding([3, 5], T)),
        ("padding (B, 1, 1, T) bool, lengths 5 and 2", ck.padding([5, 2], T, bool)),
    ]
    pairs = [(what, student.mha(x, w, h, m), reference.mha(x, w, h, m)) for what, m in cases]
    for what, got, exp in pairs:
        with ck.facts_on_failure(lambda got=got, what=what: _random_facts(
                student, got, dict(x=x, weights=w, n_heads=h, mask=dict(cases)[what]))):
            ck.same_outputs(got, exp, f"MultiHeadAttention with mask {what}", ("output",))


def test_gradients(student, reference):
    B, T, D, h = 2, 5, 16, 2  # d_k ≠ √d_model, as in test_masks
    x, w, g = ck.randn(900, B, T, D), _weights(901, D), ck.randn(910, B, T, D)
    got = student.mha(x, w, h, ck.causal(T), grad_out=g)
    exp = reference.mha(x, w, h, ck.causal(T), grad_out=g)
    with ck.facts_on_failure(lambda: _random_facts(student, got, dict(x=x, weights=w, n_heads=h, mask=ck.causal(T)))):
        ck.same_grads(got, exp, "MultiHeadAttention backward (causal mask)",
                      ("x", "qkv.weight", "qkv.bias", "out.weight", "out.bias"))


def test_properties(student, reference):
    """Causality and permutation, worth points only for a layer whose tokens attend to each other
    through queries and keys (a per-token map, zeros, the input handed back or a mean over the tokens has
    both properties). The gate's extra calls draw their numbers from the run's seed (student.rng), and its
    plain call is asked again with the tokens in an order of that seed."""
    B, T, D, h, t = 2, 6, 16, 4, 2
    x, w = ck.randn(1000, B, T, D), _weights(1001, D)
    x2 = x.copy()
    x2[:, t + 1:] = ck.randn(1010, B, T - t - 1, D)
    perm = np.array([2, 5, 0, 4, 1, 3])
    rng = student.rng("later tokens and weights")
    x3 = x.copy()
    x3[:, t + 1:] = rng.standard_normal((B, T - t - 1, D)).astype(F32)
    a = student.mha(x, w, h, ck.causal(T))
    b = student.mha(x2, w, h, ck.causal(T))
    plain = student.mha(x, w, h)
    permuted = student.mha(x[:, perm], w, h)
    later = student.mha(x3, w, h)
    rows = {"query": slice(0, D), "key": slice(D, 2 * D)}
    other = {part: _with_rows(w, r, rng) for part, r in rows.items()}
    moved = {part: student.mha(x, other[part], h) for part in rows}
    order = ck.token_order(student.rng("tokens in another order"), T)
    again = student.mha(x[:, order], w, h)
    p = tol.PROPERTY[F32]
    out = ck.output(plain, 0, "output", count=1)
    reasons = []
    seen = ck.output(later, 0, "output, later tokens changed", count=1)[:, : t + 1] - out[:, : t + 1]
    if not ck.changed(np.zeros_like(seen), seen):
        reasons.append(f"without a mask, the outputs at positions 0..{t} stayed the same when later tokens changed "
                       "(no token attends to the others)")
    elif not ck.changed(np.repeat(seen[:, :1], t + 1, 1), seen):
        # Attention: what position i takes from the later tokens depends on its own query, so it moves
        # differently at each position; a mean over the tokens moves every position alike.
        reasons.append(f"without a mask, when later tokens changed, the outputs at positions 0..{t} all moved "
                       "by the same amount (what each position takes from the others does not depend on its own query)")
    for part in rows:
        if not ck.changed(out, ck.output(moved[part], 0, f"output, {part} weights changed", count=1)):
            reasons.append(f"the output stayed the same when the {part} rows of qkv changed")
    if not reasons and not ck.same_in_another_order(out, ck.output(again, 0, "output, the tokens in another order",
                                                                   count=1), order, F32):
        # Asked only then: the same call under another random seed (dropout left on answers no call the same twice).
        moved = diagnose.repeat(out, ck.output(student.mha(x, w, h, seed=1), 0, "output, asked again", count=1))
        reasons.append(f"the same call asked again gave other answers ({moved[0].get('count', 'all')} of "
                       f"{moved[0].get('of', np.size(out))} values moved): something random runs even in eval mode, "
                       "such as dropout that ignores self.training" if moved else
                       "its outputs did not follow the tokens when the same tokens came in another order "
                       "(each token's output must depend on the tokens, not on the order they come in)")
    ck.require_real(reasons, "MultiHeadAttention's causality and permutation properties",
                    "Each head's weights are softmax(q kᵀ / √d_k) of its own queries and keys, "
                    "applied to its values (handout §7)")
    out_a, out_b = ck.output(a, 0, "causal output", count=1), ck.output(b, 0, "causal output, later tokens changed", count=1)
    ck.close(out_b[:, : t + 1], out_a[:, : t + 1], p,
             f"under a causal mask, outputs at positions 0..{t} must not change when later tokens change")
    ck.close(ck.output(permuted, 0, "output for permuted tokens", count=1), out[:, perm], p,
             "without a mask, permuting the tokens must permute the outputs the same way")


def _with_rows(w: dict, rows: slice, rng) -> dict:
    """The weights with one part of qkv (its query, key or value rows, weight and bias) drawn afresh."""
    changed = dict(w)
    for name, scale in (("qkv.weight", 1 / np.sqrt(w["qkv.weight"].shape[1])), ("qkv.bias", 0.1)):
        changed[name] = w[name].copy()
        changed[name][rows] = (rng.standard_normal(changed[name][rows].shape) * scale).astype(w[name].dtype)
    return changed

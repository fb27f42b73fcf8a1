"""Hidden tests for block.py (handout §9–§12). Points: rubric.toml [block.*].

The block always runs with the grader's stand-in attention (grader/day13/standins.py) in
place of the student's MultiHeadAttention, so a multihead bug never costs block points.
"""
import numpy as np

from grader.judging import diagnose
from grader.day13 import tolerances as tol
from grader.day13.tests import checks as ck

F32, F64 = "float32", "float64"
# CONTRACT.md: a LayerNorm's eps may be any positive value up to the handout's 1e-5.
LN_EPS_MAX = 1e-5


def _weights(seed, d_model, d_ff=None, dtype=F32):
    d_ff = 4 * d_model if d_ff is None else d_ff
    s, sf = 1 / np.sqrt(d_model), 1 / np.sqrt(d_ff)
    return {
        "attn.proj.weight": ck.randn(seed, d_model, d_model, dtype=dtype, scale=s),
        "attn.proj.bias": ck.randn(seed + 1, d_model, dtype=dtype, scale=0.1),
        "ln1.weight": 1 + ck.randn(seed + 2, d_model, dtype=dtype, scale=0.2),
        "ln1.bias": ck.randn(seed + 3, d_model, dtype=dtype, scale=0.2),
        "ln2.weight": 1 + ck.randn(seed + 4, d_model, dtype=dtype, scale=0.2),
        "ln2.bias": ck.randn(seed + 5, d_model, dtype=dtype, scale=0.2),
        "ffn.0.weight": ck.randn(seed + 6, d_ff, d_model, dtype=dtype, scale=s),
        "ffn.0.bias": ck.randn(seed + 7, d_ff, dtype=dtype, scale=0.1),
        "ffn.2.weight": ck.randn(seed + 8, d_model, d_ff, dtype=dtype, scale=sf),
        "ffn.2.bias": ck.randn(seed + 9, d_model, dtype=dtype, scale=0.1),
    }


def test_attributes(student, reference):
    res = student.inspect("block", "TransformerBlock", [16, 4], attrs=("attn", "ln1", "ln2", "ffn"))
    big = student.inspect("block", "TransformerBlock", [512, 8], attrs=("ffn",))
    bert = student.inspect("block", "TransformerBlock", [768, 12], {"d_ff": 3072}, attrs=("ffn",))
    attrs = ck.ok(res, "TransformerBlock(16, 4)").inspect["attrs"]
    ck.check(attrs["attn"].get("kind") == "module", "TransformerBlock needs an attribute attn (its attention)")
    for name in ("ln1", "ln2"):
        a = attrs[name]
        ck.check(a.get("kind") == "module",
                 f"TransformerBlock.{name} must be an nn.LayerNorm(d_model), got {a.get('type', 'nothing')}")
        ck.check(a.get("parameters") == {"weight": [16], "bias": [16]},
                 f"TransformerBlock(16, 4).{name}: expected weight and bias of shape [16], got {a.get('parameters')}")
    ffn = attrs["ffn"]
    expected = {"0.weight": [64, 16], "0.bias": [64], "2.weight": [16, 64], "2.bias": [16]}
    got = ffn.get("parameters") or {}
    ck.check(ffn.get("kind") == "module" and ffn.get("sequential", True) and _same_shapes(got, expected),
             f"TransformerBlock(16, 4).ffn: expected nn.Sequential(Linear(16, 64), GELU(), Linear(64, 16)) "
             f"with parameters {expected}, got {ffn.get('type', 'nothing')} with {got}")
    # §9 worked problems: 2,099,712 FFN parameters for 512 -> 2048 -> 512, and 4,722,432 for 768 -> 3072 -> 768.
    for r, label, count in ((big, "TransformerBlock(512, 8)", 2_099_712),
                            (bert, "TransformerBlock(768, 12, d_ff=3072)", 4_722_432)):
        p = ck.ok(r, label).inspect["attrs"]["ffn"].get("parameters", {})
        n = sum(int(np.prod(s)) for s in p.values())
        ck.check(n == count, f"{label}.ffn should hold {count:,} parameters (§9), got {n:,}")


# The wiring tests (Post-LN, Pre-LN, the mask, the gradients) build their blocks with d_ff given, 4 * d_model:
# a wrong default d_ff is one mistake, charged by block.attributes (which builds TransformerBlock(16, 4)), not
# by every test that happens to rely on the default.
def _cases(pre_ln):
    return [  # (what, x, weights, mask, dtype, d_ff)
        ("B=2, T=5, d_model=16", ck.randn(1200, 2, 5, 16, scale=2.0), _weights(1201, 16), None, F32, 64),
        ("causal mask (T, T)", ck.randn(1210, 2, 6, 8, scale=2.0), _weights(1211, 8), ck.causal(6), F32, 32),
        ("T=1", ck.randn(1220, 3, 1, 8), _weights(1221, 8), None, F32, 32),
        ("float64, padding mask", ck.randn(1230, 2, 4, 8, dtype=F64), _weights(1231, 8, dtype=F64),
         ck.padding([2, 4], 4), F64, 32),
    ]


def _compare(student, reference, pre_ln, label):
    pairs = []
    for what, x, w, m, dtype, d_ff in _cases(pre_ln):
        kw = dict(n_heads=2, pre_ln=pre_ln, d_ff=d_ff, mask=m, dtype=dtype)
        pairs.append((what, m is not None, dtype, student.block(x, w, **kw), reference.block(x, w, **kw)))
    first = pairs[0][3]

    def more_facts():
        # Two more calls for what the numbers show, asked only once a comparison has failed (a block that
        # passes would answer them for nothing): the first case under another random seed (randomness left
        # on in eval mode), and with its first sentence changed (sentences that leak into each other).
        what, x, w, m, dtype, d_ff = _cases(pre_ln)[0]
        kw = dict(n_heads=2, pre_ln=pre_ln, d_ff=d_ff, mask=m, dtype=dtype)
        other = x.copy()
        other[0] = ck.randn(1290, *x.shape[1:], scale=2.0)
        reseeded, changed = student.block(x, w, seed=1, **kw), student.block(other, w, **kw)
        a, b, c = (r.array(0) for r in (first, reseeded, changed))
        return diagnose.repeat(a, b) + ([] if diagnose.repeat(a, b) else diagnose.mixes(a, c, changed=(0,)))

    with ck.facts_on_failure(more_facts, lambda: _eps_facts(student)):
        ck.cases([(what, masked, lambda what=what, dtype=dtype, got=got, exp=exp: ck.same_outputs(
            got, exp, f"{label} block ({what})", ("output",), dtype=dtype, facts={"axes": ck.TOKENS}))
            for what, masked, dtype, got, exp in pairs])


def test_post_ln(student, reference):
    _compare(student, reference, False, "Post-LN")


def test_pre_ln(student, reference):
    _compare(student, reference, True, "Pre-LN")


def test_mask_passthrough(student, reference):
    """Judged by what the mask must do, not by the reference, so a wiring bug costs only the wiring tests;
    worth points only for a block whose tokens see each other and whose feed-forward is used (the input
    handed back, zeros or a per-token map keep every mask's promise)."""
    B, T, D, t = 2, 6, 8, 2
    lengths = [3, 6]
    # The LayerNorms keep their own weights: what the mask does is the same with any, and a block whose norms have
    # none (elementwise_affine=False, a mistake block.attributes and the wiring tests charge) is judged here too.
    x, w = ck.randn(1300, B, T, D, scale=2.0), {k: v for k, v in _weights(1301, D).items() if not k.startswith("ln")}
    later = x.copy()
    later[:, t + 1:] = ck.randn(1310, B, T - t - 1, D)
    padded = x.copy()
    padded[0, lengths[0]:] = ck.randn(1311, T - lengths[0], D)
    pad = ck.padding(lengths, T)
    # The probes use inputs of unit scale: at scale 2 each token's stand-in attention rests almost wholly
    # on itself, so what the other tokens contribute would be too small to see. Their numbers come from
    # the run's seed (student.rng), so no submission can know them before it answers.
    rng = student.rng("probe inputs")
    y = rng.standard_normal((B, T, D)).astype(F32)
    y_later = y.copy()
    y_later[:, t + 1:] = rng.standard_normal((B, T - t - 1, D)).astype(F32)
    fresh = _weights(1322, D)  # the shapes and scales of the feed-forward weights; the numbers are drawn below
    other_ffn = {**w, **{k: (rng.standard_normal(v.shape) * float(np.std(v))).astype(F32) if k.endswith("weight")
                         else (rng.standard_normal(v.shape) * 0.1).astype(F32)
                         for k, v in fresh.items() if k.startswith("ffn.")}}
    calls, probes = [], []
    for pre_ln in (False, True):
        kw = dict(n_heads=2, pre_ln=pre_ln, d_ff=4 * D)
        name = "Pre-LN" if pre_ln else "Post-LN"
        calls.append((name, kw,
                      student.block(x, w, mask=ck.causal(T), **kw), student.block(later, w, mask=ck.causal(T), **kw),
                      student.block(x, w, mask=pad, **kw), student.block(padded, w, mask=pad, **kw)))
        # The first probe asked again with its tokens, and its padding mask's keys, in an order of the seed.
        order = ck.token_order(student.rng("tokens in another order", name), T)
        probes.append((name, student.block(y, w, mask=pad, **kw), student.block(y_later, w, mask=pad, **kw),
                       student.block(y, other_ffn, mask=pad, **kw),
                       order, student.block(y[:, order], w, mask=pad[..., order], **kw)))
    reasons = []
    for name, base, moved, ffn, order, again in probes:
        before = len(reasons)
        out = ck.output(base, 0, f"{name} block, padding mask", count=1)
        out_moved = ck.output(moved, 0, f"{name} block, padding mask, later tokens changed", count=1)
        if not ck.changed(out[1, : t + 1], out_moved[1, : t + 1]):
            reasons.append(f"{name}: the outputs at positions 0..{t} of a sequence with no padding stayed the same "
                           "when its later tokens changed (no token sees the others)")
        if not ck.changed(out, ck.output(ffn, 0, f"{name} block, other feed-forward weights", count=1)):
            reasons.append(f"{name}: the output stayed the same when the feed-forward weights changed")
        if len(reasons) == before and not ck.same_in_another_order(
                out, ck.output(again, 0, f"{name} block, padding mask, the tokens in another order", count=1), order, F32):
            reasons.append(_reorder_reason(student, name, out, (y, w, pad, kw)))
    ck.require_real(reasons, "the mask's pass-through, judged by what the mask must do",
                    "Post-LN: x = ln1(x + attn(x, mask)); x = ln2(x + ffn(x)). "
                    "Pre-LN: x = x + attn(ln1(x), mask); x = x + ffn(ln2(x)) (handout §12)")
    p = tol.PROPERTY[F32]
    for name, kw, a, b, c, d in calls:
        # The same block without a mask is asked only once the mask has failed: what it shows is a fact.
        with ck.facts_on_failure(lambda a=a, kw=kw: _mask_ignored(a, student.block(x, w, **kw))):
            _mask_reaches(p, name, t, lengths, a, b, c, d)


def _reorder_reason(student, name, out, call) -> str:
    """Why the tokens in another order got other answers. Asked only then: the same call under another random
    seed, since a block that draws random numbers in eval mode (dropout left on) answers no call the same twice."""
    y, w, pad, kw = call
    again = ck.output(student.block(y, w, mask=pad, seed=1, **kw), 0, f"{name} block, padding mask, asked again",
                      count=1)
    moved = diagnose.repeat(out, again)
    if moved:
        return (f"{name}: the same call asked again gave other answers ({moved[0].get('count', 'all')} of "
                f"{moved[0].get('of', np.size(out))} values moved): something random runs even in eval mode, such "
                "as dropout that ignores self.training")
    return (f"{name}: its outputs did not follow the tokens when the same tokens came in another order "
            "(each token's output must depend on the tokens, not on the order they come in)")


def _mask_ignored(masked, unmasked) -> list[dict]:
    """The fact that the block's output is the same with a causal mask and without one."""
    if masked.error or unmasked.error or diagnose.compare(masked.array(0), unmasked.array(0)):
        return []
    return [{"id": "mask_ignored"}]


def _mask_reaches(p, name, t, lengths, a, b, c, d):
    out_a = ck.output(a, 0, f"{name} block, causal mask", count=1)
    out_b = ck.output(b, 0, f"{name} block, causal mask, later tokens changed", count=1)
    ck.close(out_b[:, : t + 1], out_a[:, : t + 1], p,
             f"{name} block under a causal mask: outputs at positions 0..{t} changed when later tokens changed, "
             "so the mask did not reach the attention")
    out_c = ck.output(c, 0, f"{name} block, padding mask", count=1)
    out_d = ck.output(d, 0, f"{name} block, padding mask, padded tokens changed", count=1)
    ck.close(out_d[0, : lengths[0]], out_c[0, : lengths[0]], p,
             f"{name} block with a padding mask (B, 1, 1, T): outputs at the real tokens changed when only "
             "padding tokens changed, so the mask did not reach the attention")


def test_gradients(student, reference):
    B, T, D = 2, 5, 8
    x, w, g = ck.randn(1400, B, T, D), _weights(1401, D), ck.randn(1410, B, T, D)
    pairs = []
    for pre_ln in (False, True):
        kw = dict(n_heads=2, pre_ln=pre_ln, d_ff=4 * D, mask=ck.causal(T), grad_out=g)
        pairs.append(("Pre-LN" if pre_ln else "Post-LN", student.block(x, w, **kw), reference.block(x, w, **kw)))
    with ck.facts_on_failure(lambda: _eps_facts(student)):
        for name, got, exp in pairs:
            ck.same_grads(got, exp, f"{name} block backward (causal mask)",
                          ("x", "ln1.weight", "ln2.bias", "ffn.0.weight", "ffn.2.bias", "attn.proj.weight"))


def _eps_facts(student) -> list[dict]:
    """The LayerNorms whose eps the contract does not allow, read from a block the student's code builds. Asked only
    once a comparison has failed: an eps over the bound moves every normalised value by about that much, which the
    numbers alone cannot tell from a wiring mistake (the visible test_block_parts names the bound too)."""
    res = student.inspect("block", "TransformerBlock", [8, 2], attrs=("ln1.eps", "ln2.eps"))
    if res.error:
        return []
    found = []
    for path, a in res.inspect.get("attrs", {}).items():
        eps = a.get("value") if a.get("kind") == "value" else None
        if isinstance(eps, (int, float)) and not isinstance(eps, bool) and not 0 < eps <= LN_EPS_MAX:
            found.append({"id": "ln_eps", "name": path.split(".")[0], "eps": f"{eps:g}"})
    return found


def test_d_ff(student, reference):
    res = student.inspect("block", "TransformerBlock", [8, 2], {"d_ff": 12}, attrs=("ffn",))
    ffn = ck.ok(res, "TransformerBlock(8, 2, d_ff=12)").inspect["attrs"]["ffn"]
    expected = {"0.weight": [12, 8], "0.bias": [12], "2.weight": [8, 12], "2.bias": [8]}
    ck.check(_same_shapes(ffn.get("parameters") or {}, expected),
             f"TransformerBlock(8, 2, d_ff=12).ffn: expected parameters {expected}, got {ffn.get('parameters')}")


def _same_shapes(got: dict, expected: dict) -> bool:
    """Parameter shapes as a multiset: a Dropout inside the Sequential shifts the indices and is still correct."""
    return sorted(map(tuple, got.values())) == sorted(map(tuple, expected.values()))

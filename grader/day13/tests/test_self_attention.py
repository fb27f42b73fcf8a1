"""Hidden tests for self_attention.py (handout §3–§6). Points: rubric.toml [self_attention.*].

Each test asks all its calls first and checks afterwards, so that a failing test's recorded
calls are complete when they are replayed on the bug catalogue.
"""
import numpy as np

from grader.judging import diagnose
from grader.day13 import tolerances as tol
from grader.judging.tolerances import Tol
from grader.day13.tests import checks as ck

F32, F64 = "float32", "float64"


def _weights(seed, d_model, d_k, dtype=F32):
    scale = 1 / np.sqrt(d_model)
    return {name: ck.randn(seed + i, d_k, d_model, dtype=dtype, scale=scale)
            for i, name in enumerate(("W_q", "W_k", "W_v"))}


def _worked_inputs() -> dict:
    """The handout's worked problems, as (Q, K, V, mask)."""
    eye2 = np.eye(2, dtype=F32)
    X4 = np.array([[1, 0], [0, 1], [1, 1]], F32)
    # §6: d_k = 1, Q = 1 and K = [1, 2, 3] give every query the scores [1, 2, 3].
    q1 = np.ones((3, 1), F32)
    k1 = np.array([[1], [2], [3]], F32)
    # §6 "A padding mask": scores [0.5, 1.0, 2.0], the third token is padding.
    kp = np.array([[0.5], [1.0], [2.0]], F32)
    return {
        "§3": (eye2, eye2, np.array([[1, 2], [3, 4]], F32), None),
        "§4": (X4, X4, X4, None),
        "§6 causal": (q1, k1, np.eye(3, dtype=F32), ck.causal(3)),
        "§6 padding": (np.ones((1, 1), F32), kp, np.eye(3, dtype=F32), np.array([[1, 1, 0]], F32)),
    }


def test_worked_values(student, reference):
    calls = {name: student.sdpa(*args) for name, args in _worked_inputs().items()}
    weights = {"probabilities": True, "constants": {"d_k": 2}, "axes": ("query", "key")}
    r = calls["§3"]
    ck.close(ck.output(r, 1, "§3 two tokens: weights", count=2), [[0.67, 0.33], [0.33, 0.67]], tol.WORKED_2DP,
             "§3 two tokens: weights", evidence=True, facts=weights)
    ck.close(ck.output(r, 0, "§3 two tokens: output"), [[1.66, 2.66], [2.34, 3.34]], tol.WORKED_2DP,
             "§3 two tokens: output")
    r = calls["§4"]
    ck.close(ck.output(r, 1, "§4 three tokens: weights", count=2),
             [[0.40, 0.20, 0.40], [0.20, 0.40, 0.40], [0.25, 0.25, 0.50]], tol.WORKED_2DP,
             "§4 three tokens: weights", evidence=True, facts=weights)
    ck.close(ck.output(r, 0, "§4 three tokens: output"), [[0.80, 0.60], [0.60, 0.80], [0.75, 0.75]],
             tol.WORKED_2DP, "§4 three tokens: output")
    ck.close(ck.output(calls["§6 causal"], 1, "§6 causal rows", count=2),
             [[1, 0, 0], [0.269, 0.731, 0], [0.090, 0.245, 0.665]], tol.WORKED_3DP, "§6 causal mask: weights",
             evidence=True, facts={"probabilities": True, "constants": {"d_k": 1, "d_v": 3}, "allowed": ck.causal(3) != 0,
                    "axes": ("query", "key")})
    ck.close(ck.output(calls["§6 padding"], 1, "§6 padding row", count=2), [[0.378, 0.622, 0]], tol.WORKED_3DP,
             "§6 padding mask: weights",
             facts={"probabilities": True, "constants": {"d_k": 1, "d_v": 3}, "allowed": np.array([[True, True, False]]),
                    "axes": ("query", "key")})


SDPA_CASES = [  # (description, Q shape, K shape, V shape, dtype)
    ("B=2, T=5, d_k=d_v=8", (2, 5, 8), (2, 5, 8), (2, 5, 8), F32),
    ("two leading dims, T_q=4 ≠ T_k=6, d_k=5 ≠ d_v=3", (2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 3), F32),
    ("no batch dim, T=1", (1, 4), (1, 4), (1, 4), F32),
    ("one token among many keys, d_k=1", (3, 1, 1), (3, 7, 1), (3, 7, 2), F32),
    ("float64, B=2, h=2, T=4, d_k=6", (2, 2, 4, 6), (2, 2, 4, 6), (2, 2, 4, 6), F64),
]


def _sdpa_inputs():
    """(what, dtype, Q, K, V) of each case of SDPA_CASES."""
    return [(what, dtype, *(ck.randn(100 + 10 * n + j, *s, dtype=dtype, scale=1.5) for j, s in enumerate((qs, ks, vs))))
            for n, (what, qs, ks, vs, dtype) in enumerate(SDPA_CASES)]


def test_sdpa_reference(student, reference):
    pairs = [(what, dtype, student.sdpa(Q, K, V), reference.sdpa(Q, K, V), ck.sizes(Q, V))
             for what, dtype, Q, K, V in _sdpa_inputs()]
    # Weights first: a wrong weight makes a wrong output, and the weights show more (their sums, the scaling).
    ck.cases([(what, False, lambda got=got, exp=exp, what=what, dtype=dtype, sizes=sizes: ck.same_outputs(
        got, exp, f"scaled_dot_product_attention ({what})", ("out", "weights"), dtype=dtype, evidence_output=1,
        facts={"constants": sizes})) for what, dtype, got, exp, sizes in pairs])


def _mask_cases():
    B, T, d = 2, 5, 4
    Q, K, V = (ck.randn(200 + j, B, T, d) for j in range(3))
    Q4, K4, V4 = (ck.randn(210 + j, B, 2, T, d) for j in range(3))
    return [
        ("causal (T, T) float 0/1", Q, K, V, ck.causal(T)),
        ("causal (T, T) bool", Q, K, V, ck.causal(T, bool)),
        ("padding (B, 1, 1, T) float, lengths 3 and 5, 2 heads", Q4, K4, V4, ck.padding([3, 5], T)),
        ("padding (B, 1, 1, T) bool, lengths 1 and 4, 2 heads", Q4, K4, V4, ck.padding([1, 4], T, bool)),
        ("causal and padding combined, (B, 1, T, T)", Q4, K4, V4,
         (ck.causal(T)[None, None] * ck.padding([2, 5], T)).astype(np.float32)),
    ]


def test_sdpa_masks(student, reference):
    """Masking judged against the student's own unmasked weights, so a scaling bug costs only the tests
    about scaling; worth points only when those weights come from Q and K."""
    calls = [(what, m, Q, K, V, student.sdpa(Q, K, V), student.sdpa(Q, K, V, m)) for what, Q, K, V, m in _mask_cases()]
    # The gate is judged on this test's own unmasked calls, one per set of inputs.
    bases = {}
    for what, m, Q, K, V, plain, masked in calls:
        bases.setdefault(id(Q), (Q, K, V, None, plain))
    ck.require_real_attention(student, "masks judged against your own unmasked weights", list(bases.values()))
    for what, m, Q, K, V, plain, masked in calls:
        label = f"scaled_dot_product_attention with mask {what}"
        w = ck.output(plain, 1, f"{label} (the same call without the mask)", count=2)
        shape = Q.shape[:-1] + K.shape[-2:-1]
        ck.check(w.shape == shape, f"{label}: weights must have shape (..., T_q, T_k) = {shape}, got {w.shape}")
        wm = ck.output(masked, 1, f"{label}: weights", count=2)
        out = ck.output(masked, 0, f"{label}: out")
        ck.check(wm.shape == w.shape, f"{label}: weights of shape {wm.shape}, but {w.shape} without the mask")
        keep = np.broadcast_to(m != 0, w.shape)
        expected = np.where(keep, w.astype(np.float64), 0.0)
        expected /= expected.sum(-1, keepdims=True)
        ck.close(wm, expected, tol.values(F32),
                 f"{label}: weights (expected: your unmasked weights with blocked keys set to 0, each row renormalised)",
                 evidence=True, facts={"probabilities": True, "allowed": keep})
        ck.close(out, wm.astype(np.float64) @ V, tol.values(F32), f"{label}: out (expected: your masked weights @ V)")


def test_sdpa_properties(student, reference):
    B, T, d = 2, 6, 4
    Q, K, V = (ck.randn(300 + j, B, T, d, scale=1.5) for j in range(3))
    # Changing tokens after position t must not change what position t sees under a causal mask.
    t = 2
    K2, V2 = K.copy(), V.copy()
    K2[:, t + 1:] = ck.randn(310, B, T - t - 1, d)
    V2[:, t + 1:] = ck.randn(311, B, T - t - 1, d)
    perm = np.array([3, 0, 5, 1, 4, 2])
    pad = ck.padding([4, 2], T)[:, 0]  # (B, 1, T)
    plain = student.sdpa(Q, K, V)
    causal_a = student.sdpa(Q, K, V, ck.causal(T))
    causal_b = student.sdpa(Q, K2, V2, ck.causal(T))
    permuted = student.sdpa(Q[:, perm], K[:, perm], V[:, perm])
    padded = student.sdpa(Q, K, V, pad)
    ck.require_real_attention(student, "properties of the attention weights and outputs", [(Q, K, V, None, plain)])

    p32 = tol.PROPERTY[F32]
    w = ck.output(plain, 1, "weights without a mask", count=2)
    ck.close(w.sum(-1), np.ones((B, T)), p32, "each row of the weights must sum to 1 (no mask)")
    wp = ck.output(padded, 1, "weights with a padding mask", count=2)
    ck.check(wp.shape == (B, T, T), f"weights with a padding mask: expected shape {(B, T, T)}, got {wp.shape}")
    ck.close(wp.sum(-1), np.ones((B, T)), p32, "each row of the weights must sum to 1 (padding mask)")
    blocked = np.broadcast_to(pad == 0, wp.shape)
    ck.check(bool(np.all(wp[blocked] == 0)),
             f"blocked positions must get exactly 0 weight; largest blocked weight: {float(np.abs(wp[blocked]).max()):.3g}")
    out_a = ck.output(causal_a, 0, "causal output", count=2)
    out_b = ck.output(causal_b, 0, "causal output after changing later tokens", count=2)
    ck.close(out_b[:, : t + 1], out_a[:, : t + 1], p32,
             f"under a causal mask, outputs at positions 0..{t} must not change when later tokens change")
    out = ck.output(plain, 0, "output without a mask")
    ck.close(ck.output(permuted, 0, "output for permuted tokens", count=2), out[:, perm], p32,
             "without a mask, permuting the tokens must permute the outputs the same way")


def _gradient_cases():
    """(what, (Q, K, V, mask), grad_out) of the attention's gradient test."""
    B, h, T, d = 2, 2, 5, 4
    Q, K, V = (ck.randn(400 + j, B, h, T, d) for j in range(3))
    g_out, g_w = ck.randn(410, B, h, T, d), ck.randn(411, B, h, T, T)
    return [
        ("no mask, gradient through out and weights", (Q, K, V, None), (g_out, g_w)),
        ("causal mask, gradient through out", (Q, K, V, ck.causal(T)), (g_out, None)),
    ]


def test_sdpa_gradients(student, reference):
    cases = _gradient_cases()
    pairs = [(what, student.sdpa(*args, grad_out=g), reference.sdpa(*args, grad_out=g)) for what, args, g in cases]
    Q, K, V, _ = cases[0][1]
    g_w = cases[0][2][1]  # the first case's gradient through the weights

    def through_weights():
        # Asked only once a gradient has failed: the gradient through the weights alone. None arriving is what
        # weights cut out of autograd (.detach(), no_grad, a numpy round trip) show, which out's gradient hides.
        res = student.sdpa(Q, K, V, None, grad_out=(None, g_w))
        if res.error:
            return []
        if res.grad_error or any(res.grad(name) is None for name in ("Q", "K")):
            return [{"id": "no_gradient", "name": "Q and K through the weights you return"}]
        return []

    with ck.facts_on_failure(through_weights):
        for what, got, exp in pairs:
            ck.same_grads(got, exp, f"scaled_dot_product_attention backward ({what})", ("Q", "K", "V"))


def test_causal_mask(student, reference):
    # The largest first: the first failure is the one shown, and at T=1 three mistakes (and an additive mask of any
    # number) give the same [[0]]; at T=7 each shows its own pattern.
    results = [(T, student.causal_mask(T)) for T in (7, 4, 1)]
    results.append((3, student.causal_mask(3, device="cpu")))
    for T, res in results:
        m = ck.output(res, 0, f"causal_mask({T})", count=1)
        ck.check(m.shape == (T, T), f"causal_mask({T}): expected shape ({T}, {T}), got {m.shape}")
        allowed = m != 0
        expected = np.tril(np.ones((T, T), bool))
        if not np.array_equal(allowed, expected):
            failure = ck.GradeFailure(
                f"causal_mask({T}): expected 1 on and below the diagonal, 0 above\n  expected:\n"
                f"{ck.fmt(expected.astype(int))}\n  got:\n{ck.fmt(np.asarray(m, dtype=float))}",
                facts=diagnose.compare(allowed, expected, axes=("query", "key"), atol=0.0, rtol=0.0))
            failure.compared = [(allowed.astype(float), expected.astype(float), {}, Tol(0.0, 0.0))]
            raise failure
        if m.dtype != bool:
            ck.check(bool(np.all((m == 0) | (m == 1))), f"causal_mask({T}): entries must be 0 or 1 (or bool)")


def _projected(x, w):
    """Q, K, V = x W_qᵀ, x W_kᵀ, x W_vᵀ, computed by the grader."""
    return tuple((x.astype(np.float64) @ w[n].astype(np.float64).T).astype(x.dtype) for n in ("W_q", "W_k", "W_v"))


def test_module_worked_values(student, reference):
    """The contract's attributes, then §4 through SelfAttention; a module that wires the student's
    own attention correctly passes too, when that attention computes something."""
    X4 = np.array([[[1, 0], [0, 1], [1, 1]]], F32)
    eye = {name: np.eye(2, dtype=F32) for name in ("W_q", "W_k", "W_v")}
    shape = student.inspect("self_attention", "SelfAttention", [6, 4], attrs=("W_q", "W_k", "W_v", "d_k"))
    res = student.self_attention(X4, eye)
    own = student.sdpa(X4, X4, X4)
    own_is_real = ck.attention_is_real(student, [(X4, X4, X4, None, own)]) and _charged_elsewhere(
        student, reference, [(X4, X4, X4, None, own, None)])
    attrs = ck.ok(shape, "SelfAttention(6, 4)").inspect["attrs"]
    for name in ("W_q", "W_k", "W_v"):
        a = attrs[name]
        ck.check(a.get("kind") == "module" and a.get("parameters") == {"weight": [4, 6]},
                 f"SelfAttention(6, 4).{name} (or {name.replace('_', '')}) must be nn.Linear(6, 4, bias=False); "
                 f"found {a.get('type', 'nothing')} with parameters {a.get('parameters')}")
    ck.check(attrs["d_k"].get("value") == 4, f"SelfAttention(6, 4).d_k must be 4, got {attrs['d_k'].get('value', 'nothing')}")
    what = "SelfAttention(2, 2), identity weights, §4 X"
    got_w = ck.output(res, 1, f"{what}: weights", count=2)
    got_out = ck.output(res, 0, f"{what}: output")
    if own_is_real and not own.error and _all_close([got_w, got_out], [own.array(1), own.array(0)], F32):
        return
    ck.close(got_w[0], [[0.40, 0.20, 0.40], [0.20, 0.40, 0.40], [0.25, 0.25, 0.50]], tol.WORKED_2DP,
             "SelfAttention with identity weights on §4's X: weights", evidence=True,
             facts={"probabilities": True, "constants": {"d_k": 2}})
    ck.close(got_out[0], [[0.80, 0.60], [0.60, 0.80], [0.75, 0.75]], tol.WORKED_2DP,
             "SelfAttention with identity weights on §4's X: output")


def _all_close(gots, exps, dtype) -> bool:
    try:
        for g, e in zip(gots, exps):
            ck.close(g, e, tol.values(dtype), "")
    except ck.GradeFailure:
        return False
    return True


def _agrees(got, exp, dtype, grads=False) -> bool:
    """`got` answers as `exp` does: both outputs, and the gradients of Q, K and V when `grads`."""
    if got.error or exp.error or len(got.outputs) != 2:
        return False
    if not _all_close([got.array(0), got.array(1)], [exp.array(0), exp.array(1)], dtype):
        return False
    if not grads:
        return True
    if got.grad_error or any(got.grad(n) is None for n in "QKV"):
        return False
    try:
        for n in "QKV":
            ck.close(got.grad(n), exp.grad(n), tol.grads(dtype), "")
    except ck.GradeFailure:
        return False
    return True


def _charged_elsewhere(student, reference, calls, grads=False) -> bool:
    """Whether a module test may take the student's own attention as its yardstick on `calls` ([(Q, K, V, mask,
    own answer, grad_out)]): where that attention answers otherwise than the handout's formula, one of the tests that
    judge it by the handout's numbers must fail, so that its bug is charged there. An attention that passes them all
    and is wrong only on the module tests' inputs would cancel a module bug exactly where the module is tested (red
    team s56r: the scale left out at the module tests' shapes only; s58r: that, with a worked value nudged within
    its rounding, which a comparison of its own could take for a charged difference)."""
    def same(args, own, grad_out):
        return _agrees(own, reference.sdpa(*args, grad_out=grad_out), str(args[0].dtype), grads=grad_out is not None)

    if all(same((Q, K, V, m), own, g) for Q, K, V, m, own, g in calls):
        return True  # the yardstick is the handout's attention there
    # The masks test judges the attention by its own unmasked weights, so it charges no difference from the handout.
    judges = [test_worked_values, test_sdpa_reference, *([test_sdpa_gradients] if grads else [])]
    return any(ck.fails(test, student, reference) for test in judges)


def _module_cases():
    return [  # (what, x, weights, mask, dtype)
        ("d_model=6, d_k=4, B=2, T=5", ck.randn(500, 2, 5, 6), _weights(501, 6, 4), None, F32),
        ("d_model=4, d_k=8, causal mask", ck.randn(510, 3, 4, 4), _weights(511, 4, 8), ck.causal(4), F32),
        ("T=1", ck.randn(520, 2, 1, 8), _weights(521, 8, 8), None, F32),
        ("float64, padding mask (B, 1, T)", ck.randn(530, 2, 5, 6, dtype=F64), _weights(531, 6, 3, F64),
         ck.padding([2, 5], 5)[:, 0], F64),
    ]


def test_module_reference(student, reference):
    """SelfAttention equals the reference, or equals the student's own attention on grader-made Q, K, V
    (then a bug inside scaled_dot_product_attention is charged to the sdpa tests only, as long as that
    attention computes something)."""
    calls, bases = [], []
    for what, x, w, m, dtype in _module_cases():
        Q, K, V = _projected(x, w)
        own = student.sdpa(Q, K, V, m)
        calls.append((what, dtype, student.self_attention(x, w, m, dtype=dtype),
                       reference.self_attention(x, w, m, dtype=dtype), own))
        bases.append((Q, K, V, m, own))
    own_is_real = ck.attention_is_real(student, bases) and _charged_elsewhere(
        student, reference, [(*base, None) for base in bases])

    def compare(what, dtype, got, exp, own):
        ck.ok(got, f"SelfAttention ({what})")
        if own_is_real and not own.error and len(got.outputs) == 2 and _all_close(
                [got.array(0), got.array(1)], [own.array(0), own.array(1)], dtype):
            return
        ck.same_outputs(got, exp, f"SelfAttention ({what})", ("out", "weights"), dtype=dtype, evidence_output=1)

    masked = {what: m is not None for what, x, w, m, dtype in _module_cases()}
    ck.cases([(c[0], masked[c[0]], lambda c=c: compare(*c)) for c in calls])


def test_module_gradients(student, reference):
    x, w = ck.randn(600, 2, 5, 6), _weights(601, 6, 4)
    g = (ck.randn(610, 2, 5, 4), ck.randn(611, 2, 5, 5))
    Q, K, V = _projected(x, w)
    got = student.self_attention(x, w, ck.causal(5), grad_out=g)
    exp = reference.self_attention(x, w, ck.causal(5), grad_out=g)
    own = student.sdpa(Q, K, V, ck.causal(5), grad_out=g)
    names = ("x", "W_q", "W_k", "W_v")
    what = "SelfAttention backward (causal mask)"
    yardstick = ck.attention_is_real(student, [(Q, K, V, ck.causal(5), own)]) and _charged_elsewhere(
        student, reference, [(Q, K, V, ck.causal(5), own, g)], grads=True)
    chained = _chain(own, x, w) if yardstick else None
    if chained is not None and not got.error and not got.grad_error:
        if all(got.grad(n) is not None for n in names) and _all_close([got.grad(n) for n in names],
                                                                      [chained[n] for n in names], F32):
            return
    ck.same_grads(got, exp, what, names)


def _chain(own, x, w):
    """Gradients of x and the projections from the student's own attention gradients (chain rule)."""
    if own.error or own.grad_error or any(own.grad(n) is None for n in "QKV"):
        return None
    gQ, gK, gV = (own.grad(n).astype(np.float64) for n in "QKV")
    x64 = x.astype(np.float64)
    W = {n: w[n].astype(np.float64) for n in ("W_q", "W_k", "W_v")}
    return {
        "x": gQ @ W["W_q"] + gK @ W["W_k"] + gV @ W["W_v"],
        "W_q": np.einsum("btk,btm->km", gQ, x64),
        "W_k": np.einsum("btk,btm->km", gK, x64),
        "W_v": np.einsum("btk,btm->km", gV, x64),
    }

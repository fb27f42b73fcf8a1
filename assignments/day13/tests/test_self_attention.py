"""Tasks 1-3: scaled_dot_product_attention, causal_mask and SelfAttention (handout §3-§6).

Run only these with `pytest -m self_attention`. Each test is named after the handout section
whose numbers it checks, so you can redo the worked problem by hand when one fails.
"""
import pytest
import torch

pytestmark = pytest.mark.self_attention

X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # the three tokens of handout §4

# Each hint is said only when the numbers show one of the facts it follows from (`when`, grader/judging/diagnose.py's
# ids); otherwise a failure says what differs, where, and what the numbers show, and names no cause.
SCALE_HINT = ("the weights are right but for the constant that divides Q Kᵀ: divide by √d_k, d_k being the size of "
              "the last axis of the queries and keys, not of V (handout §3, step 2).")
SCALE_FACTS = ("score_scale",)
OUT_HINT = "out = weights @ V (handout §3, step 4)."
ROWS_HINT = "take the softmax over the last dimension (dim=-1), so that each ROW sums to 1 (handout §3, step 3)."
ROWS_FACTS = ("sums_to_1_along",)
MASK_HINT = ("a mask entry equal to 0 blocks that key: set its score to float('-inf') before the softmax, "
             "so its weight is exactly 0 (handout §6).")
MASK_FACTS = ("blocked_weight",)


def weights_of(d_k, d_v=None, mask=None, axes=("query", "key")):
    """What diagnose.py needs to read attention weights: they are distributions, the sizes a scaling
    constant may be named after, and the names of their axes."""
    sizes = {"d_k": d_k} if d_v is None else {"d_k": d_k, "d_v": d_v}
    found = {"probabilities": True, "constants": sizes, "axes": axes}
    return found if mask is None else {**found, "allowed": (torch.as_tensor(mask) != 0).numpy()}


def test_s3_two_tokens(self_attention, check):
    """§3 worked problem: two tokens, Q = K = I, V = [[1, 2], [3, 4]], d_k = 2."""
    Q = K = torch.eye(2)
    V = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out, weights = check.pair(self_attention.scaled_dot_product_attention(Q, K, V),
                              "scaled_dot_product_attention(Q, K, V)")
    check.close(weights, [[0.67, 0.33], [0.33, 0.67]], "§3 two tokens: attention weights", decimals=2,
                hint=SCALE_HINT, when=SCALE_FACTS, facts=weights_of(2))
    check.close(out, [[1.66, 2.66], [2.34, 3.34]], "§3 two tokens: output = weights @ V", decimals=2, hint=OUT_HINT,
                when=("weights_right",), means="weights_right")


def test_s4_three_token_example(self_attention, check):
    """§4 worked example (and the line-by-line walkthrough of §3): Q = K = V = X, d_k = 2."""
    out, weights = check.pair(self_attention.scaled_dot_product_attention(X, X, X),
                              "scaled_dot_product_attention(X, X, X)")
    check.close(weights.sum(-1), [1.0, 1.0, 1.0], "§4: every row of the weights must sum to 1", hint=ROWS_HINT,
                when=ROWS_FACTS, weights=weights)
    check.close(weights, [[0.40, 0.20, 0.40], [0.20, 0.40, 0.40], [0.25, 0.25, 0.50]],
                "§4 step 3: attention weights", decimals=2, hint=SCALE_HINT, when=SCALE_FACTS, facts=weights_of(2))
    check.close(out, [[0.80, 0.60], [0.60, 0.80], [0.75, 0.75]], "§4 step 4: output = weights @ V", decimals=2,
                hint=OUT_HINT, when=("weights_right",), means="weights_right")


def test_s17_task1_token2_row(self_attention, check):
    """§17 practice task 1: token 2's row of the §4 example is [0.20, 0.40, 0.40] and its output [0.60, 0.80]."""
    out, weights = check.pair(self_attention.scaled_dot_product_attention(X, X, X),
                              "scaled_dot_product_attention(X, X, X)")
    check.close(weights[1], [0.20, 0.40, 0.40], "§17 task 1: weights of token 2", decimals=2, facts=weights_of(2))
    check.close(out[1], [0.60, 0.80], "§17 task 1: output of token 2", decimals=2)


def test_s6_causal_mask_worked_problem(self_attention, check):
    """§6 worked problem: three tokens whose scores are all [1, 2, 3], with a causal mask."""
    Q = torch.ones(3, 1)  # d_k = 1, so the scores are Q Kᵀ / 1 = [1, 2, 3] in every row
    K = torch.tensor([[1.0], [2.0], [3.0]])
    V = torch.eye(3)
    mask = torch.tril(torch.ones(3, 3))
    _, weights = check.pair(self_attention.scaled_dot_product_attention(Q, K, V, mask),
                            "scaled_dot_product_attention(Q, K, V, mask)")
    check.close(weights, [[1.0, 0.0, 0.0], [0.269, 0.731, 0.0], [0.090, 0.245, 0.665]],
                "§6 causal mask: attention weights", decimals=3, hint=MASK_HINT, when=MASK_FACTS,
                facts=weights_of(1, 3, mask))
    above = weights[torch.triu(torch.ones(3, 3), 1).bool()]
    assert torch.all(above == 0), f"§6: blocked (future) weights must be exactly 0, got {above.tolist()}. {MASK_HINT}"


def test_s6_padding_mask_your_turn(self_attention, check):
    """§6 Your Turn: scores [0.5, 1.0, 2.0], the last token is padding."""
    Q = torch.ones(1, 1)
    K = torch.tensor([[0.5], [1.0], [2.0]])
    V = torch.eye(3)
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # (T_q, T_k) = (1, 3): the last key is padding
    _, weights = check.pair(self_attention.scaled_dot_product_attention(Q, K, V, mask),
                            "scaled_dot_product_attention(Q, K, V, mask)")
    check.close(weights, [[0.378, 0.622, 0.0]], "§6 padding mask: attention weights", decimals=3, hint=MASK_HINT,
                when=MASK_FACTS, facts=weights_of(1, 3, mask))
    assert weights[0, 2].item() == 0.0, f"§6: the padding token must get exactly 0 weight. {MASK_HINT}"


def test_mask_may_be_bool_or_float(self_attention, check):
    """§6: the same mask written as 0/1 floats or as booleans gives the same attention."""
    Q, K, V = torch.randn(2, 4, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 3)
    mask = torch.tril(torch.ones(4, 4))
    sdpa = self_attention.scaled_dot_product_attention
    out_float, w_float = check.pair(sdpa(Q, K, V, mask), "float mask")
    out_bool, w_bool = check.pair(sdpa(Q, K, V, mask.bool()), "bool mask")
    # The float call once more: answers that move when nothing changes say nothing about the mask's kind.
    check.repeat(lambda: check.pair(sdpa(Q, K, V, mask), "float mask")[1])
    check.close(w_bool, w_float, "§6: weights with a bool mask vs the same mask as floats",
                hint="compare the mask with 0 (mask == 0) so that False and 0.0 both block.",
                when=("mask_kinds_differ",), means="mask_kinds_differ")
    check.close(out_bool, out_float, "§6: output with a bool mask vs the same mask as floats")


def test_shapes_rows_and_batch_dims(self_attention, check):
    """§3 shape flow: (..., T_q, d_k) and (..., T_k, d_k) give weights (..., T_q, T_k), out (..., T_q, d_v)."""
    Q, K, V = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    out, weights = check.pair(self_attention.scaled_dot_product_attention(Q, K, V),
                              "scaled_dot_product_attention(Q, K, V)")
    check.shape(weights, (2, 3, 5, 7), "§3: weights for Q (2, 3, 5, 8), K (2, 3, 7, 8)")
    check.shape(out, (2, 3, 5, 4), "§3: output for V (2, 3, 7, 4)")
    check.close(weights.sum(-1), torch.ones(2, 3, 5), "§3 step 3: each row of weights must sum to 1", hint=ROWS_HINT,
                when=ROWS_FACTS, weights=weights)
    assert torch.all(weights >= 0), "§3: softmax weights are never negative"
    manual = weights @ V
    check.close(out, manual, "§3 step 4: out must equal weights @ V", atol=1e-5)


def test_causal_mask_shape_and_values(self_attention, check):
    """§6: causal_mask(T) is (T, T), 1 on and below the diagonal, 0 above (bool or 0/1 numbers)."""
    # The largest first: at T=1 several known mistakes give the same [[0]], at T=6 each its own numbers.
    for T in (6, 4, 1):
        mask = check.tensor(self_attention.causal_mask(T), f"causal_mask({T})")
        check.shape(mask, (T, T), f"§6: causal_mask({T})")
        # Compared by value, so True and 1 (or 1.0) are the same entry, as the graders compare it.
        check.close(mask, torch.tril(torch.ones(T, T)),
                    f"§6: causal_mask({T}) should be 1 (or True) on and below the diagonal and 0 above: token t may "
                    f"look at tokens 0..t, so row t has t+1 allowed entries", atol=0.0)


def _projection(attn, name):
    """The layer for W_q/W_k/W_v; the handout's recap spells them Wq/Wk/Wv, both are fine."""
    for attribute in (name, name.replace("_", "")):
        layer = getattr(attn, attribute, None)
        if layer is not None:
            return layer
    pytest.fail(f"§5: SelfAttention needs an attribute {name} (nn.Linear(d_model, d_k, bias=False))",
                pytrace=False)


def test_s5_self_attention_layers(self_attention):
    """§5: W_q, W_k, W_v are nn.Linear(d_model, d_k, bias=False), and d_k is kept."""
    attn = self_attention.SelfAttention(d_model=16, d_k=8)
    for name in ("W_q", "W_k", "W_v"):
        layer = _projection(attn, name)
        assert isinstance(layer, torch.nn.Linear), f"§5: {name} should be an nn.Linear, got {type(layer).__name__}"
        assert (layer.in_features, layer.out_features) == (16, 8), (
            f"§5: {name} should map d_model=16 to d_k=8, got {layer.in_features} -> {layer.out_features}")
        assert layer.bias is None, f"§5: {name} has no bias in the handout (bias=False)"
    assert attn.d_k == 8, f"§5: SelfAttention(d_model=16, d_k=8).d_k should be 8, got {attn.d_k}"


def test_s5_self_attention_shapes(self_attention, check):
    """§5 'Test it': 1 sentence of 6 tokens, d_model = 16; out (1, 6, d_k), weights (1, 6, 6), rows sum to 1."""
    x = torch.randn(1, 6, 16)
    for d_k in (16, 8):
        attn = self_attention.SelfAttention(d_model=16, d_k=d_k)
        out, weights = check.pair(attn(x), "SelfAttention.forward")
        check.shape(out, (1, 6, d_k), f"§5: output of SelfAttention(16, {d_k})")
        check.shape(weights, (1, 6, 6), f"§5: weights of SelfAttention(16, {d_k})")
        check.close(weights.sum(-1), torch.ones(1, 6), "§5: each row of the weights must sum to 1", hint=ROWS_HINT,
                    when=ROWS_FACTS, weights=weights)


def test_s4_through_self_attention(self_attention, check):
    """§4 again, through SelfAttention with W_q = W_k = W_v = identity: the same weights and output."""
    attn = self_attention.SelfAttention(d_model=2, d_k=2)
    with torch.no_grad():
        for name in ("W_q", "W_k", "W_v"):
            check.loadable(_projection(attn, name), f"SelfAttention.{name}").weight.copy_(torch.eye(2))
    out, weights = check.pair(attn(X.unsqueeze(0)), "SelfAttention.forward")
    check.close(weights, [[[0.40, 0.20, 0.40], [0.20, 0.40, 0.40], [0.25, 0.25, 0.50]]],
                "§4 through SelfAttention: weights", decimals=2,
                hint="Q, K and V come from W_q, W_k and W_v applied to x; then divide by √d_k (handout §5).",
                when=SCALE_FACTS, facts=weights_of(2, axes=("sentence", "query", "key")))
    check.close(out, [[[0.80, 0.60], [0.60, 0.80], [0.75, 0.75]]], "§4 through SelfAttention: output", decimals=2)


def test_s5_self_attention_in_float64(self_attention, check):
    """The graders' float64 cases convert SelfAttention with .to(torch.float64), as model.double() does, and pass
    a float32 0/1 padding mask (B, 1, T): everything forward makes must follow x's dtype, and float64 comes back."""
    attn = self_attention.SelfAttention(d_model=6, d_k=3)
    mask = torch.tensor([[[1.0, 1.0, 1.0, 0.0, 0.0]], [[1.0, 1.0, 1.0, 1.0, 1.0]]])  # (B, 1, T): lengths 3 and 5
    check.in_float64(attn, torch.randn(2, 5, 6), "§5: SelfAttention(6, 3) with a padding mask", mask=mask)


def test_s17_task3_causal_weights_are_lower_triangular(self_attention, check):
    """§17 practice task 3: with a causal mask the weight matrix is lower-triangular, rows still sum to 1."""
    attn = self_attention.SelfAttention(d_model=16, d_k=16)
    x = torch.randn(2, 6, 16)
    _, weights = check.pair(attn(x, mask=torch.tril(torch.ones(6, 6))), "SelfAttention.forward(x, mask)")
    check.shape(weights, (2, 6, 6), "§6: weights with a causal mask")
    future = weights.triu(1)
    assert torch.all(future == 0), f"§6: weights above the diagonal must be exactly 0, got\n{weights[0]}\n{MASK_HINT}"
    check.close(weights.sum(-1), torch.ones(2, 6), "§6: rows must still sum to 1 after masking", hint=ROWS_HINT,
                when=ROWS_FACTS, weights=weights)


def test_s3_gradients_reach_Q_K_and_V(self_attention):
    """§3: W_q, W_k and W_v are learned by backprop, so gradients must flow back to Q, K and V (masked too)."""
    Q, K, V = (torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.tril(torch.ones(4, 4, dtype=torch.float64))

    def out_and_weights(Q, K, V):
        return tuple(self_attention.scaled_dot_product_attention(Q, K, V, mask))

    hint = ("keep every step in torch so autograd can follow it: no .detach(), no .numpy() round trip, "
            "no torch.no_grad(), and no in-place change of a tensor backward still needs.")
    first = out_and_weights(Q, K, V)  # an error in the forward pass is reported as such, at your line
    if any(not torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(first, out_and_weights(Q, K, V))):
        # Central differences of answers that move on their own measure the noise, not the gradient.
        pytest.fail("§3: the same call, run a second time, gave different answers: something random runs, so its "
                    "gradients cannot be checked; the answer must be a fixed function of Q, K and V.", pytrace=False)
    try:
        # Steps and tolerances a float32 detour inside passes (float32 is enough, CONTRACT.md); a missing or wrong
        # gradient is off by far more.
        problem = jacobian_mismatch(out_and_weights, (Q, K, V), names=("output", "weights"), wrt="QKV", eps=1e-3,
                                    atol=1e-3, rtol=1e-2)
    except Exception as error:  # backward itself failed (an in-place change, a tensor that left torch)
        if isinstance(error, NotImplementedError):
            raise
        problem = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
    if problem:  # failing outside the except block keeps the report free of the chained traceback
        pytest.fail(f"§3: the gradients of your attention are wrong or missing: {problem}\nHint: {hint}",
                    pytrace=False)


def jacobian_mismatch(f, inputs, *, names, wrt, eps=1e-6, atol=1e-5, rtol=1e-3) -> str:
    """torch.autograd.gradcheck's test with its tolerances: every entry of each output's Jacobian, from
    backprop, against central differences (f at input ± eps); the first entry that differs, or "".

    Backprop gives the Jacobian one row at a time, a backward pass from one output entry alone. (gradcheck
    passes a gradient into backward instead, and the first time one is passed torch imports ~500 more
    modules: most of a second of this folder's `make test`.)"""
    numeric = _central_differences(f, inputs, eps)  # first: it changes the inputs in place and back
    for k, out in enumerate(f(*inputs)):
        flat = out.reshape(-1)
        backprop = [torch.zeros(flat.numel(), x.numel(), dtype=torch.float64) for x in inputs]
        for r in range(flat.numel()) if out.requires_grad else ():  # no grad at all: every row is 0
            grads = torch.autograd.grad(flat[r], inputs, retain_graph=True, allow_unused=True)
            for j, grad in enumerate(grads):
                if grad is not None:
                    backprop[j][r] = grad.reshape(-1)
        for j, name in enumerate(wrt):
            wrong = ~torch.isclose(backprop[j], numeric[k][j], rtol=rtol, atol=atol)
            if wrong.any():
                r, i = (int(v) for v in wrong.nonzero()[0])
                return (f"Jacobian mismatch for {names[k]} with respect to {name}: d {names[k]}[{r}] / d {name}[{i}] "
                        f"(entries counted in the flattened tensors) is {backprop[j][r, i].item():.6g} by backprop, "
                        f"{numeric[k][j][r, i].item():.6g} by central differences")
    return ""


def _central_differences(f, inputs, eps):
    """numeric[k][j]: the Jacobian of output k with respect to input j, (output entries, input entries)."""
    numeric = None
    for j, x in enumerate(inputs):
        entries = x.detach().view(-1)  # the same numbers as x: changed in place, then set back exactly
        for i in range(entries.numel()):
            start = entries[i].item()
            entries[i] = start + eps
            plus = [o.detach().reshape(-1).double() for o in f(*inputs)]
            entries[i] = start - eps
            minus = [o.detach().reshape(-1).double() for o in f(*inputs)]
            entries[i] = start
            if numeric is None:
                numeric = [[torch.zeros(p.numel(), x_.numel(), dtype=torch.float64) for x_ in inputs] for p in plus]
            for k, (p, m) in enumerate(zip(plus, minus)):
                numeric[k][j][:, i] = (p - m) / (2 * eps)
    return numeric


def test_s5_module_uses_its_three_projections(self_attention, check):
    """§5 with d_k ≠ d_model and three different projections: SelfAttention(x, mask) is your own attention
    on Q = x W_qᵀ, K = x W_kᵀ, V = x W_vᵀ, forward and backward (gradients reach x, W_q, W_k and W_v)."""
    attn = self_attention.SelfAttention(d_model=6, d_k=4)
    layers = [check.loadable(_projection(attn, name), f"SelfAttention.{name}") for name in ("W_q", "W_k", "W_v")]
    with torch.no_grad():
        for n, layer in enumerate(layers):
            layer.weight.copy_(torch.randn(4, 6, generator=torch.Generator().manual_seed(50 + n)) / 2)
    x = torch.randn(2, 5, 6, requires_grad=True)
    mask = torch.tril(torch.ones(5, 5))
    got = tuple(attn(x, mask))
    check.pair(got, "SelfAttention.forward(x, mask)")
    # The same computation written out, through your scaled_dot_product_attention.
    x_own = x.detach().clone().requires_grad_(True)
    W = [layer.weight.detach().clone().requires_grad_(True) for layer in layers]
    own = tuple(self_attention.scaled_dot_product_attention(x_own @ W[0].T, x_own @ W[1].T, x_own @ W[2].T, mask))
    # SelfAttention returns (out, weights) as the contract says, whatever order your attention hands them back in
    # (its own tests say so): a pair with the shapes of (weights, out) is compared in the contract's order.
    if [tuple(getattr(o, "shape", ())) for o in own] == [(2, 5, 5), (2, 5, 4)]:
        own = own[::-1]
    # Your attention once more: when its answers move on their own, a difference says nothing about SelfAttention.
    check.repeat(lambda: self_attention.scaled_dot_product_attention(x_own @ W[0].T, x_own @ W[1].T, x_own @ W[2].T,
                                                                     mask)[1])
    hint = ("Q, K and V come from W_q, W_k and W_v applied to x, each its own layer; pass the mask on; "
            "keep every step in torch so the gradients flow (handout §5).")
    check.close(got[1], own[1], "§5: weights of SelfAttention(6, 4) vs your attention on x W_qᵀ, x W_kᵀ, x W_vᵀ",
                hint=hint, when=("differs_from_own",), means="differs_from_own", facts=weights_of(4, mask=mask))
    check.close(got[0], own[0], "§5: output of SelfAttention(6, 4) vs your attention on x W_qᵀ, x W_kᵀ, x W_vᵀ",
                hint=hint, when=("differs_from_own",), means="differs_from_own")
    g_out, g_w = torch.randn(2, 5, 4), torch.randn(2, 5, 5)
    loss = (got[0] * g_out).sum() + (got[1] * g_w).sum()
    params = [x] + [layer.weight for layer in layers]
    grads = torch.autograd.grad(loss, params, allow_unused=True) if loss.requires_grad else [None] * 4
    expected = torch.autograd.grad((own[0] * g_out).sum() + (own[1] * g_w).sum(), [x_own] + W)
    for name, g, e in zip(("x", "W_q", "W_k", "W_v"), grads, expected):
        if g is None:
            pytest.fail(f"§5: no gradient reaches {name} through SelfAttention. Hint: {hint}", pytrace=False)
        check.close(g, e, f"§5: gradient with respect to {name}", hint=hint, when=("differs_from_own",),
                    means="differs_from_own")


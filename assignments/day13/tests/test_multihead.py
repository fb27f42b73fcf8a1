"""Task 4: MultiHeadAttention (handout §7). Run only these with `pytest -m multihead`."""
import pytest
import torch

pytestmark = pytest.mark.multihead

LAYOUT_HINT = ("split with q, k, v = qkv(x).chunk(3, dim=-1), then view(B, T, h, d_k) so that head i uses "
               "features i*d_k:(i+1)*d_k; each head divides its scores by √d_k with d_k = d_model // h (handout §7).")
# Each hint is said only when the numbers show one of the facts it follows from (`when`).
LAYOUT_FACTS = ("permuted", "only_at.from.feature", "only_at.up_to.feature")
TOKENS = {"axes": ("sentence", "token", "feature")}


def _out(mha):
    """W_O: the contract names it out; the handout's W_o (also Wo, W_O) is fine too."""
    for name in ("out", "W_o", "Wo", "W_O"):
        layer = getattr(mha, name, None)
        if layer is not None:
            return layer
    pytest.fail("§7: MultiHeadAttention needs an attribute out (W_O), nn.Linear(d_model, d_model)", pytrace=False)


def _layers(mha, check):
    """qkv and out (W_O), which the tests write weights into."""
    return check.loadable(mha.qkv, "MultiHeadAttention.qkv"), check.loadable(_out(mha), "MultiHeadAttention.out")


def _identity_heads(mha, d_model, check):
    """qkv makes Q = K = V = x and W_O is the identity, with zero biases: the heads can be worked by hand."""
    qkv, out = _layers(mha, check)
    with torch.no_grad():
        qkv.weight.copy_(torch.eye(d_model).repeat(3, 1))  # (3·d_model, d_model)
        qkv.bias.zero_()
        out.weight.copy_(torch.eye(d_model))
        out.bias.zero_()


def _randn(seed, *shape):
    """Inputs from their own generator: the same numbers whatever your layers drew before."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _fixed_weights(mha, d_model, seed, check):
    """Weights from a fixed generator, so that the run does not depend on how your layers draw theirs."""
    generator = torch.Generator().manual_seed(seed)
    layers = _layers(mha, check)
    with torch.no_grad():
        for layer in layers:
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) / d_model ** 0.5)
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=generator) / 10)
    return mha


def test_s7_head_size(multihead):
    """§7 worked problem and Your Turn: 512 / 8 heads -> 64 features per head; BERT-base 768 / 12 -> 64."""
    for d_model, n_heads in ((512, 8), (768, 12)):
        mha = multihead.MultiHeadAttention(d_model, n_heads)
        assert mha.h == n_heads, f"§7: MultiHeadAttention({d_model}, {n_heads}).h should be {n_heads}, got {mha.h}"
        assert mha.d_k == 64, (f"§7: MultiHeadAttention({d_model}, {n_heads}).d_k should be "
                               f"{d_model} // {n_heads} = 64, got {mha.d_k}")


def test_s7_projection_weights(multihead):
    """§7: Q, K, V and output projections of d_model = 512 hold 4 · 512 · 512 = 1,048,576 weights (plus biases)."""
    mha = multihead.MultiHeadAttention(512, 8)
    assert tuple(mha.qkv.weight.shape) == (3 * 512, 512), (
        f"§7: qkv should be nn.Linear(d_model, 3 * d_model), its weight is {tuple(mha.qkv.weight.shape)}")
    assert tuple(_out(mha).weight.shape) == (512, 512), (
        f"§7: out (W_O) should be nn.Linear(d_model, d_model), its weight is {tuple(_out(mha).weight.shape)}")
    weights = mha.qkv.weight.numel() + _out(mha).weight.numel()
    assert weights == 1_048_576, f"§7: expected 1,048,576 projection weights, got {weights:,}"
    assert mha.qkv.bias is not None and _out(mha).bias is not None, "§7: qkv and out keep their biases, as in the handout"


def test_s7_heads_must_divide_d_model(multihead):
    """§7 Your Turn: the head size must divide d_model exactly; 10 features cannot make 3 heads."""
    with pytest.raises((ValueError, AssertionError)):
        multihead.MultiHeadAttention(10, 3)


def test_output_shape(multihead, check):
    """§7: the output has the input's shape (B, T, d_model), whatever the number of heads."""
    x = _randn(1, 2, 5, 16)
    for n_heads in (1, 4, 16):
        out = _fixed_weights(multihead.MultiHeadAttention(16, n_heads), 16, 70 + n_heads, check)(x)
        check.shape(out, (2, 5, 16), f"§7: MultiHeadAttention(16, {n_heads}) on x of shape (2, 5, 16)")


def test_s4_through_one_head(multihead, check):
    """§4 through one head: Q = K = V = X and W_O = I give the §4 output [[0.8, 0.6], [0.6, 0.8], [0.75, 0.75]]."""
    mha = multihead.MultiHeadAttention(2, 1)
    _identity_heads(mha, 2, check)
    X = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    check.close(mha(X), [[[0.80, 0.60], [0.60, 0.80], [0.75, 0.75]]], "§4 through MultiHeadAttention(2, 1)",
                decimals=2, hint=LAYOUT_HINT, when=LAYOUT_FACTS, facts=TOKENS)


def test_s7_two_heads_see_their_own_features(multihead, check):
    """§7: with 2 heads of d_k = 2, head 1 sees features 0-1 and head 2 features 2-3.

    Features 0-1 hold the §4 tokens X; features 2-3 hold the same tokens in the order 3, 1, 2.
    Each head then works the §4 example on its own (scaled by √2), and the heads are concatenated.
    """
    mha = multihead.MultiHeadAttention(4, 2)
    _identity_heads(mha, 4, check)
    x = torch.tensor([[[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0]]])
    expected = [[[0.80, 0.60, 0.75, 0.75], [0.60, 0.80, 0.80, 0.60], [0.75, 0.75, 0.60, 0.80]]]
    check.close(mha(x), expected, "§7: two heads, each the §4 example, concatenated", decimals=2, hint=LAYOUT_HINT,
                when=LAYOUT_FACTS, facts=TOKENS)


def test_causal_mask_blocks_the_future(multihead, check):
    """§6 in every head: with a (T, T) causal mask, changing later tokens leaves earlier outputs alone."""
    mha = _fixed_weights(multihead.MultiHeadAttention(8, 2), 8, 80, check)
    x = _randn(2, 1, 5, 8)
    changed = x.clone()
    changed[:, 3:] = _randn(3, 1, 2, 8)
    for mask in (torch.tril(torch.ones(5, 5)), torch.tril(torch.ones(5, 5)).bool()):
        before, after = mha(x, mask), mha(changed, mask)
        check.close(after[:, :3], before[:, :3], f"§6: outputs of tokens 1-3 must not see tokens 4-5 "
                    f"(causal mask of dtype {mask.dtype})")


def test_padding_mask_hides_padding(multihead, check):
    """§6: a (B, 1, 1, T) padding mask; what sits in the padding never changes the real tokens' outputs."""
    mha = _fixed_weights(multihead.MultiHeadAttention(8, 4), 8, 90, check)
    x = _randn(4, 2, 4, 8)
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]).view(2, 1, 1, 4)  # sentence 2: 2 real tokens
    changed = x.clone()
    changed[1, 2:] = _randn(5, 2, 8)
    before, after = mha(x, mask), mha(changed, mask)
    check.close(after[1, :2], before[1, :2], "§6: real tokens must not attend to padding")
    check.close(after[0], before[0], "§7: sentence 1 must not depend on sentence 2",
                hint="keep the batch dimension separate when you split and merge heads.",
                when=("batch_mixing",), means={"id": "batch_mixing", "moved": [0], "changed": [1]})


def test_tokens_are_a_set_without_positions(multihead, check):
    """§8: attention alone treats the input as a set: shuffling tokens shuffles the outputs the same way."""
    mha = _fixed_weights(multihead.MultiHeadAttention(12, 3), 12, 100, check)
    x = _randn(6, 2, 6, 12)
    order = torch.tensor([4, 0, 5, 2, 1, 3])
    # Asked twice: when the two answers differ, something random runs, and the shuffle shows nothing of the order.
    plain = check.repeat(lambda: mha(x))
    check.close(mha(x[:, order]), plain[:, order], "§8: output for shuffled tokens vs shuffled output", atol=1e-5,
                hint="every token should attend over the tokens of its own sentence and head only "
                     "(view(B, T, h, d_k).transpose(1, 2), and back with transpose(1, 2) before view(B, T, d_model)).",
                when=("order_matters",), means="order_matters")


def _worked_weights(mha, check):
    """Fixed, unequal projections: W_Q, W_K and W_V differ, and W_O is not the identity."""
    qkv, out = _layers(mha, check)
    with torch.no_grad():
        qkv.weight.copy_(((torch.arange(48.0).reshape(12, 4) * 5) % 7 - 3) / 4)
        qkv.bias.copy_(((torch.arange(12.0) % 3) - 1) / 10)
        out.weight.copy_(((torch.arange(16.0).reshape(4, 4) * 3) % 5 - 2) / 3)
        out.bias.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))


# MultiHeadAttention(4, 2) with _worked_weights on the §7 tokens below: output and the gradient of
# output.sum() with respect to x, without a mask and with a causal mask (numbers from the reference).
WORKED_X = [[[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0]]]
WORKED = {
    "no mask": ([[0.5073, -0.8039, 0.7881, 0.0499], [0.5645, -0.6373, 0.5021, -0.1717], [0.5703, -0.795, 0.9126, 0.0123]],
                [[-0.0315, -0.0489, 0.1152, 0.3852], [-0.4077, 0.2662, 0.6797, 0.0755],
                 [-0.0699, -0.0934, -0.031, 0.5689]]),
    "causal mask": ([[1.15, -1.0, 0.5667, -0.25], [0.8652, -0.6393, 0.701, -0.5881], [0.5703, -0.795, 0.9126, 0.0123]],
                    [[-0.5085, 0.1799, 0.8369, 0.2249], [-0.2173, 0.2, 0.281, 0.1407],
                     [0.1296, -0.1631, -0.1974, 0.4002]]),
}


@pytest.mark.parametrize("case", sorted(WORKED))
def test_s7_projections_forward_and_backward(multihead, check, case):
    """§7 with real projections: Q, K, V are the three thirds of qkv(x) in that order, W_O mixes the heads,
    and the gradient reaches x (the graders also load fixed weights into qkv and out)."""
    mha = multihead.MultiHeadAttention(4, 2)
    _worked_weights(mha, check)
    x = torch.tensor(WORKED_X, requires_grad=True)
    mask = torch.tril(torch.ones(3, 3)) if case == "causal mask" else None
    out = mha(x, mask)
    expected_out, expected_grad = WORKED[case]
    hint = ("q, k, v = qkv(x).chunk(3, dim=-1) in that order; concatenate the heads and apply out (W_O) last; "
            "keep every step in torch so the gradient flows (handout §7).")
    check.close(out, [expected_out], f"§7: MultiHeadAttention(4, 2) with fixed weights, {case}: output",
                atol=2e-4, hint=hint, when=LAYOUT_FACTS, facts=TOKENS)
    grad = torch.autograd.grad(out.sum(), x, allow_unused=True)[0] if out.requires_grad else None
    if grad is None:
        pytest.fail("§7: no gradient reaches x through MultiHeadAttention. Hint: " + hint, pytrace=False)
    check.close(grad, [expected_grad], f"§7: gradient of the output's sum with respect to x, {case}", atol=2e-4,
                hint=hint, when=LAYOUT_FACTS, facts=TOKENS)


def test_s7_in_float64(multihead, check):
    """The graders' float64 cases convert MultiHeadAttention with .to(torch.float64), as model.double() does:
    everything forward makes must follow x's dtype, and float64 comes back."""
    mha = multihead.MultiHeadAttention(4, 2)
    _worked_weights(mha, check)
    check.in_float64(mha, torch.tensor(WORKED_X), "§7: MultiHeadAttention(4, 2) with fixed weights")

"""Every worked problem and "Your Turn" answer of the handout, reproduced at the handout's rounding.

One test per problem, named after its section. Numbers come out of the reference code wherever the
code can produce them; the rest (the √d spread, the §10 slopes) is computed the way the handout does.
Rounding is the handout's: the value printed with np.round(x, decimals) must be the value printed there.
Not covered, because the handout gives no number the code could produce: §1 (text to ids), §13 (families).
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F


X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # the three tokens of §3's walkthrough and §4


def rounded(value, decimals):
    array = value.detach().double().numpy() if isinstance(value, torch.Tensor) else np.asarray(value, dtype=float)
    return np.round(array, decimals)


def assert_printed(value, decimals, expected):
    np.testing.assert_array_equal(rounded(value, decimals), np.asarray(expected, dtype=float))


def test_s2_attention_is_a_weighted_average(ref):
    """§2: weights [0.7, 0.2, 0.1] over values [10, 20, 30] give 14 (scores = log-weights, so softmax returns them)."""
    Q = torch.ones(1, 1, dtype=torch.float64)
    K = torch.log(torch.tensor([[0.7], [0.2], [0.1]], dtype=torch.float64))  # d_k = 1: scores are these logs
    V = torch.tensor([[10.0], [20.0], [30.0]], dtype=torch.float64)
    out, weights = ref.self_attention.scaled_dot_product_attention(Q, K, V)
    assert_printed(weights, 3, [[0.7, 0.2, 0.1]])
    assert_printed(out, 1, [[14.0]])


def test_s3_softmax_refresher(ref):
    """§3: softmax([2, 1, 0]) = [0.665, 0.245, 0.090]."""
    _, weights = ref.self_attention.scaled_dot_product_attention(
        torch.ones(1, 1), torch.tensor([[2.0], [1.0], [0.0]]), torch.eye(3))
    assert_printed(weights, 3, [[0.665, 0.245, 0.090]])


def test_s3_attention_for_two_tokens(ref):
    """§3 worked problem: Q = K = I, V = [[1, 2], [3, 4]], d_k = 2."""
    Q = K = torch.eye(2)
    V = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out, weights = ref.self_attention.scaled_dot_product_attention(Q, K, V)
    assert_printed(weights, 3, [[0.670, 0.330], [0.330, 0.670]])  # step 3
    assert_printed(weights, 2, [[0.67, 0.33], [0.33, 0.67]])  # the printed check
    assert_printed(out, 2, [[1.66, 2.66], [2.34, 3.34]])  # step 4


def test_s3_why_divide_by_sqrt_dk_your_turn():
    """§3 Your Turn: the spread of q·k is about √d: 2.0 for d = 4 and 8.0 for d = 64 (default_rng(0))."""
    rng = np.random.default_rng(0)
    for d, spread in ((4, 2.0), (64, 8.0)):
        q, k = rng.normal(size=(20000, d)), rng.normal(size=(20000, d))
        scores = (q * k).sum(axis=1)
        assert round(scores.std(), 1) == spread
        assert round((scores / math.sqrt(d)).std(), 1) == 1.0  # step 3: dividing by √d_k brings it back near 1


def test_s3_walkthrough_three_tokens(ref):
    """§3 code walkthrough: X through SelfAttention with W_q = W_k = W_v = I."""
    attn = ref.self_attention.SelfAttention(d_model=2, d_k=2)
    with torch.no_grad():
        for layer in (attn.W_q, attn.W_k, attn.W_v):
            layer.weight.copy_(torch.eye(2))
    out, weights = attn(X.unsqueeze(0))
    assert_printed(weights[0], 2, [[0.4, 0.2, 0.4], [0.2, 0.4, 0.4], [0.25, 0.25, 0.5]])
    assert_printed(out[0], 2, [[0.8, 0.6], [0.6, 0.8], [0.75, 0.75]])
    assert_printed(weights[0].sum(dim=1), 6, [1.0, 1.0, 1.0])


def test_s4_three_token_example(ref):
    """§4 ★ worked example: Q = K = V = X, d_k = 2; weights per row and token 1's output [0.80, 0.60]."""
    out, weights = ref.self_attention.scaled_dot_product_attention(X, X, X)
    assert_printed(weights, 2, [[0.40, 0.20, 0.40], [0.20, 0.40, 0.40], [0.25, 0.25, 0.50]])
    assert_printed(out[0], 2, [0.80, 0.60])


def test_s6_causal_mask(ref):
    """§6 worked problem: scores [1, 2, 3] in every row, causal mask."""
    Q, K = torch.ones(3, 1), torch.tensor([[1.0], [2.0], [3.0]])  # d_k = 1: scores are [1, 2, 3]
    _, weights = ref.self_attention.scaled_dot_product_attention(Q, K, torch.eye(3), ref.self_attention.causal_mask(3))
    assert_printed(weights, 3, [[1.0, 0.0, 0.0], [0.269, 0.731, 0.0], [0.090, 0.245, 0.665]])
    assert torch.all(weights.triu(1) == 0)


def test_s6_padding_mask_your_turn(ref):
    """§6 Your Turn: scores [0.5, 1.0, 2.0] with the last token padding -> [0.378, 0.622, 0]."""
    _, weights = ref.self_attention.scaled_dot_product_attention(
        torch.ones(1, 1), torch.tensor([[0.5], [1.0], [2.0]]), torch.eye(3), torch.tensor([1, 1, 0]))
    assert_printed(weights, 3, [[0.378, 0.622, 0.0]])


def test_s7_head_size_and_parameters(ref):
    """§7 worked problem: d_model = 512, 8 heads -> 64 per head; 4 · 262,144 = 1,048,576 projection weights."""
    mha = ref.multihead.MultiHeadAttention(512, 8)
    assert mha.d_k == 64
    assert mha.out.weight.numel() == 262_144 and mha.qkv.weight.numel() == 3 * 262_144
    assert mha.qkv.weight.numel() + mha.out.weight.numel() == 1_048_576


def test_s7_bert_base_sizes_your_turn(ref):
    """§7 Your Turn: BERT-base, d_model = 768 and 12 heads -> head size 64, remainder 0."""
    assert ref.multihead.MultiHeadAttention(768, 12).d_k == 64
    with pytest.raises(ValueError):  # a remainder is refused, as the handout's assert does
        ref.multihead.MultiHeadAttention(768, 10)


def test_s8_sinusoidal_positions(ref):
    """§8 worked problem, d_model = 4: position 0 -> [0, 1, 0, 1], position 1 -> [0.841, 0.540, 0.010, 1.0]."""
    pe = ref.positional.positional_encoding(2, 4)
    assert_printed(pe[0], 3, [0.0, 1.0, 0.0, 1.0])
    assert_printed(pe[1], 3, [0.841, 0.540, 0.010, 1.000])


def test_s8_position_2_your_turn(ref):
    """§8 Your Turn: position 2, d_model = 4: first two values 0.909 and -0.416."""
    assert_printed(ref.positional.positional_encoding(3, 4)[2, :2], 3, [0.909, -0.416])


def _ffn_counts(ref, d_model, n_heads):
    ffn = ref.block.TransformerBlock(d_model, n_heads).ffn
    expand, back = (sum(p.numel() for p in ffn[i].parameters()) for i in (0, 2))
    return expand, back


def test_s9_ffn_parameter_count(ref):
    """§9 worked problem: 512 -> 2048 -> 512 has 1,050,624 + 1,049,088 = 2,099,712 parameters."""
    expand, back = _ffn_counts(ref, 512, 8)
    assert (expand, back, expand + back) == (1_050_624, 1_049_088, 2_099_712)
    mha = ref.multihead.MultiHeadAttention(512, 8)
    assert round((expand + back) / (mha.qkv.weight.numel() + mha.out.weight.numel())) == 2  # "about twice"


def test_s9_bigger_model_your_turn(ref):
    """§9 Your Turn: 768 -> 3072 -> 768 has 2,362,368 + 2,360,064 = 4,722,432 parameters."""
    assert _ffn_counts(ref, 768, 12) == (2_362_368, 2_360_064)
    assert sum(_ffn_counts(ref, 768, 12)) == 4_722_432


def test_s10_skip_connection_slopes():
    """§10 worked problem: f(x) = 0.1·x has slope 0.1 and x + f(x) slope 1.1 (at x = 2, by autograd)."""
    x = torch.tensor(2.0, requires_grad=True)
    (slope_f,) = torch.autograd.grad(0.1 * x, x)
    (slope_g,) = torch.autograd.grad(x + 0.1 * x, x)
    assert (round(slope_f.item(), 3), round(slope_g.item(), 3)) == (0.1, 1.1)


def test_s11_normalize_one_token(ref):
    """§11 worked problem: layer norm of [1, 2, 3, 4] is [-1.342, -0.447, 0.447, 1.342], mean 0 (ε = 1e-5)."""
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert x.mean().item() == 2.5 and x.var(unbiased=False).item() == 1.25
    assert round(x.std(unbiased=False).item(), 3) == 1.118
    ln1 = ref.block.TransformerBlock(4, 1).ln1  # the reference's own LayerNorm, untrained: scale 1, shift 0
    for y in (ln1(x), F.layer_norm(x, (4,), eps=1e-5)):
        assert_printed(y, 3, [-1.342, -0.447, 0.447, 1.342])
        assert round(y.mean().item(), 3) == 0.0


def test_s11_tiny_epsilon_your_turn(ref):
    """§11 Your Turn: [10, 10, 10, 10] normalises to [0, 0, 0, 0], with no division by zero."""
    ln1 = ref.block.TransformerBlock(4, 1).ln1
    y = ln1(torch.full((4,), 10.0))
    assert torch.isfinite(y).all()
    assert_printed(y, 6, [0.0, 0.0, 0.0, 0.0])
    assert ln1.eps == 1e-5


def test_s12_shape_tracking(ref):
    """§12 worked problem: batch 2, 5 tokens, d_model 16, d_ff 64: attention (2, 5, 16), FFN (2, 5, 64), out (2, 5, 16)."""
    blk = ref.block.TransformerBlock(16, n_heads=4, d_ff=64)
    seen = {}
    blk.attn.register_forward_hook(lambda m, i, o: seen.__setitem__("attention", tuple(o.shape)))
    blk.ffn[0].register_forward_hook(lambda m, i, o: seen.__setitem__("ffn", tuple(o.shape)))
    out = blk(torch.zeros(2, 5, 16))
    assert seen == {"attention": (2, 5, 16), "ffn": (2, 5, 64)}
    assert tuple(out.shape) == (2, 5, 16)


def test_s12_residual_connection_your_turn(ref):
    """§12 Your Turn: input [1, 2], sub-layer output [0.1, -0.2] -> [1.1, 1.8], through a Pre-LN block.

    The attention's W_O is set to output exactly [0.1, -0.2] (zero weight, that bias) and the FFN to 0,
    so the block computes x + f(x) and nothing else.
    """
    blk = ref.block.TransformerBlock(2, 1, pre_ln=True)
    with torch.no_grad():
        blk.attn.out.weight.zero_()
        blk.attn.out.bias.copy_(torch.tensor([0.1, -0.2]))
        blk.ffn[2].weight.zero_()
        blk.ffn[2].bias.zero_()
    out = blk(torch.tensor([[[1.0, 2.0]]]))
    assert_printed(out[0, 0], 1, [1.1, 1.8])


def test_s17_task1_token_2(ref):
    """§17 practice task 1: token 2's row is [0.20, 0.40, 0.40] and its output [0.60, 0.80]."""
    out, weights = ref.self_attention.scaled_dot_product_attention(X, X, X)
    assert_printed(weights[1], 2, [0.20, 0.40, 0.40])
    assert_printed(out[1], 2, [0.60, 0.80])

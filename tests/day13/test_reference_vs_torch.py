"""The reference in solutions/day13/ equals PyTorch's own attention code, which no one here wrote.

- scaled_dot_product_attention vs torch.nn.functional.scaled_dot_product_attention;
- MultiHeadAttention vs torch.nn.MultiheadAttention(batch_first=True);
- TransformerBlock vs torch.nn.TransformerEncoderLayer(dropout=0, activation="gelu", norm_first=pre_ln).

Masks: ours block where the entry is 0. F.scaled_dot_product_attention's bool mask is True = allowed;
nn.MultiheadAttention's and nn.TransformerEncoderLayer's bool masks are True = blocked.
"""
import zlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = [torch.float32, torch.float64]
ATOL = {torch.float32: 2e-5, torch.float64: 1e-10}


def _seed(*parts):
    """A seed per test case that does not change between runs (str hashes do, so use crc32)."""
    return zlib.crc32(repr(parts).encode())


def _generator(*parts):
    return torch.Generator().manual_seed(_seed(*parts))


def _padding(B, T, gen):
    """(B, T) 0/1: each sentence keeps its first n ≥ 1 tokens, the rest is padding."""
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[0] = T - 1 if T > 1 else 1  # at least one sentence really is padded
    return (torch.arange(T) < lengths[:, None]).to(torch.float32)  # (B, T)


# --- scaled dot-product attention ------------------------------------------------------------

SDPA_SHAPES = [  # (leading batch dims, T_q, T_k, d_k, d_v)
    ((), 3, 3, 2, 2),
    ((4,), 6, 6, 16, 8),
    ((2, 3), 5, 5, 8, 4),
    ((2,), 4, 7, 8, 3),  # cross-attention shapes: T_q ≠ T_k
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding"])
@pytest.mark.parametrize("shape", SDPA_SHAPES, ids=lambda s: "x".join(map(str, (*s[0], *s[1:]))))
def test_sdpa_matches_torch(ref, shape, mask_kind, dtype):
    lead, T_q, T_k, d_k, d_v = shape
    gen = _generator("sdpa", shape, mask_kind)
    Q = torch.randn(*lead, T_q, d_k, generator=gen, dtype=dtype)  # (..., T_q, d_k)
    K = torch.randn(*lead, T_k, d_k, generator=gen, dtype=dtype)  # (..., T_k, d_k)
    V = torch.randn(*lead, T_k, d_v, generator=gen, dtype=dtype)  # (..., T_k, d_v)
    if mask_kind == "none":
        mask = None
    elif mask_kind == "causal":
        mask = torch.tril(torch.ones(T_q, T_k, dtype=dtype))  # (T_q, T_k); row 0 always sees key 0
    else:
        B = lead[0] if lead else 1
        mask = _padding(B, T_k, gen).view(B, *([1] * (len(lead) - 1)), 1, T_k)  # broadcasts over queries
        if not lead:
            mask = mask[0]
    allowed = None if mask is None else (mask != 0)  # torch: True = may attend

    out, weights = ref.self_attention.scaled_dot_product_attention(Q, K, V, mask)
    expected = F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed)
    # With V = I the output *is* the weight matrix, so torch also gives us the weights.
    identity = torch.eye(T_k, dtype=dtype).expand(*lead, T_k, T_k)
    expected_weights = F.scaled_dot_product_attention(Q, K, identity, attn_mask=allowed)

    assert out.shape == (*lead, T_q, d_v) and weights.shape == (*lead, T_q, T_k)
    assert out.dtype == dtype and weights.dtype == dtype
    torch.testing.assert_close(out, expected, atol=ATOL[dtype], rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=ATOL[dtype], rtol=0)
    if allowed is not None:
        assert torch.all(weights[~allowed.expand_as(weights)] == 0), "blocked weights must be exactly 0"


def test_sdpa_bool_and_float_masks_agree(ref):
    gen = _generator("bool-mask")
    Q, K, V = (torch.randn(2, 5, 4, generator=gen) for _ in range(3))
    mask = ref.self_attention.causal_mask(5)
    as_float = ref.self_attention.scaled_dot_product_attention(Q, K, V, mask.float())
    as_bool = ref.self_attention.scaled_dot_product_attention(Q, K, V, mask.bool())
    for a, b in zip(as_float, as_bool):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.parametrize("T", [1, 2, 7])
def test_causal_mask_is_torch_tril(ref, T):
    mask = ref.self_attention.causal_mask(T)
    assert torch.equal(mask != 0, torch.ones(T, T, dtype=torch.bool).tril())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_self_attention_matches_torch(ref, dtype):
    gen = _generator("self-attention")
    attn = ref.self_attention.SelfAttention(d_model=12, d_k=6).to(dtype)
    x = torch.randn(3, 5, 12, generator=gen, dtype=dtype)  # (B, T, d_model)
    mask = torch.tril(torch.ones(5, 5))
    out, weights = attn(x, mask)
    Q, K, V = x @ attn.W_q.weight.T, x @ attn.W_k.weight.T, x @ attn.W_v.weight.T  # each (B, T, d_k)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(Q, K, V, is_causal=True),
                               atol=ATOL[dtype], rtol=0)
    assert weights.shape == (3, 5, 5)


# --- multi-head attention --------------------------------------------------------------------

MHA_SHAPES = [(1, 3, 4, 1), (2, 6, 16, 4), (3, 5, 24, 3), (4, 7, 32, 8)]  # (B, T, d_model, h)


def _torch_mha(mha, dtype):
    """nn.MultiheadAttention holding the same weights: in_proj from qkv, out_proj from out."""
    d_model = mha.qkv.in_features
    theirs = nn.MultiheadAttention(d_model, mha.h, dropout=0.0, bias=True, batch_first=True).to(dtype).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(mha.qkv.weight)  # (3·d_model, d_model), rows W_Q; W_K; W_V
        theirs.in_proj_bias.copy_(mha.qkv.bias)
        theirs.out_proj.weight.copy_(mha.out.weight)
        theirs.out_proj.bias.copy_(mha.out.bias)
    return theirs


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding"])
@pytest.mark.parametrize("shape", MHA_SHAPES, ids=lambda s: "B{}-T{}-d{}-h{}".format(*s))
def test_multihead_matches_torch(ref, shape, mask_kind, dtype):
    B, T, d_model, h = shape
    gen = _generator("mha", shape, mask_kind)
    torch.manual_seed(_seed("mha-init", shape))
    mha = ref.multihead.MultiHeadAttention(d_model, h).to(dtype)
    with torch.no_grad():
        mha.qkv.bias.normal_(generator=gen)  # biases are 0-centred uniform by default; make them count
        mha.out.bias.normal_(generator=gen)
    theirs = _torch_mha(mha, dtype)
    x = torch.randn(B, T, d_model, generator=gen, dtype=dtype)  # (B, T, d_model)
    kwargs, mask = {}, None
    if mask_kind == "causal":
        mask = torch.tril(torch.ones(T, T))  # (T, T)
        kwargs["attn_mask"] = mask == 0  # torch: True = blocked
    elif mask_kind == "padding":
        keep = _padding(B, T, gen)  # (B, T)
        mask = keep.view(B, 1, 1, T)  # (B, 1, 1, T)
        kwargs["key_padding_mask"] = keep == 0  # torch: True = padding
    ours = mha(x, mask)
    with torch.no_grad():
        expected, _ = theirs(x, x, x, need_weights=False, **kwargs)
    assert ours.shape == (B, T, d_model) and ours.dtype == dtype
    torch.testing.assert_close(ours, expected, atol=ATOL[dtype] * 5, rtol=0)


def test_multihead_gradients_match_torch(ref):
    torch.manual_seed(1)
    mha = ref.multihead.MultiHeadAttention(16, 4).double()
    theirs = _torch_mha(mha, torch.float64).train()
    x = torch.randn(2, 5, 16, dtype=torch.float64, requires_grad=True)
    grad_ours, = torch.autograd.grad(mha(x).pow(2).sum(), x)
    grad_theirs, = torch.autograd.grad(theirs(x, x, x, need_weights=False)[0].pow(2).sum(), x)
    torch.testing.assert_close(grad_ours, grad_theirs, atol=1e-10, rtol=0)


def test_multihead_rejects_heads_that_do_not_divide(ref):
    with pytest.raises(ValueError, match="divisible"):
        ref.multihead.MultiHeadAttention(10, 3)


# --- Transformer block -----------------------------------------------------------------------

BLOCK_SHAPES = [(2, 5, 16, 4, 64), (1, 7, 24, 3, 40), (3, 4, 8, 1, None)]  # (B, T, d_model, h, d_ff)


def _torch_layer(blk, d_model, h, d_ff, pre_ln, dtype):
    """nn.TransformerEncoderLayer with the block's weights (self_attn, linear1, linear2, norm1, norm2)."""
    layer = nn.TransformerEncoderLayer(d_model, h, dim_feedforward=d_ff, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=pre_ln).to(dtype).eval()
    pairs = [
        (layer.self_attn.in_proj_weight, blk.attn.qkv.weight), (layer.self_attn.in_proj_bias, blk.attn.qkv.bias),
        (layer.self_attn.out_proj.weight, blk.attn.out.weight), (layer.self_attn.out_proj.bias, blk.attn.out.bias),
        (layer.linear1.weight, blk.ffn[0].weight), (layer.linear1.bias, blk.ffn[0].bias),
        (layer.linear2.weight, blk.ffn[2].weight), (layer.linear2.bias, blk.ffn[2].bias),
        (layer.norm1.weight, blk.ln1.weight), (layer.norm1.bias, blk.ln1.bias),
        (layer.norm2.weight, blk.ln2.weight), (layer.norm2.bias, blk.ln2.bias),
    ]
    with torch.no_grad():
        for theirs, ours in pairs:
            theirs.copy_(ours)
    return layer


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("pre_ln", [False, True], ids=["post_ln", "pre_ln"])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding"])
@pytest.mark.parametrize("shape", BLOCK_SHAPES, ids=lambda s: "B{}-T{}-d{}-h{}-ff{}".format(*s))
def test_block_matches_torch_encoder_layer(ref, shape, mask_kind, pre_ln, dtype):
    B, T, d_model, h, d_ff = shape
    gen = _generator("block", shape, mask_kind, pre_ln)
    torch.manual_seed(_seed("block-init", shape))
    blk = ref.block.TransformerBlock(d_model, h, d_ff=d_ff, pre_ln=pre_ln).to(dtype)
    with torch.no_grad():  # non-trivial norms, so that swapping ln1 and ln2 would show
        for norm in (blk.ln1, blk.ln2):
            norm.weight.normal_(1.0, 0.3, generator=gen)
            norm.bias.normal_(0.0, 0.3, generator=gen)
    layer = _torch_layer(blk, d_model, h, d_ff or 4 * d_model, pre_ln, dtype)
    x = torch.randn(B, T, d_model, generator=gen, dtype=dtype)
    kwargs, mask = {}, None
    if mask_kind == "causal":
        mask = torch.tril(torch.ones(T, T))
        kwargs["src_mask"] = mask == 0
    elif mask_kind == "padding":
        keep = _padding(B, T, gen)
        mask = keep.view(B, 1, 1, T)
        kwargs["src_key_padding_mask"] = keep == 0
    ours = blk(x, mask)
    expected = layer(x, **kwargs)  # grad mode on: torch's fused fast path stays off, the math is the same
    assert ours.shape == (B, T, d_model) and ours.dtype == dtype
    torch.testing.assert_close(ours, expected.detach(), atol=ATOL[dtype] * 10, rtol=0)

"""Task 7: TransformerBlock (handout §9-§12). Run only these with `pytest -m block`.

Your block is built with a stand-in in place of your MultiHeadAttention (conftest.py), as the
graders build it, so these tests pass or fail on block.py alone. Several tests also swap `block.attn`
and `block.ffn` for tiny sub-layers of known output, to check the wiring (residuals, norms, order, mask).
"""
import pytest
import torch
import torch.nn as nn

pytestmark = pytest.mark.block

WIRING = {
    False: "Post-LN (pre_ln=False): x = ln1(x + attn(x, mask)), then x = ln2(x + ffn(x)) (handout §12)",
    True: "Pre-LN (pre_ln=True): x = x + attn(ln1(x), mask), then x = x + ffn(ln2(x)) (handout §12)",
}
TOKENS = {"axes": ("sentence", "token", "feature")}


def _observe_the_batch(check, model, x, mask=None):
    """Two facts a block's wrong output may come with, from calls of its own: the same call run twice gives
    different answers (something random runs in eval mode), and a sentence's answer moves when only
    another sentence of the batch changes."""
    first = check.repeat(lambda: model(x, mask) if mask is not None else model(x))
    other = x.clone()
    other[0] = torch.randn(x.shape[1:], generator=torch.Generator().manual_seed(90))
    with torch.no_grad():
        changed = model(other, mask) if mask is not None else model(other)
    if isinstance(changed, torch.Tensor) and changed.shape == first.shape and not check.moved_on_its_own():
        check.observe(*check.diagnose.mixes(first.numpy(), changed.detach().numpy(), changed=(0,)))


class StandIn(nn.Module):
    """A sub-layer computing scale · input + shift; it remembers its last input and mask."""

    def __init__(self, scale=0.0, shift=0.0):
        super().__init__()
        self.scale, self.shift = scale, torch.as_tensor(shift)
        self.seen, self.mask = None, "never called"

    def forward(self, x, mask=None):
        self.seen, self.mask = x.detach().clone(), mask
        return self.scale * x + self.shift


def _block_with_stand_ins(block, d_model, pre_ln, attn, ffn):
    """A block whose attn and ffn are stand-ins of known output, wherever the block holds them (also in a
    ModuleDict or ModuleList of its sub-layers, if it keeps one)."""
    model = block.TransformerBlock(d_model=d_model, n_heads=1, d_ff=4 * d_model, pre_ln=pre_ln)
    for name, stand_in in (("attn", attn), ("ffn", ffn)):
        own = getattr(model, name, None)
        for module in list(model.modules()):
            for key, child in list(module._modules.items()):
                if own is not None and child is own:
                    module._modules[key] = stand_in
        setattr(model, name, stand_in)
    return model


def test_s12_shape_tracking(block, check):
    """§12 worked problem: batch 2, 5 tokens, d_model 16, d_ff 64: (2, 5, 64) inside the FFN, (2, 5, 16) out."""
    for pre_ln in (False, True):
        model = block.TransformerBlock(d_model=16, n_heads=4, d_ff=64, pre_ln=pre_ln)
        inside = []
        model.ffn[0].register_forward_hook(lambda module, inputs, output: inside.append(tuple(output.shape)))
        out = model(torch.randn(2, 5, 16))
        check.shape(out, (2, 5, 16), f"§12: block output (pre_ln={pre_ln})")
        assert inside == [(2, 5, 64)], f"§12: the FFN's first layer should give (2, 5, 64) once, saw {inside}"


def _require(ok, message):
    """A rule of the contract that is no comparison of numbers: its failure says only `message`."""
    if not ok:
        pytest.fail(message, pytrace=False)


_NO_AFFINE = ("§11: {name} has no learnable weight and bias (built with elementwise_affine=False): LayerNorm scales and "
              "shifts each feature after normalising, so build it as nn.LayerNorm(d_model)")


def _has_affine(norm) -> bool:
    return getattr(norm, "weight", None) is not None and getattr(norm, "bias", None) is not None


def test_block_parts(block, check):
    """§12: attn, ln1, ln2 (LayerNorm(d_model)) and ffn = Linear(d, d_ff) -> GELU -> Linear(d_ff, d), d_ff = 4·d."""
    model = block.TransformerBlock(d_model=16, n_heads=4)
    for name in ("ln1", "ln2"):
        norm = getattr(model, name)
        _require(isinstance(norm, nn.LayerNorm) and tuple(norm.normalized_shape) == (16,),
                 f"§11: {name} should be nn.LayerNorm(d_model=16), got {norm!r}")
        _require(0 < norm.eps <= 1e-5,
                 f"§11: {name}'s eps should be a small positive number, at most the handout's 1e-5; got {norm.eps}")
        _require(_has_affine(norm), _NO_AFFINE.format(name=name))
    layers = [layer for layer in model.ffn if not isinstance(layer, (nn.Dropout, nn.Identity))]  # they change nothing
    # Compared through `check`, so a known mistake's layers (an extra GELU, a ReLU, none) are named. A subclass of
    # nn.GELU is a GELU here (one computing in float64, say); what it computes is checked just below.
    names = ["GELU" if isinstance(layer, nn.GELU) else type(layer).__name__ for layer in layers]
    check.equal(names, ["Linear", "GELU", "Linear"],
                "§9: the layers of ffn, in order (Dropout and Identity left out), should be Linear, GELU, Linear")
    z = torch.linspace(-4.0, 4.0, 81)
    _require(torch.allclose(layers[1](z), torch.nn.functional.gelu(z), rtol=0.0, atol=1e-6),
             "§9: the FFN's GELU should be the exact one, nn.GELU(); GELU(approximate='tanh'), as in GPT-2, differs "
             "from it by up to ~1e-3")
    sizes = [(layers[0].in_features, layers[0].out_features), (layers[2].in_features, layers[2].out_features)]
    _require(sizes == [(16, 64), (64, 16)], f"§9: with d_ff left out the FFN expands 16 -> 4·16 = 64 -> 16, got {sizes}")
    _require(model.ln1 is not model.ln2, "§12: ln1 and ln2 are two LayerNorms, each with its own weights")
    given = [layer for layer in block.TransformerBlock(d_model=16, n_heads=4, d_ff=40).ffn if isinstance(layer, nn.Linear)]
    sizes = [(layer.in_features, layer.out_features) for layer in given]
    _require(sizes == [(16, 40), (40, 16)], f"§9: TransformerBlock(16, 4, d_ff=40) should expand 16 -> 40 -> 16, got {sizes}")
    # What the graders check of attn: a module. Whichever module its class came from (multihead.py, or a helper of
    # yours that multihead.py imports it from too), the tests and the graders put their stand-in in its place.
    _require(isinstance(getattr(model, "attn", None), nn.Module),
             "§12: TransformerBlock needs an attribute attn, its MultiHeadAttention(d_model, n_heads) (handout §12); "
             f"got {type(getattr(model, 'attn', None)).__name__}")


def test_s9_ffn_parameter_counts(block):
    """§9 worked problem and Your Turn: FFN parameters with biases, 2,099,712 (512 -> 2048) and 4,722,432 (768 -> 3072)."""
    for d_model, n_heads, expected in ((512, 8, 2_099_712), (768, 12, 4_722_432)):
        model = block.TransformerBlock(d_model=d_model, n_heads=n_heads)
        got = sum(p.numel() for p in model.ffn.parameters())
        assert got == expected, (f"§9: the FFN of TransformerBlock({d_model}) should have {expected:,} parameters, "
                                 f"got {got:,}. Hint: d_ff defaults to 4 · d_model and both Linear layers have biases.")


def _normed(norm, x):
    """`norm` (your ln1 or ln2) applied to x in x's dtype: a LayerNorm whose parameters you keep in float64 (and whose
    result your block casts back) is fine by the contract, and these tests' own use of it follows x too."""
    return torch.nn.functional.layer_norm(x, norm.normalized_shape, norm.weight.to(x.dtype), norm.bias.to(x.dtype),
                                          norm.eps)


@pytest.mark.parametrize("pre_ln", [False, True], ids=["post_ln", "pre_ln"])
def test_s12_wiring(block, check, pre_ln):
    """§10-§12: residuals, norms and their order, checked with stand-in sub-layers of known output."""
    attn, ffn = StandIn(scale=0.5, shift=0.3), StandIn(scale=-2.0, shift=0.1)
    model = _block_with_stand_ins(block, 8, pre_ln, attn, ffn)
    ln1, ln2 = model.ln1, model.ln2
    with torch.no_grad():  # two norms that differ, so using one in place of the other shows
        for n, norm in enumerate((ln1, ln2)):
            _require(_has_affine(norm), _NO_AFFINE.format(name=("ln1", "ln2")[n]))
            norm.weight.copy_(1 + torch.arange(8.0) / (4 + 4 * n))
            norm.bias.copy_(torch.arange(8.0) / 10 - 0.3 * n)
    x = torch.randn(2, 3, 8)
    _observe_the_batch(check, model, x)
    out = model(x)
    with torch.no_grad():
        if pre_ln:
            h = x + attn.scale * _normed(ln1, x) + attn.shift
            expected = h + ffn.scale * _normed(ln2, h) + ffn.shift
            attn_in, ffn_in = _normed(ln1, x), _normed(ln2, h)
        else:
            h = _normed(ln1, x + attn.scale * x + attn.shift)
            expected = _normed(ln2, h + ffn.scale * h + ffn.shift)
            attn_in, ffn_in = x, h
    assert attn.seen is not None and ffn.seen is not None, f"§12: the block must call self.attn and self.ffn. {WIRING[pre_ln]}"
    check.close(attn.seen, attn_in, f"§12: what the attention sub-layer receives, in {WIRING[pre_ln]}", facts=TOKENS)
    check.close(ffn.seen, ffn_in, f"§12: what the feed-forward sub-layer receives, in {WIRING[pre_ln]}", facts=TOKENS)
    check.close(out, expected, f"§12: block output, {WIRING[pre_ln]}", facts=TOKENS)


@pytest.mark.parametrize("pre_ln", [False, True], ids=["post_ln", "pre_ln"])
def test_mask_reaches_attention(block, pre_ln):
    """§6, §12: the mask given to the block is passed on to its attention."""
    attn = StandIn()
    model = _block_with_stand_ins(block, 4, pre_ln, attn, StandIn())
    mask = torch.tril(torch.ones(3, 3))
    model(torch.randn(1, 3, 4), mask)
    got = attn.mask
    passed = isinstance(got, torch.Tensor) and torch.equal(*torch.broadcast_tensors(got != 0, mask != 0))
    assert passed, f"§12: block(x, mask) must pass the mask on: self.attn(..., mask); attention got mask={got!r}"


def test_s11_post_ln_normalises_one_token(block, check):
    """§11 worked problem: with silent sub-layers a Post-LN block layer-normalises [1, 2, 3, 4]."""
    model = _block_with_stand_ins(block, 4, False, StandIn(), StandIn())
    out = model(torch.tensor([[[1.0, 2.0, 3.0, 4.0]]]))
    check.close(out, [[[-1.342, -0.447, 0.447, 1.342]]], "§11: layer norm of [1, 2, 3, 4] (nn.LayerNorm)", decimals=3)


def test_s11_constant_token_your_turn(block, check):
    """§11 Your Turn: [10, 10, 10, 10] normalises to zeros, with no division by zero (ε)."""
    model = _block_with_stand_ins(block, 4, False, StandIn(), StandIn())
    out = model(torch.full((1, 1, 4), 10.0))
    check.close(out, [[[0.0, 0.0, 0.0, 0.0]]], "§11: layer norm of [10, 10, 10, 10] (nn.LayerNorm's ε)", decimals=3)


def test_s12_residual_your_turn(block, check):
    """§12 Your Turn: input [1, 2], sub-layer output [0.1, -0.2]; the residual gives [1.1, 1.8] (Pre-LN, FFN silent)."""
    model = _block_with_stand_ins(block, 2, True, StandIn(shift=[0.1, -0.2]), StandIn())
    out = model(torch.tensor([[[1.0, 2.0]]]))
    check.close(out, [[[1.1, 1.8]]], f"§12: x + f(x) for x = [1, 2], f(x) = [0.1, -0.2], in {WIRING[True]}",
                decimals=1)


def test_s10_skip_connection_passes_the_gradient(block, check):
    """§10: with both sub-layers silent a Pre-LN block is x itself, so the gradient through it is exactly 1."""
    model = _block_with_stand_ins(block, 4, True, StandIn(), StandIn())
    x = torch.randn(1, 3, 4, requires_grad=True)
    out = model(x)
    check.close(out, x.detach(), f"§10: Pre-LN block with silent sub-layers, {WIRING[True]}")
    out.sum().backward()
    check.close(x.grad, torch.ones(1, 3, 4), "§10: slope of the skip connection")


@pytest.mark.parametrize("pre_ln", [False, True], ids=["post_ln", "pre_ln"])
def test_causal_block_ignores_the_future(block, check, pre_ln):
    """§6, §12: with a causal mask, a whole block's output for token t depends on tokens 0..t only."""
    model = block.TransformerBlock(d_model=16, n_heads=4, pre_ln=pre_ln)
    x = torch.randn(2, 5, 16)
    changed = x.clone()
    changed[:, 4] = torch.randn(2, 16)
    mask = torch.tril(torch.ones(5, 5))
    _observe_the_batch(check, model, x, mask)
    with torch.no_grad():
        if torch.allclose(model(x, mask), model(x), atol=1e-6):
            check.observe({"id": "mask_ignored"})
    check.close(model(changed, mask)[:, :4], model(x, mask)[:, :4], "§6: block outputs of tokens 1-4",
                hint="pass the mask to self.attn; the FFN and the norms work on each token alone.",
                when=("mask_ignored",))


@pytest.mark.parametrize("pre_ln", [False, True], ids=["post_ln", "pre_ln"])
def test_block_in_float64(block, check, pre_ln):
    """The graders' float64 cases convert the block with .to(torch.float64), as model.double() does, and pass a
    float32 0/1 padding mask: everything forward makes must follow x's dtype, and float64 comes back."""
    model = block.TransformerBlock(d_model=8, n_heads=2, d_ff=16, pre_ln=pre_ln)
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0]).reshape(1, 1, 1, 4)  # (B, 1, 1, T): the last token is padding
    check.in_float64(model, torch.randn(2, 4, 8), f"TransformerBlock(8, 2, pre_ln={pre_ln})", mask=mask)

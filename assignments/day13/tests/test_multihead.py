"""Task 4: MultiHeadAttention (handout §7). Run only these with `pytest -m multihead`."""
import pytest
import torch

pytestmark = pytest.mark.multihead

LAYOUT_HINT = ("split with q, k, v = qkv(x).chunk(3, dim=-1), then view(B, T, h, d_k) so that head i uses "
               "features i*d_k:(i+1)*d_k; each head divides its scores by √d_k with d_k = d_model // h (handout §7).")


def _identity_heads(mha, d_model):
    """qkv makes Q = K = V = x and W_O is the identity, with zero biases: the heads can be worked by hand."""
    with torch.no_grad():
        mha.qkv.weight.copy_(torch.eye(d_model).repeat(3, 1))  # (3·d_model, d_model)
        mha.qkv.bias.zero_()
        mha.out.weight.copy_(torch.eye(d_model))
        mha.out.bias.zero_()


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
    assert tuple(mha.out.weight.shape) == (512, 512), (
        f"§7: out (W_O) should be nn.Linear(d_model, d_model), its weight is {tuple(mha.out.weight.shape)}")
    weights = mha.qkv.weight.numel() + mha.out.weight.numel()
    assert weights == 1_048_576, f"§7: expected 1,048,576 projection weights, got {weights:,}"
    assert mha.qkv.bias is not None and mha.out.bias is not None, "§7: qkv and out keep their biases, as in the handout"


def test_s7_heads_must_divide_d_model(multihead):
    """§7 Your Turn: the head size must divide d_model exactly; 10 features cannot make 3 heads."""
    with pytest.raises((ValueError, AssertionError)):
        multihead.MultiHeadAttention(10, 3)


def test_output_shape(multihead, check):
    """§7: the output has the input's shape (B, T, d_model), whatever the number of heads."""
    x = torch.randn(2, 5, 16)
    for n_heads in (1, 4, 16):
        out = multihead.MultiHeadAttention(16, n_heads)(x)
        check.shape(out, (2, 5, 16), f"§7: MultiHeadAttention(16, {n_heads}) on x of shape (2, 5, 16)")


def test_s4_through_one_head(multihead, check):
    """§4 through one head: Q = K = V = X and W_O = I give the §4 output [[0.8, 0.6], [0.6, 0.8], [0.75, 0.75]]."""
    mha = multihead.MultiHeadAttention(2, 1)
    _identity_heads(mha, 2)
    X = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    check.close(mha(X), [[[0.80, 0.60], [0.60, 0.80], [0.75, 0.75]]], "§4 through MultiHeadAttention(2, 1)",
                decimals=2, hint=LAYOUT_HINT)


def test_s7_two_heads_see_their_own_features(multihead, check):
    """§7: with 2 heads of d_k = 2, head 1 sees features 0-1 and head 2 features 2-3.

    Features 0-1 hold the §4 tokens X; features 2-3 hold the same tokens in the order 3, 1, 2.
    Each head then works the §4 example on its own (scaled by √2), and the heads are concatenated.
    """
    mha = multihead.MultiHeadAttention(4, 2)
    _identity_heads(mha, 4)
    x = torch.tensor([[[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0]]])
    expected = [[[0.80, 0.60, 0.75, 0.75], [0.60, 0.80, 0.80, 0.60], [0.75, 0.75, 0.60, 0.80]]]
    check.close(mha(x), expected, "§7: two heads, each the §4 example, concatenated", decimals=2, hint=LAYOUT_HINT)


def test_causal_mask_blocks_the_future(multihead, check):
    """§6 in every head: with a (T, T) causal mask, changing later tokens leaves earlier outputs alone."""
    mha = multihead.MultiHeadAttention(8, 2)
    x = torch.randn(1, 5, 8)
    changed = x.clone()
    changed[:, 3:] = torch.randn(1, 2, 8)
    for mask in (torch.tril(torch.ones(5, 5)), torch.tril(torch.ones(5, 5)).bool()):
        before, after = mha(x, mask), mha(changed, mask)
        check.close(after[:, :3], before[:, :3], f"§6: outputs of tokens 1-3 must not see tokens 4-5 "
                    f"(causal mask of dtype {mask.dtype})",
                    hint="apply the mask to the (B, h, T, T) scores of every head, before the softmax.")


def test_padding_mask_hides_padding(multihead, check):
    """§6: a (B, 1, 1, T) padding mask; what sits in the padding never changes the real tokens' outputs."""
    mha = multihead.MultiHeadAttention(8, 4)
    x = torch.randn(2, 4, 8)
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]).view(2, 1, 1, 4)  # sentence 2: 2 real tokens
    changed = x.clone()
    changed[1, 2:] = torch.randn(2, 8)
    before, after = mha(x, mask), mha(changed, mask)
    check.close(after[1, :2], before[1, :2], "§6: real tokens must not attend to padding",
                hint="the mask broadcasts over heads and queries; blocked keys get -inf before the softmax.")
    check.close(after[0], before[0], "§7: sentence 1 must not depend on sentence 2",
                hint="keep the batch dimension separate when you split and merge heads.")


def test_tokens_are_a_set_without_positions(multihead, check):
    """§8: attention alone treats the input as a set: shuffling tokens shuffles the outputs the same way."""
    mha = multihead.MultiHeadAttention(12, 3)
    x = torch.randn(2, 6, 12)
    order = torch.tensor([4, 0, 5, 2, 1, 3])
    check.close(mha(x[:, order]), mha(x)[:, order], "§8: output for shuffled tokens vs shuffled output", atol=1e-5,
                hint="every token should attend over the tokens of its own sentence and head only "
                     "(view(B, T, h, d_k).transpose(1, 2), and back with transpose(1, 2) before view(B, T, d_model)).")

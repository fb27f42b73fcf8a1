"""One Transformer block: attention, add & norm, feed-forward, add & norm (handout §9–§12)."""
import torch.nn as nn

from multihead import MultiHeadAttention


class TransformerBlock(nn.Module):
    """The block of handout §12.

    Post-LN (pre_ln=False, the handout's drawing):
        x = ln1(x + attn(x, mask));  x = ln2(x + ffn(x))
    Pre-LN (pre_ln=True, modern LLMs):
        x = x + attn(ln1(x), mask);  x = x + ffn(ln2(x))
    ffn = Linear(d_model, d_ff) -> GELU -> Linear(d_ff, d_model), d_ff = 4·d_model by default.
    Attributes: attn, ln1, ln2, ffn. x: (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        # TODO Task 7 · TransformerBlock.__init__: replace these two lines with your code (handout §12).
        raise NotImplementedError("Task 7 · TransformerBlock.__init__: not implemented yet (handout §12)")

    def forward(self, x, mask=None):
        """x: (B, T, d_model); mask as for MultiHeadAttention. Returns (B, T, d_model)."""
        # TODO Task 7 · TransformerBlock.forward: replace these two lines with your code (handout §12).
        raise NotImplementedError("Task 7 · TransformerBlock.forward: not implemented yet (handout §12)")

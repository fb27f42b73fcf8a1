# Leo Ortiz -- Day 13 -- the block
from torch import nn

from multihead import MultiHeadAttention


class FeedForward(nn.Sequential):
    """Linear -> GELU -> Linear, as its own class so the block reads shorter."""

    def __init__(self, d_model, d_ff):
        super().__init__(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))


class TransformerBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        self.pre_ln = pre_ln
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, 4 * d_model if d_ff is None else d_ff)

    def forward(self, x, mask=None):
        pre = self.pre_ln
        x = x + self.attn(self.ln1(x), mask) if pre else self.ln1(x + self.attn(x, mask))
        x = x + self.ffn(self.ln2(x)) if pre else self.ln2(x + self.ffn(x))
        return x

"""Kim L. - Day 13, the Transformer block."""
import torch.nn as nn

from multihead import MultiHeadAttention


class TransformerBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        d_ff = d_ff or 4 * d_model
        self.pre_ln = pre_ln
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.ln2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        if self.pre_ln:
            x = x + self.attn(self.ln1(x), mask=mask)
            x = x + self.ffn(self.ln2(x))
            return x
        attended = self.attn(x, mask=mask)
        x = self.ln1(attended + x)
        x = self.ln2(self.ffn(x) + x)
        return x

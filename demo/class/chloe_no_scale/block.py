"""Day 13 task 7 - Chloe. The block from the picture in section 12, plus the Pre-LN variant."""
import torch.nn as nn

from multihead import MultiHeadAttention


class TransformerBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        if d_ff is None:
            d_ff = d_model * 4
        self.pre_ln = pre_ln
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        layers = [nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)]
        self.ffn = nn.Sequential(*layers)

    def forward(self, x, mask=None):
        if not self.pre_ln:
            # Post-LN: add first, normalise after
            a = self.attn(x, mask)
            x = self.ln1(x + a)
            f = self.ffn(x)
            x = self.ln2(x + f)
        else:
            # Pre-LN: normalise the input of each sublayer
            a = self.attn(self.ln1(x), mask)
            x = x + a
            f = self.ffn(self.ln2(x))
            x = x + f
        return x

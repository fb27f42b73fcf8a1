"""Gabe - day 13 - Transformer block."""
import torch.nn as nn

from multihead import MultiHeadAttention


class TransformerBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        d_ff = d_ff or 4 * d_model
        self.pre_ln = pre_ln
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        if not self.pre_ln:  # Post-LN = norm goes first??
            h = self.attn(self.ln1(x), mask)
            x = x + h
            h = self.ffn(self.ln2(x))
            x = x + h
        else:
            x = self.ln1(x + self.attn(x, mask))
            x = self.ln2(x + self.ffn(x))
        return x

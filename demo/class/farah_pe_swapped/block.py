"""Farah's Day 13: the whole block."""
import torch.nn as nn

from multihead import MultiHeadAttention


class TransformerBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        d_ff = d_ff if d_ff is not None else 4 * d_model
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.pre_ln = pre_ln

    def forward(self, x, mask=None):
        sublayers = ((self.ln1, lambda t: self.attn(t, mask)), (self.ln2, self.ffn))
        for norm, layer in sublayers:
            x = x + layer(norm(x)) if self.pre_ln else norm(x + layer(x))
        return x

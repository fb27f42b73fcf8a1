'''Mia M. -- Day 13 homework, the block'''
import torch.nn as nn

from multihead import MultiHeadAttention


class TransformerBlock(nn.Module):

    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        self.pre_ln = pre_ln
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        width = 4 * d_model if d_ff is None else d_ff
        self.ffn = nn.Sequential(
            nn.Linear(d_model, width),
            nn.GELU(),
            nn.Linear(width, d_model),
        )

    def forward(self, x, mask=None):
        # same two steps either way, only where the LayerNorm sits changes
        steps = [(self.ln1, lambda y: self.attn(y, mask)), (self.ln2, self.ffn)]
        for norm, sublayer in steps:
            if self.pre_ln:
                x = x + sublayer(norm(x))
            else:
                x = norm(x + sublayer(x))
        return x

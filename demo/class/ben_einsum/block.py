"""Day 13, part 4: the Transformer block, both the paper's Post-LN and the modern Pre-LN."""
import torch.nn as nn

from multihead import MultiHeadAttention


class TransformerBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        self.pre_ln = pre_ln
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        hidden = d_ff or 4 * d_model
        self.ffn = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, d_model))

    def forward(self, x, mask=None):
        if self.pre_ln:
            h = x + self.attn(self.ln1(x), mask=mask)
            return h + self.ffn(self.ln2(h))
        h = self.ln1(x + self.attn(x, mask=mask))
        return self.ln2(h + self.ffn(h))

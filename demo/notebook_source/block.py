import torch.nn as nn
from multihead import MultiHeadAttention

class TransformerBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        if d_ff is None:
            d_ff = 4 * d_model
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.pre_ln = pre_ln
    def forward(self, x, mask=None):
        if self.pre_ln:
            a = self.attn(self.ln1(x), mask)
            x = x + a
            return x + self.ffn(self.ln2(x))
        a = self.attn(x, mask)
        h = self.ln1(a + x)
        return self.ln2(self.ffn(h) + h)

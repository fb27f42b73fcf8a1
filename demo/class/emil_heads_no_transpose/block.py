# Emil - Day 13, part 5 (block)
import torch.nn as nn

from multihead import MultiHeadAttention


class TransformerBlock(nn.Module):

    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        hidden = 4 * d_model
        if d_ff is not None:
            hidden = d_ff
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, hidden),
            nn.GELU(),
            nn.Linear(hidden, d_model)
        )
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.pre_ln = pre_ln

    def forward(self, x, mask=None):
        if self.pre_ln == False:
            y = x + self.attn(x, mask)
            y = self.ln1(y)
            z = y + self.ffn(y)
            return self.ln2(z)
        y = self.ln1(x)
        y = x + self.attn(y, mask)
        z = self.ln2(y)
        return y + self.ffn(z)

"""Dev Patel - Day 13, part 6."""
from torch import nn

from multihead import MultiHeadAttention


class TransformerBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super(TransformerBlock, self).__init__()
        self.pre_ln = pre_ln
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential()
        self.ffn.append(nn.Linear(d_model, d_ff or 4 * d_model))
        self.ffn.append(nn.GELU())
        self.ffn.append(nn.Linear(d_ff or 4 * d_model, d_model))

    def _attn_part(self, x, mask):
        if self.pre_ln:
            return x + self.attn(self.ln1(x), mask)
        return self.ln1(x + self.attn(x, mask))

    def _ffn_part(self, x):
        if self.pre_ln:
            return x + self.ffn(self.ln2(x))
        return self.ln2(x + self.ffn(x))

    def forward(self, x, mask=None):
        return self._ffn_part(self._attn_part(x, mask))

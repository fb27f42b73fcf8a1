"""Dev Patel - Day 13, part 4."""
from torch import nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super(MultiHeadAttention, self).__init__()
        assert d_model % n_heads == 0, "d_model must be a multiple of n_heads"
        self.h = n_heads
        self.d_k = d_model // self.h
        self.qkv = nn.Linear(d_model, d_model * 3)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        # (B, T, 3D) -> three (B, T, D) -> (B, h, T, d_k) via unflatten
        q, k, v = (t.unflatten(-1, (self.h, self.d_k)).transpose(-3, -2) for t in self.qkv(x).chunk(3, -1))
        y, _ = scaled_dot_product_attention(q, k, v, mask)
        y = y.transpose(-3, -2).flatten(-2)  # back to (B, T, D)
        return self.out(y)

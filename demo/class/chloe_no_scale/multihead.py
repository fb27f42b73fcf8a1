"""Day 13 task 4 - Chloe. Several heads side by side, then W_O."""
import torch.nn as nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"n_heads ({n_heads}) has to divide d_model ({d_model})")
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def split(self, t):
        b, n, _ = t.shape
        t = t.reshape(b, n, self.h, self.d_k)
        return t.permute(0, 2, 1, 3)  # heads before tokens

    def merge(self, t):
        b, h, n, dk = t.shape
        return t.permute(0, 2, 1, 3).reshape(b, n, h * dk)

    def forward(self, x, mask=None):
        qkv = self.qkv(x)
        q, k, v = qkv.chunk(3, dim=-1)
        heads, _ = scaled_dot_product_attention(self.split(q), self.split(k), self.split(v), mask=mask)
        return self.out(self.merge(heads))

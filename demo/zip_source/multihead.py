"""Kim L. - Day 13, multi-head attention."""
import torch.nn as nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
        self.h, self.d_k = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.h, self.d_k)
        q, k, v = (qkv.select(2, j).transpose(1, 2) for j in range(3))  # each (B, h, T, d_k)
        heads, _ = scaled_dot_product_attention(q, k, v, mask=mask)
        merged = heads.transpose(1, 2).flatten(start_dim=2)  # (B, T, D)
        return self.out(merged)

"""Farah's Day 13: several heads."""
import torch
import torch.nn as nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("pick n_heads that divides d_model")
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        q, k, v = torch.chunk(self.qkv(x), 3, dim=2)
        # one slice of d_k columns per head, stacked on a new axis 1: (B, h, T, d_k)
        def heads(t):
            return torch.stack(torch.split(t, self.d_k, dim=-1), dim=1)
        attended, _ = scaled_dot_product_attention(heads(q), heads(k), heads(v), mask)
        joined = torch.cat(torch.unbind(attended, dim=1), dim=-1)
        return self.out(joined)

"""Day 13, part 2: multi-head attention with reshape/permute instead of view/transpose."""
import torch.nn as nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0, f"{d_model} features can't be split evenly into {n_heads} heads"
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def _heads(self, t):
        batch, T, _ = t.shape
        return t.reshape(batch, T, self.h, self.d_k).permute(0, 2, 1, 3)  # (B, h, T, d_k)

    def forward(self, x, mask=None):
        q, k, v = map(self._heads, self.qkv(x).chunk(3, dim=-1))
        ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)
        batch, h, T, d_k = ctx.shape
        ctx = ctx.permute(0, 2, 1, 3).reshape(batch, T, h * d_k)  # heads side by side again
        return self.out(ctx)

"""Gabe - day 13 - multi-head attention."""
import torch.nn as nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"{d_model} is not divisible by {n_heads}")
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        batch, seq, width = x.shape
        packed = self.qkv(x).view(batch, seq, 3, self.h, self.d_k)
        # (3, B, h, T, d_k): one permute for q, k and v together
        q, k, v = packed.permute(2, 0, 3, 1, 4).unbind(0)
        context, _ = scaled_dot_product_attention(q, k, v, mask)
        context = context.transpose(1, 2).reshape(batch, seq, width)
        return self.out(context)

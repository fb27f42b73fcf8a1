# Leo Ortiz -- Day 13 -- multi-head attention
import torch
from torch import nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"can't split d_model={d_model} into {n_heads} equal heads")
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, _ = x.shape
        qkv = self.qkv(x).reshape(B, T, 3 * self.h, self.d_k).transpose(1, 2)  # (B, 3h, T, d_k)
        q, k, v = torch.split(qkv, self.h, dim=1)  # chunk order = q heads, then k heads, then v heads
        z, _attn = scaled_dot_product_attention(q, k, v, mask)
        z = z.transpose(1, 2).reshape(B, T, self.h * self.d_k)
        return self.out(z)

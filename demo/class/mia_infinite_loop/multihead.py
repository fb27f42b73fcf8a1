'''Mia M. -- Day 13 homework, multi-head part'''
import torch
import torch.nn as nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):

    def __init__(self, d_model, n_heads):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError('d_model has to be divisible by n_heads')
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        # I find one head at a time easier to follow than the 4-D version.
        i = 0
        while i < self.h:
            cols = slice(i * self.d_k, (i + 1) * self.d_k)
            head_i, _ = scaled_dot_product_attention(q[..., cols], k[..., cols], v[..., cols], mask)
            if i == 0:
                heads = [head_i]
            else:
                heads.append(head_i)
                i += 1
        return self.out(torch.cat(heads, dim=-1))

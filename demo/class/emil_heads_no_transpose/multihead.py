# Emil - Day 13, part 3 (multi-head)
import torch.nn as nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):

    def __init__(self, d_model, n_heads):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("d_model % n_heads must be 0")
        self.d_model = d_model
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B = x.shape[0]
        T = x.shape[1]
        qkv = self.qkv(x)
        q = qkv[:, :, :self.d_model]
        k = qkv[:, :, self.d_model:2 * self.d_model]
        v = qkv[:, :, 2 * self.d_model:]

        # split the features into h heads of d_k each
        q = q.reshape(B, T, self.h, self.d_k)
        k = k.reshape(B, T, self.h, self.d_k)
        v = v.reshape(B, T, self.h, self.d_k)

        o, w = scaled_dot_product_attention(q, k, v, mask)

        # glue the heads back together
        o = o.reshape(B, T, self.d_model)
        return self.out(o)

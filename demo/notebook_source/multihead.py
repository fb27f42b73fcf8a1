import torch
import torch.nn as nn
from self_attention import scaled_dot_product_attention

class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError('n_heads must divide d_model')
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
    def forward(self, x, mask=None):
        B, T, D = x.shape
        Q, K, V = self.qkv(x).chunk(3, dim=-1)
        Q = Q.view(B, T, self.h, self.d_k).permute(0, 2, 1, 3)
        K = K.view(B, T, self.h, self.d_k).permute(0, 2, 1, 3)
        V = V.view(B, T, self.h, self.d_k).permute(0, 2, 1, 3)
        Z, A = scaled_dot_product_attention(Q, K, V, mask)
        Z = Z.permute(0, 2, 1, 3).contiguous().view(B, T, D)
        return self.out(Z)

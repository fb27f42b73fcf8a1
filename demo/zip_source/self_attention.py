"""Kim L. - Day 13, self-attention."""
import math

import torch
import torch.nn as nn


def scaled_dot_product_attention(Q, K, V, mask=None):
    """Returns (weighted values, attention weights)."""
    scores = torch.matmul(Q, K.transpose(-2, -1))
    scores.div_(math.sqrt(Q.size(-1)))
    if mask is not None:
        scores.masked_fill_(mask == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, V), weights


def causal_mask(T, device=None):
    """Lower-triangular ones: row t may see columns 0..t."""
    return torch.tril(torch.ones(T, T, device=device), diagonal=0).to(torch.int64)


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.d_k = d_k
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return out, weights

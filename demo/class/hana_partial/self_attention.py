"""Hana K. - Day 13. Only part 1 so far, the rest is next week (sorry!)."""
import math

import torch
import torch.nn as nn


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    # compare each query with each key, scaled so the softmax doesn't saturate
    sim = (Q.unsqueeze(-2) * K.unsqueeze(-3)).sum(dim=-1) / math.sqrt(d_k)
    if mask is not None:
        sim = sim.masked_fill(mask == 0, -float("inf"))
    weights = torch.exp(sim - sim.max(dim=-1, keepdim=True).values)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights @ V, weights


def causal_mask(T, device=None):
    mask = torch.zeros(T, T, device=device)
    for row in range(T):
        mask[row, : row + 1] = 1
    return mask


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        weights_out = scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)
        return weights_out

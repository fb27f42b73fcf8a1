"""Gabe - day 13 - attention."""
import math

import torch
import torch.nn as nn


def scaled_dot_product_attention(Q, K, V, mask=None):
    """softmax(QK^T/sqrt(d_k)) V, returns (out, weights)."""
    scores = torch.einsum("...id,...jd->...ij", Q, K)
    scores = scores / math.sqrt(K.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == False, float("-inf"))  # noqa: E712  (0 == False too)
    weights = nn.functional.softmax(scores, dim=-1)
    return torch.einsum("...ij,...jd->...id", weights, V), weights


def causal_mask(T, device=None):
    return torch.tril(torch.ones(T, T, device=device, dtype=torch.long))


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        projections = [layer(x) for layer in (self.W_q, self.W_k, self.W_v)]
        return scaled_dot_product_attention(*projections, mask=mask)

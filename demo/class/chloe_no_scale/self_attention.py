"""Day 13 task 1-3 - Chloe.

Attention = softmax(Q K^T) V, then a causal mask and one head with its own W_q, W_k, W_v.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def scaled_dot_product_attention(Q, K, V, mask=None):
    # every query against every key
    scores = torch.matmul(Q, K.transpose(-1, -2))
    if mask is not None:
        blocked = mask == 0
        scores = scores.masked_fill(blocked, float("-inf"))
    attn = F.softmax(scores, dim=-1)
    result = torch.matmul(attn, V)
    return result, attn


def causal_mask(T, device=None):
    ones = torch.ones((T, T), device=device)
    return ones.tril()  # lower triangle incl. diagonal = allowed


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.d_k = d_k
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        queries = self.W_q(x)
        keys = self.W_k(x)
        values = self.W_v(x)
        out, attn = scaled_dot_product_attention(queries, keys, values, mask=mask)
        return out, attn

"""Farah's Day 13: scaled dot-product attention."""
import torch
import torch.nn as nn

NEG_INF = float("-inf")


def _apply_mask(scores, mask):
    if mask is None:
        return scores
    return scores.masked_fill(mask.eq(0), NEG_INF)


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    raw = Q.matmul(K.swapaxes(-1, -2)) / d_k ** 0.5
    weights = _apply_mask(raw, mask).softmax(-1)
    return weights.matmul(V), weights


def causal_mask(T, device=None):
    # 1 where key <= query: torch.triu above the diagonal would be the future
    return 1 - torch.triu(torch.ones(T, T, device=device), diagonal=1)


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.d_k = d_k
        for name in ("W_q", "W_k", "W_v"):
            setattr(self, name, nn.Linear(d_model, d_k, bias=False))

    def forward(self, x, mask=None):
        Q = self.W_q(x)
        K = self.W_k(x)
        V = self.W_v(x)
        return scaled_dot_product_attention(Q, K, V, mask=mask)

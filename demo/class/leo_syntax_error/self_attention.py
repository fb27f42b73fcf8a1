"""Scaled dot-product attention, masks and a single-head SelfAttention (handout §3–§6)."""
import math

import torch
import torch.nn as nn


def scaled_dot_product_attention(Q, K, V, mask=None):
    """Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V   (handout §3, §4, §6).

    Q: (..., T_q, d_k)   K: (..., T_k, d_k)   V: (..., T_k, d_v)
    mask: None, or broadcastable to (..., T_q, T_k); an entry equal to 0 (or False)
          blocks that key for that query, anything else allows it.
    Returns (out, weights): out (..., T_q, d_v), weights (..., T_q, T_k),
    each row of weights sums to 1 and blocked entries are exactly 0.
    """
    d_k = Q.size(-1)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        # -inf, not a large negative number: softmax then gives blocked keys exactly 0.
        scores = scores.masked_fill(mask == 0, float("-inf"))  # (..., T_q, T_k)
    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k), each row sums to 1
    out = weights @ V  # (..., T_q, d_v)
    return out, weights


def causal_mask(T, device=None):
    """The causal mask of handout §6: token t may look at tokens 0..t only.

    Returns a (T, T) tensor with 1 on and below the diagonal and 0 above it,
    i.e. torch.tril(torch.ones(T, T)).
    """
    return torch.tril(torch.ones(T, T, device=device))  # (T, T)


class SelfAttention(nn.Module):
    """Single-head self-attention (handout §5).

    Q = x W_q, K = x W_k, V = x W_v, each nn.Linear(d_model, d_k, bias=False);
    then Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V.
    x: (B, T, d_model) -> (out (B, T, d_k), weights (B, T, T)).
    Attributes: W_q, W_k, W_v, d_k.
    """

    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        """x: (B, T, d_model); mask: None or broadcastable to (B, T, T).

        Returns (out (B, T, d_k), weights (B, T, T)).
        """
        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)  # each (B, T, d_k)
        return scaled_dot_product_attention(Q, K, V, mask)  # (B, T, d_k), (B, T, T)

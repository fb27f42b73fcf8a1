"""Dev Patel - Day 13, parts 1 to 3."""
import math

import torch
from torch import nn


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = K.shape[-1]
    scale = 1 / math.sqrt(d_k)
    logits = (Q * scale) @ K.mT  # scaling Q first is the same as scaling the product
    if mask is not None:
        logits = torch.where(mask.bool(), logits, logits.new_tensor(float("-inf")))
    # normalise over the tokens
    probs = logits.softmax(dim=-2)
    return probs @ V, probs


def causal_mask(T, device=None):
    rows = torch.arange(T, device=device).view(T, 1)
    cols = torch.arange(T, device=device).view(1, T)
    return (cols <= rows).float()


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super(SelfAttention, self).__init__()
        self.W_q, self.W_k, self.W_v = (nn.Linear(d_model, d_k, bias=False) for _ in range(3))
        self.d_k = d_k

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)

# Emil - Day 13 assignment, part 1 (attention) and part 2 (one head)
import math

import torch
import torch.nn as nn


def scaled_dot_product_attention(Q, K, V, mask=None):
    dk = Q.size(-1)
    Kt = torch.transpose(K, -2, -1)
    s = torch.matmul(Q, Kt) * (1.0 / math.sqrt(dk))

    # masked positions -> -inf so they get weight 0 after softmax
    if mask is not None:
        s = s.masked_fill(torch.logical_not(mask.to(torch.bool)), -math.inf)

    w = torch.softmax(s, -1)
    o = torch.matmul(w, V)
    return o, w


def causal_mask(T, device=None):
    m = torch.ones(T, T, dtype=torch.bool, device=device)
    return torch.tril(m)


class SelfAttention(nn.Module):

    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        q = self.W_q(x)
        k = self.W_k(x)
        v = self.W_v(x)
        o, w = scaled_dot_product_attention(q, k, v, mask)
        return o, w

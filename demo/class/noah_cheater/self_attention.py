import math
import torch
import torch.nn as nn

# noah w. day13


def scaled_dot_product_attention(Q, K, V, mask=None):
    a = Q @ K.transpose(-2, -1)
    a = a / math.sqrt(K.size(-1))
    if mask is not None:
        a = a.masked_fill(mask == 0, -torch.inf)
    a = a.softmax(-1)
    return a @ V, a


def causal_mask(T, device=None):
    return torch.ones(T, T, device=device).tril_()


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)

# Leo Ortiz -- Day 13 -- attention.py part
import math
import torch
from torch import nn
from torch.nn import functional as F


def scaled_dot_product_attention(Q, K, V, mask=None):
    n_features = Q.size(-1)
    if mask is None:
        mask = torch.ones(1, dtype=torch.bool, device=Q.device)  # lets everything through
    attention_logits = Q @ K.transpose(-2, -1)
    attention_logits /= math.sqrt(n_features)
    attention_logits = attention_logits.masked_fill(~mask.bool(), float("-inf"))
    attention = F.softmax(attention_logits, dim=-1)
    values = attention @ V
    return values, attention


def causal_mask(T, device=None):
    idx = torch.arange(T, device=device)
    return (idx.unsqueeze(0) <= idx.unsqueeze(1)).to(torch.float32)


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.d_k = d_k
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        if mask is not None and mask.dim() == 2:
            mask = mask.unsqueeze(0)  # (1, T, T) so it lines up with the batch
        return scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)

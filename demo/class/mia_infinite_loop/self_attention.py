'''Mia M. -- Day 13 homework, attention part'''
import math
import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    '''One head: project x three times, then attend.'''

    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(Q=self.W_q(x), K=self.W_k(x), V=self.W_v(x), mask=mask)


def causal_mask(T, device=None):
    full = torch.full((T, T), 1.0, device=device)
    return torch.tril(full, diagonal=0)


def scaled_dot_product_attention(Q, K, V, mask=None):
    similarity = Q.matmul(K.transpose(-1, -2))
    similarity = similarity.div(math.sqrt(Q.shape[-1]))
    if mask is not None:
        mask_b = mask.to(dtype=torch.bool, device=similarity.device)
        similarity = similarity.masked_fill(mask_b.logical_not(), float('-inf'))
    weights = similarity.softmax(dim=-1)
    output = weights.matmul(V)
    return output, weights

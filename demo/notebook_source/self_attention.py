import math
import torch
import torch.nn as nn

def scaled_dot_product_attention(Q, K, V, mask=None):
    # Q: (..., Tq, d)  K: (..., Tk, d)  V: (..., Tk, dv)
    d = Q.shape[-1]
    S = Q @ K.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        S = S.masked_fill(mask == 0, float('-inf'))
    A = torch.softmax(S, dim=-1)
    return A @ V, A

def causal_mask(T, device=None):
    return torch.tril(torch.ones(T, T, device=device)).bool()

class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k
    def forward(self, x, mask=None):
        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)
        return scaled_dot_product_attention(Q, K, V, mask)

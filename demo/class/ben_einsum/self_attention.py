"""Day 13, part 1: attention written with einsum, so the index names say what gets summed."""
import math

import torch
import torch.nn as nn

from attn_utils import masked_softmax

torch.manual_seed(1234)  # my experiments below should give the same picture every run
print("[ben] self_attention.py loaded")


def scaled_dot_product_attention(Q, K, V, mask=None):
    # q = query position, k = key position, d = feature; "..." = any batch / head dims
    scores = torch.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(Q.shape[-1])
    weights = masked_softmax(scores, mask)
    out = torch.einsum("...qk,...kv->...qv", weights, V)
    return out, weights


def causal_mask(T, device=None):
    pos = torch.arange(T, device=device)
    return pos[None, :] <= pos[:, None]  # True where key position <= query position


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        # the handout's recap calls them Wq / Wk / Wv, I like the short names
        self.Wq = nn.Linear(d_model, d_k, bias=False)
        self.Wk = nn.Linear(d_model, d_k, bias=False)
        self.Wv = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.Wq(x), self.Wk(x), self.Wv(x), mask)


if __name__ == "__main__":
    x = torch.randn(1, 6, 16)
    out, w = SelfAttention(16, 16)(x, causal_mask(6))
    print(out.shape, w.shape, w[0].sum(-1))

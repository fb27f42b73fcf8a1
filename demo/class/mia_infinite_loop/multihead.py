"""Multi-head attention (handout §7)."""
import torch
import torch.nn as nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    """h attention heads in parallel, concatenated and mixed by W_O (handout §7).

    d_k = d_model // h per head. qkv = nn.Linear(d_model, 3·d_model) computes Q, K, V
    for all heads at once: q, k, v = qkv(x).chunk(3, dim=-1), and head i uses
    features i·d_k:(i+1)·d_k of each. out = nn.Linear(d_model, d_model) is W_O.
    x: (B, T, d_model) -> (B, T, d_model).
    mask: None or broadcastable to (B, h, T, T): a (T, T) causal mask or a
    (B, 1, 1, T) padding mask.
    Attributes: h, d_k, qkv, out. d_model % n_heads != 0 raises ValueError.
    """

    def __init__(self, d_model, n_heads):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}: "
                "every head needs d_model // n_heads features (handout §7)"
            )
        self.h, self.d_k = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)  # W_Q, W_K, W_V for all heads at once
        self.out = nn.Linear(d_model, d_model)  # W_O

    def forward(self, x, mask=None):
        """x: (B, T, d_model); mask: None or broadcastable to (B, h, T, T).

        Returns (B, T, d_model).
        """
        B, T, D = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (B, T, D)
        # Split D into h heads of d_k features, then move heads next to the batch.
        # I find one head at a time easier to follow than the 4-D version.
        i = 0
        while i < self.h:
            cols = slice(i * self.d_k, (i + 1) * self.d_k)
            head_i, _ = scaled_dot_product_attention(q[..., cols], k[..., cols], v[..., cols], mask)  # (B, T, d_k)
            if i == 0:
                heads = [head_i]
            else:
                heads.append(head_i)
                i += 1
        ctx = torch.cat(heads, dim=-1)  # (B, T, D): heads side by side
        return self.out(ctx)  # (B, T, D)

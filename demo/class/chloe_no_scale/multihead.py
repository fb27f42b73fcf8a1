"""Multi-head attention (handout §7)."""
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
        q, k, v = [t.view(B, T, self.h, self.d_k).transpose(1, 2) for t in (q, k, v)]  # (B, h, T, d_k)
        ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)
        ctx = ctx.transpose(1, 2).contiguous().view(B, T, D)  # (B, T, D): heads concatenated
        return self.out(ctx)  # (B, T, D)

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
        # TODO Task 4 · MultiHeadAttention.__init__: replace these two lines with your code (handout §7).
        raise NotImplementedError("Task 4 · MultiHeadAttention.__init__: not implemented yet (handout §7)")

    def forward(self, x, mask=None):
        """x: (B, T, d_model); mask: None or broadcastable to (B, h, T, T).

        Returns (B, T, d_model).
        """
        # TODO Task 4 · MultiHeadAttention.forward: replace these two lines with your code (handout §7).
        raise NotImplementedError("Task 4 · MultiHeadAttention.forward: not implemented yet (handout §7)")

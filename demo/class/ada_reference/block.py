"""One Transformer block: attention, add & norm, feed-forward, add & norm (handout §9–§12)."""
import torch.nn as nn

from multihead import MultiHeadAttention


class TransformerBlock(nn.Module):
    """The block of handout §12.

    Post-LN (pre_ln=False, the handout's drawing):
        x = ln1(x + attn(x, mask));  x = ln2(x + ffn(x))
    Pre-LN (pre_ln=True, modern LLMs):
        x = x + attn(ln1(x), mask);  x = x + ffn(ln2(x))
    ffn = Linear(d_model, d_ff) -> GELU -> Linear(d_ff, d_model), d_ff = 4·d_model by default.
    Attributes: attn, ln1, ln2, ffn. x: (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.pre_ln = pre_ln
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, d_ff),  # expand: (B, T, d_ff)
            nn.GELU(),
            nn.Linear(d_ff, d_model),  # project back: (B, T, d_model)
        )

    def forward(self, x, mask=None):
        """x: (B, T, d_model); mask as for MultiHeadAttention. Returns (B, T, d_model)."""
        if self.pre_ln:
            x = x + self.attn(self.ln1(x), mask)  # (B, T, d_model)
            x = x + self.ffn(self.ln2(x))  # (B, T, d_model)
        else:
            x = self.ln1(x + self.attn(x, mask))  # (B, T, d_model)
            x = self.ln2(x + self.ffn(x))  # (B, T, d_model)
        return x

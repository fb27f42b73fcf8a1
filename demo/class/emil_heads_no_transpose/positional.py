"""Sinusoidal positional encoding (handout §8)."""
import torch
import torch.nn as nn


def positional_encoding(T, d_model):
    """The sinusoidal table of "Attention Is All You Need" (handout §8).

    PE[pos, 2i]   = sin(pos / 10000^(2i/d_model))
    PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))
    Returns a float32 tensor of shape (T, d_model); d_model is even.
    """
    pos = torch.arange(T, dtype=torch.float32).unsqueeze(1)  # (T, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (d_model/2,)
    angle = pos / (10000 ** (two_i / d_model))  # (T, d_model/2)
    pe = torch.zeros(T, d_model)  # (T, d_model)
    pe[:, 0::2] = torch.sin(angle)  # even features
    pe[:, 1::2] = torch.cos(angle)  # odd features
    return pe


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to token embeddings: x + PE[:T] (handout §8).

    The table (max_len, d_model) is a buffer, not a trainable parameter.
    x: (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(self, d_model, max_len=5000):
        super().__init__()
        # A buffer moves with .to(device) and is saved, but the optimiser never changes it.
        self.register_buffer("pe", positional_encoding(max_len, d_model))  # (max_len, d_model)

    def forward(self, x):
        """x: (B, T, d_model) -> x + PE[:T], (B, T, d_model)."""
        T = x.size(1)
        return x + self.pe[:T]  # (B, T, d_model) + (T, d_model) broadcasts over B

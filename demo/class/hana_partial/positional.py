"""Sinusoidal positional encoding (handout §8)."""
import torch
import torch.nn as nn


def positional_encoding(T, d_model):
    """The sinusoidal table of "Attention Is All You Need" (handout §8).

    PE[pos, 2i]   = sin(pos / 10000^(2i/d_model))
    PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))
    Returns a float32 tensor of shape (T, d_model); d_model is even.
    """
    # TODO Task 5 · positional_encoding: replace these two lines with your code (handout §8).
    raise NotImplementedError("Task 5 · positional_encoding: not implemented yet (handout §8)")


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to token embeddings: x + PE[:T] (handout §8).

    The table (max_len, d_model) is a buffer, not a trainable parameter.
    x: (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(self, d_model, max_len=5000):
        super().__init__()
        # TODO Task 6 · PositionalEncoding.__init__: replace these two lines with your code (handout §8).
        raise NotImplementedError("Task 6 · PositionalEncoding.__init__: not implemented yet (handout §8)")

    def forward(self, x):
        """x: (B, T, d_model) -> x + PE[:T], (B, T, d_model)."""
        # TODO Task 6 · PositionalEncoding.forward: replace these two lines with your code (handout §8).
        raise NotImplementedError("Task 6 · PositionalEncoding.forward: not implemented yet (handout §8)")

"""Dev Patel - Day 13, part 5."""
import torch
from torch import nn


def positional_encoding(T, d_model):
    half = d_model // 2
    exponent = torch.arange(half, dtype=torch.float32) * 2 / d_model
    angles = torch.outer(torch.arange(T, dtype=torch.float32), torch.pow(10000.0, -exponent))
    # (T, half, 2) with sin in slot 0 and cos in slot 1, then flattened so they alternate
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=2).view(T, d_model)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super(PositionalEncoding, self).__init__()
        self.register_buffer("pe", positional_encoding(max_len, d_model))

    def forward(self, x):
        n = x.size(1)
        return x + self.pe[None, :n]  # the None adds the batch axis

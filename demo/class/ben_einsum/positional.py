"""Day 13, part 3: sinusoidal positions, computed in float64 with exp/log and interleaved with stack."""
import math

import torch
import torch.nn as nn


def positional_encoding(T, d_model):
    position = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    # 1 / 10000^(2i/d) == exp(-(2i/d) * ln 10000)
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = position * inv_freq  # (T, d_model/2)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # sin, cos, sin, cos, ...
    return pe.float()


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        # not a Parameter: the optimiser has no business changing it, and it needn't be saved
        self.register_buffer("table", positional_encoding(max_len, d_model), persistent=False)

    def forward(self, x):
        return x + self.table[: x.shape[1]].to(x.dtype)

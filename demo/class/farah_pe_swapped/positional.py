"""Farah's Day 13: where each token is."""
import math

import torch
import torch.nn as nn


def positional_encoding(T, d_model):
    position = torch.arange(0, T, dtype=torch.float).unsqueeze(-1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.empty(T, d_model)
    pe[:, 0::2] = torch.cos(position * div_term)  # cos first, then sin, like the (cos, sin) pairs on a circle
    pe[:, 1::2] = torch.sin(position * div_term)
    return pe


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        table = positional_encoding(max_len, d_model)
        self.register_buffer("encoding", table)

    def forward(self, x):
        return x + self.encoding[: x.shape[-2]]

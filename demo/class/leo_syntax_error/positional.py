# Leo Ortiz -- Day 13 -- positional encoding
import torch
from torch import nn


def positional_encoding(T, d_model):
    pe = torch.zeros(T, d_model)
    pos = torch.arange(T, dtype=torch.float32).reshape(-1, 1)
    evens = torch.arange(0, d_model, 2, dtype=torch.float32)
    denominators = torch.pow(torch.tensor(10000.0), evens / d_model
    pe[:, 0::2] = torch.sin(pos / denominators)
    pe[:, 1::2] = torch.cos(pos / denominators)
    return pe


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", positional_encoding(max_len, d_model), persistent=True)

    def forward(self, x):
        length = x.size(1)
        return x + self.pe[:length].to(dtype=x.dtype)

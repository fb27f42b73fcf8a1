"""Kim L. - Day 13, positional encoding."""
import torch
import torch.nn as nn


def positional_encoding(T, d_model):
    freqs = 1.0 / torch.pow(10000.0, torch.arange(0, d_model, 2).float() / d_model)
    args = torch.arange(T).float().unsqueeze(1) * freqs.unsqueeze(0)
    pe = torch.zeros(T, d_model)
    pe[:, ::2] = args.sin()
    pe[:, 1::2] = args.cos()
    return pe


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", positional_encoding(max_len, d_model))

    def forward(self, x):
        _, T, _ = x.shape
        return self.pe[:T] + x

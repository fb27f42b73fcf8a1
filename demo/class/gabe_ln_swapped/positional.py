"""Gabe - day 13 - positional encoding."""
import torch
import torch.nn as nn


def positional_encoding(T, d_model):
    i = torch.arange(d_model // 2, dtype=torch.float32)
    wavelengths = 10000.0 ** (2 * i / d_model)
    theta = torch.arange(T, dtype=torch.float32)[:, None] / wavelengths[None, :]
    out = torch.zeros(T, d_model // 2, 2)
    out[..., 0] = theta.sin()
    out[..., 1] = theta.cos()
    return out.reshape(T, d_model)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", positional_encoding(max_len, d_model))

    def forward(self, x):
        T = x.shape[1]
        return x + self.pe[:T].unsqueeze(0)

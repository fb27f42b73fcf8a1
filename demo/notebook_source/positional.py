import torch
import torch.nn as nn

def positional_encoding(T, d_model):
    p = torch.arange(T, dtype=torch.float32)[:, None]
    j = torch.arange(d_model, dtype=torch.float32)[None, :]
    angle = p / 10000 ** ((j - j % 2) / d_model)   # columns 2i and 2i+1 share an angle
    even = (torch.arange(d_model) % 2 == 0)
    return torch.where(even, torch.sin(angle), torch.cos(angle))

class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer('pe', positional_encoding(max_len, d_model))
    def forward(self, x):
        return x + self.pe[:x.shape[1], :]

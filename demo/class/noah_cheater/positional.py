import math
import torch
import torch.nn as nn

# noah w. day13


def positional_encoding(T, d_model):
    rows = []
    for pos in range(T):
        row = []
        for i in range(0, d_model, 2):
            row.append(math.sin(pos / (10000 ** (i / d_model))))
            row.append(math.cos(pos / (10000 ** (i / d_model))))
        rows.append(row)
    return torch.tensor(rows)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", positional_encoding(max_len, d_model))

    def forward(self, x):
        return x + self.pe[: x.size(1)]

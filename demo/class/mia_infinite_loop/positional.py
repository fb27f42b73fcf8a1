'''Mia M. -- Day 13 homework, positions'''
import math
import torch
import torch.nn as nn


def positional_encoding(T, d_model):
    columns = []
    t = torch.arange(T, dtype=torch.float32)
    for k in range(d_model // 2):
        omega = math.exp(-2 * k * math.log(10000) / d_model)
        columns += [torch.sin(omega * t), torch.cos(omega * t)]
    return torch.stack(columns, dim=1)


class PositionalEncoding(nn.Module):

    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer('pos_table', positional_encoding(max_len, d_model))

    def forward(self, x):
        return x + self.pos_table.narrow(0, 0, x.shape[1])

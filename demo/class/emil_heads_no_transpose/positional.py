# Emil - Day 13, part 4 (positions)
import math

import numpy as np
import torch
import torch.nn as nn


def positional_encoding(T, d_model):
    # built in numpy first because that's how I did it in the Day 12 homework
    pos = np.arange(T)[:, np.newaxis]
    i = np.arange(d_model)[np.newaxis, :]
    rates = 1 / np.power(10000, (2 * (i // 2)) / np.float64(d_model))
    ang = pos * rates
    ang[:, 0::2] = np.sin(ang[:, 0::2])
    ang[:, 1::2] = np.cos(ang[:, 1::2])
    return torch.from_numpy(ang).to(torch.float32)


class PositionalEncoding(nn.Module):

    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("P", positional_encoding(max_len, d_model))

    def forward(self, x):
        T = x.shape[1]
        assert T <= self.max_len, "sequence longer than max_len"
        return x + self.P[:T]

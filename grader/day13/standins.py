"""Grader stand-ins: small, known modules that take the place of a student's part.

The block is graded with StandInAttention in place of the student's MultiHeadAttention, so a
bug in multihead.py never costs block points (assignments/day13/CONTRACT.md, "One bug costs one part").
The stand-in is a real attention (so the block's mask pass-through changes its output) with
one grader-loaded projection. When a student's self_attention.py fails to import, its
multihead.py is imported against the stand-in functions below instead.

Nothing here is secret: it runs inside the sandboxed child. It follows the handout's formulas,
which every student has in front of them.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn


def scaled_dot_product_attention(Q, K, V, mask=None, dropout=None, *more, **named):
    """softmax(Q Kᵀ / √d_k) V with blocked entries exactly 0 (handout §3, §6). `dropout`: a Dropout the caller hands
    in for the weights, as the Annotated Transformer's attention takes one, or its probability, as torch's own
    attention takes one (the contract allows a Dropout on the attention weights; graded modules run in eval mode,
    where a Dropout hands the weights back as they are)."""
    if dropout is None and "dropout_p" in named:
        dropout = named.pop("dropout_p")  # torch's own attention's name for it (held-out s54)
    if more or named:
        # Python's own words would name this function and its arguments, which the student's own function may take.
        given = [f"{len(more)} more positional argument(s)"] * bool(more) + [f"`{name}=`" for name in named]
        raise TypeError(
            f"your code called scaled_dot_product_attention with {', '.join(given)}, but here the grader's own "
            "scaled_dot_product_attention stands in for yours (CONTRACT.md, \"One bug costs one part\"), and it takes "
            "the contract's arguments only: Q, K, V, mask=None, and a Dropout or its probability for the weights "
            "(dropout=, or dropout_p=)")
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))  # (..., T_q, T_k)
    if mask is not None:
        try:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        except RuntimeError:
            if _broadcasts(tuple(mask.shape), tuple(scores.shape)):
                raise
            # Raised here, in the grader's code, by the student's mask: said in the contract's words, as the
            # visible tests say it, rather than torch's "The size of tensor a must match ...".
            raise RuntimeError(
                f"scaled_dot_product_attention was given a mask of shape {tuple(mask.shape)}, which does not "
                f"broadcast to its scores' shape {tuple(scores.shape)} (..., T_q, T_k). Every mask the contract "
                "gives MultiHeadAttention and SelfAttention already does: pass it on unchanged (handout §6, §7)"
            ) from None
    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k)
    if dropout is not None and not callable(dropout) and float(dropout):
        # A probability, as torch's own attention takes one (its dropout_p): applied as it applies it (red team s53r).
        weights = torch.nn.functional.dropout(weights, float(dropout))  # (..., T_q, T_k)
    elif callable(dropout):
        weights = dropout(weights)  # (..., T_q, T_k)
    return weights @ V, weights  # (..., T_q, d_v), (..., T_q, T_k)


def _broadcasts(a: tuple, b: tuple) -> bool:
    return all(x == y or 1 in (x, y) for x, y in zip(reversed(a), reversed(b)))


def causal_mask(T, device=None):
    return torch.tril(torch.ones(T, T, device=device))  # (T, T)


def positional_encoding(T, d_model):
    """The sinusoidal table of handout §8. When a student's function raises while the class of its
    file that calls it runs (SelfAttention, PositionalEncoding), that class is graded again over
    the function's stand-in (grader/running/executor.py, "over_standins")."""
    angle = torch.arange(T, dtype=torch.float32)[:, None] / 10000 ** (
        torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)  # (T, d_model/2)
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).reshape(T, d_model)  # (T, d_model)


class StandInSelfAttention(nn.Module):
    """SelfAttention of the contract, for a multihead.py that imports it."""

    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)


class StandInAttention(nn.Module):
    """A one-head attention over the raw features followed by one projection.

    forward(x, mask): out = proj(softmax(x xᵀ / √d_model, masked) x). The mask may be any
    shape the contract allows for MultiHeadAttention: (T, T), (B, 1, 1, T), (B, 1, T, T) or
    (B, h, T, T); the first head's slice is used.
    """

    def __init__(self, d_model, n_heads=1, *args, **kwargs):
        super().__init__()
        self.d_model, self.h = d_model, n_heads
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None, *args, **kwargs):
        if mask is not None and mask.dim() == 4:
            mask = mask[:, 0]  # (B or 1, T or 1, T)
        ctx, _ = scaled_dot_product_attention(x, x, x, mask)  # (B, T, d_model)
        return self.proj(ctx)  # (B, T, d_model)


def make(kind: str, *, obj=None, header=None) -> nn.Module:
    """Build the stand-in `kind` to replace `obj` (the student's sub-module)."""
    if kind == "attention":
        d_model = _d_model(obj, header)
        return StandInAttention(d_model)
    raise ValueError(f"unknown stand-in {kind!r}")


def _d_model(obj, header) -> int:
    init = list((header or {}).get("init", []))
    kwargs = (header or {}).get("init_kwargs", {})
    if "d_model" in kwargs:
        return int(kwargs["d_model"])
    if init:
        return int(init[0])
    return 64  # TransformerBlock's default d_model

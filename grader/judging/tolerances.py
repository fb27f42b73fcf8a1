"""What a tolerance is, for every lesson: the engine's comparisons take one, the lesson picks the numbers.

A comparison passes when |got - expected| <= atol·scale + rtol·|expected| elementwise, where
scale = max(1, max|expected|), so that large values (gradients) are judged relative to their size
(grader/judging/assertions.py `close`); an infinite expected value is met only by the same infinity
(`within`). A lesson's tolerances module holds its numbers and why it chose them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tol:
    atol: float
    rtol: float
    why: str = ""


def for_dtype(table: dict[str, Tol], dtype: str, default: str = "float32") -> Tol:
    """The tolerance a table keeps for `dtype`; a dtype it does not list is judged as `default`."""
    return table.get(dtype, table[default])


def within(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float, scale: float) -> np.ndarray:
    """Elementwise: got equals expected, or |got - expected| <= atol·scale + rtol·|expected|. Where expected is
    infinite only equality counts: its relative allowance would be infinite too, and any finite number would pass
    for -inf (a 0/1 mask for an additive 0/-inf one). NaN is left to the caller."""
    magnitude = np.abs(np.where(np.isfinite(expected), expected, 0.0))
    with np.errstate(invalid="ignore", over="ignore"):
        return (got == expected) | (np.abs(got - expected) <= atol * scale + rtol * magnitude)

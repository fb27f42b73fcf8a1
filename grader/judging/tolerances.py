"""What a tolerance is, for every lesson: the engine's comparisons take one, the lesson picks the numbers.

A comparison passes when |got - expected| <= atol·scale + rtol·|expected| elementwise, where
scale = max(1, max|expected|), so that large values (gradients) are judged relative to their size
(grader/judging/assertions.py `close`). A lesson's tolerances module holds its numbers and why it chose them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tol:
    atol: float
    rtol: float
    why: str = ""


def for_dtype(table: dict[str, Tol], dtype: str, default: str = "float32") -> Tol:
    """The tolerance a table keeps for `dtype`; a dtype it does not list is judged as `default`."""
    return table.get(dtype, table[default])

"""Every tolerance the hidden tests use, and why (issue 3, "Tolerances justified in one place").

A comparison passes when |got - expected| <= atol + rtol * |expected| elementwise, where the
reference scale of atol is max(1, max|expected|) so that large gradients are judged relative
to their size.

How the numbers were chosen: `python -m grader.day13.tolerances` grades every correct variant
in tests/fixtures/correct/ against the reference on the hidden tests' own inputs and prints the
largest spread per kind of value. Measured on torch 2.13.0 CPU (2026-11-29):

  kind                         largest spread between legitimate implementations
  float32 outputs/weights      ~6e-7   (einsum vs matmul, float64 inside, manual stable softmax)
  float32 gradients            ~2e-6   (relative to the gradient's scale)
  float64 outputs/gradients    ~4e-15
  positional table, float32    ~4.9e-4 at T = 5000 (exp/log form, or float64 cast down, vs
                               the handout's pos / 10000^(2i/d) in float32: the angle is
                               ~5000 rad, whose float32 spacing is 4.9e-4)

Each tolerance sits one to two orders of magnitude above the spread (false failures: 0) and
far below the smallest catalogued bug's effect (tests/test_graders.py proves every mutant is
still caught; the closest is pe.base_1000 at ~2e-2 and sa.divide_by_dk at ~1.6e-2).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tol:
    atol: float
    rtol: float
    why: str = ""


VALUES = {
    "float32": Tol(2e-5, 1e-4, "float32 rounding across matmul/einsum/loop/float64-inside: spread ~6e-7"),
    "float64": Tol(1e-9, 1e-7, "float64 spread ~4e-15; loose enough for a float32 detour in small steps"),
}
GRADS = {
    "float32": Tol(5e-5, 2e-4, "float32 gradients through softmax: spread ~2e-6 of their scale"),
    "float64": Tol(1e-8, 1e-6, "float64 gradients: spread ~1e-14"),
}
# The handout prints its worked values rounded to 2 decimals (§3, §4) or 3 decimals (§6, §8):
# allow half a unit in the last place plus a little slack, not more.
WORKED_2DP = Tol(6e-3, 0.0, "handout rounds to 0.01")
WORKED_3DP = Tol(6e-4, 0.0, "handout rounds to 0.001")
# A sin/cos table computed in float32 has an absolute error up to ~ulp(angle) = 4.9e-4 at
# position 5000; any legitimate float32 formula may land anywhere in that band.
PE_TABLE = Tol(1.5e-3, 0.0, "float32 angle rounding at T=5000: spread ~4.9e-4")
# Reference-free properties: rows summing to 1, outputs unchanged under a causal mask.
PROPERTY = {
    "float32": Tol(1e-5, 1e-5, "one float32 softmax normalisation"),
    "float64": Tol(1e-10, 1e-10, "one float64 softmax normalisation"),
}
# When a failing student's outputs are compared with a catalogue mutant's to name the
# misconception, the same implementation-spread argument applies.
MATCH = Tol(1e-4, 1e-3, "same bug, different but legitimate float32 arithmetic")


def values(dtype: str) -> Tol:
    return VALUES.get(dtype, VALUES["float32"])


def grads(dtype: str) -> Tol:
    return GRADS.get(dtype, GRADS["float32"])


def main() -> int:
    """Print the measured spread of the correct variants per kind of value."""
    from grader.day13.killrate import measure_spread

    for kind, (spread, where) in sorted(measure_spread().items()):
        print(f"{kind:28s} {spread:.3e}   ({where})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

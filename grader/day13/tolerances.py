"""Every tolerance the hidden tests use, and why (issue 3, "Tolerances justified in one place").

A comparison passes when |got - expected| <= atol + rtol * |expected| elementwise, where the
reference scale of atol is max(1, max|expected|) so that large gradients are judged relative
to their size (the engine's grader/judging/tolerances.py and grader/judging/assertions.py).

How the numbers were chosen: `python -m grader.day13.tolerances` runs the hidden tests on every
correct variant in tests/fixtures/correct/ (einsum, manual stable softmax, per-head loop,
float64 inside, torch.where, large-negative masking, numpy/exp-log/float64 PE tables...) and
prints, per kind of value, the largest |variant - reference| / max(1, max|reference|) over the
hidden tests' own calls. Measured on torch 2.13.0 CPU, 2026-11-29:

  kind                 largest spread   where
  float32 outputs      3.1e-7           Q scaled before the product (tutorial style) vs after
  float32 gradients    2.3e-7           manual stable softmax, dL/dx of SelfAttention
  float64 outputs      2.9e-16          einsum vs matmul
  positional, float32  2.7e-4           numpy float64 table cast to float32, T = 5000
                                        (the contract quotes ~4e-4 for float32 vs float64:
                                        float32 spacing of an angle near 5000 rad is 4.9e-4)

Each tolerance below sits about 100x above the float32 spread of its kind (5x for the table, whose
spread is set by float32 itself; float64 calls are judged at float32's, see VALUES), so false failures stay at 0, and far below the effect of the
smallest catalogued bug that changes numbers: pe.base_1000 moves the table by 4.3e-2 and
sa.divide_by_dk the weights by 5.2e-2 (29x and 2600x their tolerances); the other mutants move
the numbers more, or are caught by an error, a missing gradient, a dtype or forbidden use.
tests/day13/test_graders.py re-measures these margins and grades every mutant (the kill rate,
`python -m grader killrate`).
"""
from __future__ import annotations

from grader.judging.tolerances import Tol, for_dtype

# A float64 call checks that a part follows its input's dtype (CONTRACT.md: float64 calls expect float64 back). Its
# numbers are judged at float32's tolerance, because the contract leaves room for float32 rounding: a softmax taken
# in float32 and cast back answers a float64 call in float64 with float32's precision (4.3e-7 off, where float64's
# own spread is ~4e-15), and LayerNorm's eps (the handout's 1e-5, published models' 1e-6 or 1e-12) moves a float64
# block by up to 3.8e-5 (measured 2026-12-04). Both were a lost test under float64 tolerances of 1e-9 and 1e-7.
# No catalogued bug needs more: each moves the numbers 10x past float32's tolerance or more (tests/day13/test_graders.py).
_F32_VALUES = Tol(2e-5, 1e-4, "float32 rounding across matmul/einsum/loop/float64-inside: spread ~6e-7")
_F32_GRADS = Tol(5e-5, 2e-4, "float32 gradients through softmax: spread ~2e-6 of their scale")
VALUES = {"float32": _F32_VALUES, "float64": _F32_VALUES}
GRADS = {"float32": _F32_GRADS, "float64": _F32_GRADS}
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
# "Your function reacts to its input" (checks.changed, the gate of the property and self-consistency
# tests): two answers differ when some entry moves by more than this, relative to max(1, max|answer|).
# Measured on the hidden tests' probes over the reference, the correct variants and every mutant that
# keeps its points there (2026-12-01): the smallest move is 4.7e-2 (a block's outputs when its FFN
# weights or its later tokens change), the attention probes move by 0.5 or more; a function that
# ignores the changed input moves by exactly 0.
DEPENDS = Tol(1e-3, 0.0, "47x below the smallest move of real answers; any rounding is far smaller")
# "Each feature of the positional table is a wave along the positions": s[p+1] + s[p-1] = c·s[p]
# holds within this fraction of the table's largest entry. Measured: 1.5e-5 for every correct variant
# and positional mutant (T up to 200, d_model up to 512), 3.4e-4 for a table whose wavelengths are
# inverted (pos · 10000^(2i/d), float32 angles near 2e4 rad; a bug that keeps the module's points);
# random tables of any amplitude miss by 0.5 to 2.
WAVE = Tol(1e-2, 0.0, "30x above float32 sines of large angles; random tables miss by 0.5 or more")
# When a failing student's outputs are compared with a catalogue mutant's to name the
# misconception, the same implementation-spread argument applies.
MATCH = Tol(1e-4, 1e-3, "same bug, different but legitimate float32 arithmetic")
# For a mistake that moves the numbers by only a few times the tests' tolerance (catalogue.py, match=): 30x above
# the correct variants' largest float32 spread (3.1e-7, `grader killrate`), 14x below the smallest such move
# (the tanh GELU's 1.4e-4 on the block's outputs).
CLOSE_MATCH = Tol(1e-5, 0.0, "same bug, float32 arithmetic of another order; far below the mistake's own move")


# Contract modules whose outputs keep a tolerance of their own, and the kind the kill rate's spread
# measurement files them under (grader/admin/killrate.py, own_kinds): the positional table's, PE_TABLE.
OWN_KINDS = {"positional": "positional"}


def values(dtype: str) -> Tol:
    return for_dtype(VALUES, dtype)


def grads(dtype: str) -> Tol:
    return for_dtype(GRADS, dtype)


def main() -> int:
    """Print the measured spread of the correct variants per kind of value."""
    from grader.admin.killrate import measure_spread
    from grader.lesson import load_lesson

    for kind, (spread, where) in sorted(measure_spread(lesson=load_lesson("day13")).items()):  # a command: builds the value
        print(f"{kind:28s} {spread:.3e}   ({where})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

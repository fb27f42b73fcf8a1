"""Tasks 5-6: sinusoidal positional encoding (handout §8). Run only these with `pytest -m positional`."""
import math

import pytest
import torch

pytestmark = pytest.mark.positional

# Each hint is said only when the numbers show the fact it follows from (`when`); otherwise a failure says
# what differs, where, and what the numbers show, and names no cause.
SIN_COS_HINT = ("even features 2i hold sin(pos / 10000^(2i/d_model)), odd features 2i+1 hold cos of the SAME "
                "angle (handout §8).")
SIN_COS_FACTS = ("only_at.even.feature", "only_at.odd.feature")
ANGLE_HINT = ("the first pair of features is right and later pairs are not: their angle pos / 10000^(2i/d_model) "
              "depends on the exponent 2i/d_model, with 2i = 0, 2, 4, ..., and on the base 10000 (handout §8).")
ANGLE_FACTS = ("only_at.from.feature",)
TABLE = {"axes": ("position", "feature")}


def _handout_formula(T, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same), written out entry by entry."""
    rows = []
    for pos in range(T):
        row = []
        for two_i in range(0, d_model, 2):
            angle = pos / 10000 ** (two_i / d_model)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def test_s8_positions_0_and_1(positional, check):
    """§8 worked problem, d_model = 4: position 0 -> [0, 1, 0, 1], position 1 -> [0.841, 0.540, 0.010, 1.000]."""
    pe = positional.positional_encoding(3, 4)
    check.shape(pe, (3, 4), "§8: positional_encoding(3, 4)")
    check.close(pe[0], [0.0, 1.0, 0.0, 1.0], "§8: position 0", decimals=3, hint=SIN_COS_HINT, when=SIN_COS_FACTS,
                facts={"axes": ("feature",)})
    check.close(pe[1], [0.841, 0.540, 0.010, 1.000], "§8: position 1", decimals=3, hint=ANGLE_HINT,
                when=ANGLE_FACTS, facts={"axes": ("feature",)})


def test_s8_position_2_your_turn(positional, check):
    """§8 Your Turn: the first two values for position 2 are sin 2 ≈ 0.909 and cos 2 ≈ -0.416."""
    pe = positional.positional_encoding(3, 4)
    check.close(pe[2, :2], [0.909, -0.416], "§8: position 2, features 0 and 1", decimals=3, hint=SIN_COS_HINT,
                when=SIN_COS_FACTS, facts={"axes": ("feature",)})


def test_table_shape_dtype_and_formula(positional, check):
    """§8: a float32 (T, d_model) table that follows the formula for every position and feature."""
    pe = check.tensor(positional.positional_encoding(50, 16), "positional_encoding(50, 16)")
    check.shape(pe, (50, 16), "§8: positional_encoding(50, 16)")
    assert pe.dtype == torch.float32, f"§8: the table should be float32, got {pe.dtype}"
    check.close(pe, _handout_formula(50, 16), "§8: positional_encoding(50, 16) vs the formula", atol=1e-4,
                hint=ANGLE_HINT, when=ANGLE_FACTS, facts=TABLE)


def test_module_adds_the_table(positional, check):
    """§8: PositionalEncoding returns x + PE[:T] for x of shape (B, T, d_model)."""
    module = positional.PositionalEncoding(16, max_len=50)
    x = torch.randn(2, 7, 16, requires_grad=True)
    out = module(x)
    check.shape(out, (2, 7, 16), "§8: PositionalEncoding(16)(x) for x of shape (2, 7, 16)")
    assert out.dtype == x.dtype, (f"§8: a float32 x must come back float32, got {out.dtype}: the table is "
                                  "float32, as torch.zeros(T, d_model) gives (a float64 table, from numpy or "
                                  "torch.float64, turns x + PE into float64)")
    expected = x.detach().double() + _handout_formula(7, 16)
    _same_as_your_table(positional, check, out, x, 7, 16)
    check.close(out, expected, "§8: input = token_embedding + positional_encoding", atol=1e-4,
                hint="add the first T rows of the table to x (the same rows for every sentence in the batch).",
                when=("only_at.from.sentence", "only_at.last.sentence", "only_at.some.sentence"),
                facts={"axes": ("sentence", "token", "feature")})
    grad = torch.autograd.grad(out.sum(), x, allow_unused=True)[0] if out.requires_grad else None
    if grad is None:
        pytest.fail("§8: no gradient reaches x through PositionalEncoding: add the table to x itself, in torch",
                    pytrace=False)
    check.close(grad, torch.ones(2, 7, 16), "§8: the gradient of x + PE with respect to x is 1",
                hint="return x + PE[:T] (the table is a constant: it passes the gradient through unchanged).",
                when=("scaled",))


def test_module_default_max_len(positional, check):
    """§8: with the default max_len the module handles a sentence of 100 tokens."""
    out = positional.PositionalEncoding(8)(torch.zeros(1, 100, 8))
    _same_as_your_table(positional, check, out, torch.zeros(1, 100, 8), 100, 8)
    check.close(out[0], _handout_formula(100, 8), "§8: PositionalEncoding(8) on zeros of shape (1, 100, 8)",
                atol=1e-4, facts=TABLE)


def _same_as_your_table(positional, check, out, x, T, d_model):
    """The fact that the module adds exactly your own positional_encoding(T, d_model) to x: then a difference
    is the table's, which its own tests show."""
    try:
        own = positional.positional_encoding(T, d_model)
        added = (out.detach().double() - x.detach().double())
        if isinstance(own, torch.Tensor) and torch.allclose(added, torch.broadcast_to(own.double(), added.shape),
                                                            atol=1e-5):
            check.observe({"id": "matches_own", "part": "positional_encoding"})
    except Exception:  # noqa: BLE001 - your positional_encoding's own tests report its errors
        pass


def test_module_table_is_a_buffer(positional):
    """§8: the table is fixed, so it is a buffer (moves with .to(), never trained), not a parameter."""
    module = positional.PositionalEncoding(16, max_len=50)
    params = [name for name, _ in module.named_parameters()]
    assert not params, (f"§8: PositionalEncoding should have no trainable parameters, found {params}. "
                        "Hint: self.register_buffer('pe', table) instead of nn.Parameter.")
    shapes = [tuple(b.shape) for b in module.buffers()]
    # Axes of size 1 are a layout choice (the PyTorch tutorial keeps a (max_len, 1, d_model) table).
    assert any([n for n in shape if n != 1] == [50, 16] for shape in shapes), (
        f"§8: expected a buffer holding the (max_len, d_model) = (50, 16) table, found buffers of shapes {shapes}")

"""Shared set-up for the visible tests: your four files are imported from the folder above tests/.

Each test gets your module through a fixture (`self_attention`, `multihead`, `positional`, `block`),
so a file that does not import yet fails only the tests that need it, with the import error shown.
A task you have not written yet (the stub raises NotImplementedError) shows up as one short failure.
"""
import functools
import importlib
import sys
import traceback
from pathlib import Path

import pytest
import torch

STUDENT_DIR = Path(__file__).resolve().parents[1]
if str(STUDENT_DIR) not in sys.path:
    sys.path.insert(0, str(STUDENT_DIR))


# Library attention is not allowed (README, "Not allowed"). It is watched from here, before your files
# are imported, so that every use is seen however it was imported; the graders do the same.
_library_attention_used = set()


def _watch(owner, attribute, name):
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def watched(*args, **kwargs):
        _library_attention_used.add(name)
        return original(*args, **kwargs)

    setattr(owner, attribute, watched)


_watch(torch.nn.functional, "scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")
for _cls in ("MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerEncoderLayer",
             "TransformerDecoder", "TransformerDecoderLayer"):
    _watch(getattr(torch.nn, _cls), "__init__", f"torch.nn.{_cls}")


class _DoesNotImport:
    """Stands in for a module that raised on import: any use fails the test with the reason."""

    def __init__(self, name, error):
        self._message = (
            f"{name}.py does not import, so this test cannot run. Fix this first:\n"
            + "".join(traceback.format_exception_only(type(error), error))
        )

    def __getattr__(self, attribute):
        pytest.fail(self._message, pytrace=False)


def _student_module(name):
    try:
        return importlib.import_module(name)
    except Exception as error:  # a broken file must fail its tests, not stop the whole run
        return _DoesNotImport(name, error)


@pytest.fixture
def self_attention():
    return _student_module("self_attention")


@pytest.fixture
def multihead():
    return _student_module("multihead")


@pytest.fixture
def positional():
    return _student_module("positional")


@pytest.fixture
def block():
    return _student_module("block")


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    _library_attention_used.clear()
    try:
        outcome = yield
    except NotImplementedError as error:
        message = str(error) or "a task this test needs is not implemented yet"
        message += "\nWrite that task in your file, then run `make test` again."
    else:
        if not _library_attention_used:
            return outcome
        message = (f"your code used {', '.join(sorted(_library_attention_used))}, which is not allowed: computing "
                   "attention yourself is the point of Day 13, and the graders take this part's points for it. "
                   "Write the matrix products and the softmax yourself (handout §5, §7).")
    # Failing outside the except block keeps the report to one line, without the chained traceback.
    pytest.fail(message, pytrace=False)


class Check:
    """Comparisons whose failure message shows expected, got, where they differ, and a hint."""

    @staticmethod
    def tensor(value, what):
        if isinstance(value, torch.Tensor):
            return value.detach()
        pytest.fail(f"{what}: expected a torch.Tensor, got {type(value).__name__}", pytrace=False)

    @staticmethod
    def pair(result, what):
        """(out, weights) from a function that must return two tensors."""
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            pytest.fail(f"{what} must return a pair (out, weights), got {type(result).__name__}",
                        pytrace=False)
        return Check.tensor(result[0], f"{what}: out"), Check.tensor(result[1], f"{what}: weights")

    def shape(self, value, expected, what):
        value = self.tensor(value, what)
        assert tuple(value.shape) == tuple(expected), (
            f"{what}: expected shape {tuple(expected)}, got {tuple(value.shape)}")

    def close(self, got, expected, what, *, decimals=None, atol=1e-5, hint=""):
        """got ≈ expected; `decimals` compares at the handout's rounding (half a unit of the last place)."""
        got = self.tensor(got, what).to(torch.float64)
        expected = torch.as_tensor(expected, dtype=torch.float64)
        if decimals is not None:
            atol = 0.5 * 10 ** -decimals + 1e-9
        self.shape(got, expected.shape, what)
        gap = (got - expected).abs()
        bad = ~(gap <= atol)  # NaN counts as a mismatch
        if bad.any():
            where = tuple(int(i) for i in torch.nonzero(bad)[0])
            shown = 4 if decimals is None else decimals + 1
            message = (f"{what}\nexpected:\n{_fmt(expected, shown)}\ngot:\n{_fmt(got, shown)}\n"
                       f"first mismatch at index {where}: expected {expected[where].item():.{shown}f}, "
                       f"got {got[where].item():.{shown}f} (allowed gap {atol:.1g})")
            pytest.fail(message + (f"\nHint: {hint}" if hint else ""), pytrace=False)


def _fmt(tensor, decimals):
    return str(tensor.to(torch.float64).numpy().round(decimals))


@pytest.fixture
def check():
    return Check()


@pytest.fixture(autouse=True)
def _fixed_seed():
    # Random inputs are the same on every run, so a failure can be reproduced.
    torch.manual_seed(0)

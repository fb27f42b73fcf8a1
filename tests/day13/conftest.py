"""Fixtures of Day 13's own tests: its reference, imported as a namespace."""
import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "solutions" / "day13"
STUDENT_MODULES = ("self_attention", "multihead", "positional", "block")


def load_reference():
    """Import the reference modules without leaving them in sys.modules, where a student's could be."""
    saved = {name: sys.modules.pop(name) for name in STUDENT_MODULES if name in sys.modules}
    sys.path.insert(0, str(REFERENCE_DIR))
    # No __pycache__ in solutions/: the tree stays as committed (test_execute checks it) wherever
    # bytecode is written, as in CI.
    dont_write, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        return SimpleNamespace(**{name: importlib.import_module(name) for name in STUDENT_MODULES})
    finally:
        sys.dont_write_bytecode = dont_write
        sys.path.remove(str(REFERENCE_DIR))
        for name in STUDENT_MODULES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


@pytest.fixture(scope="session")
def ref():
    """The reference modules (solutions/day13), as a namespace: ref.self_attention, ref.multihead, ..."""
    return load_reference()

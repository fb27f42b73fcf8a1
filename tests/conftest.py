"""Fixtures shared by the kit's tests."""
import importlib
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "solutions" / "day13"
STUDENT_MODULES = ("self_attention", "multihead", "positional", "block")
# fixtures/ holds submissions, not the kit's tests: collecting it would import the hostile conftest.py
# into this run (and write its bytecode beside the fixture).
collect_ignore = ["fixtures"]

# `make test` runs this suite from inside make; a test that runs make itself (its plan, a release's
# `make test`) must see what an instructor's top-level make sees, not a sub-make's directory lines,
# jobserver or flags inherited from whatever started the suite.
for _variable in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"):
    os.environ.pop(_variable, None)


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


@pytest.fixture(scope="module", autouse=True)
def _module_start_for_leftover_checks():
    """Mark when this test module began, for engine_helpers.descendants (see MODULE_STARTED there)."""
    fixtures = str(Path(__file__).resolve().parent / "fixtures")
    if fixtures not in sys.path:
        sys.path.insert(0, fixtures)
    import engine_helpers

    engine_helpers.MODULE_STARTED[0] = engine_helpers.now_ticks() - 1
    yield

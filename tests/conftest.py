"""Fixtures shared by the kit's tests."""
import os
import sys
from pathlib import Path

import pytest

# fixtures/ holds submissions, not the kit's tests: collecting it would import the hostile conftest.py
# into this run (and write its bytecode beside the fixture).
collect_ignore = ["fixtures"]

# `make test` runs this suite from inside make; a test that runs make itself (its plan, a release's
# `make test`) must see what an instructor's top-level make sees, not a sub-make's directory lines,
# jobserver or flags inherited from whatever started the suite.
for _variable in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"):
    os.environ.pop(_variable, None)
# ...but the venv running this suite (.venv, or .venv-3.12 under `make test-python`) is the one every
# make it starts uses: the Makefile takes VENV from the environment.
if sys.prefix != sys.base_prefix:
    os.environ["VENV"] = sys.prefix


@pytest.fixture(scope="module", autouse=True)
def _module_start_for_leftover_checks():
    """Mark when this test module began, for engine_helpers.descendants (see MODULE_STARTED there)."""
    fixtures = str(Path(__file__).resolve().parent / "fixtures")
    if fixtures not in sys.path:
        sys.path.insert(0, fixtures)
    import engine_helpers

    engine_helpers.MODULE_STARTED[0] = engine_helpers.now_ticks() - 1
    yield

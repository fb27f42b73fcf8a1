"""Run the hidden tests under real pytest: `pytest grader/day13/tests --submission PATH`.

Batch grading does not use pytest (grader/judging/score.py calls the same test functions directly);
this is for an instructor debugging one submission, or a new hidden test, with pytest's output.
The submission runs IN THIS PROCESS, next to the reference: use it on code you trust (ours,
a mutant, a submission you have read). Untrusted work goes through `python -m grader grade`,
whose sandbox is started before anything secret is loaded. Without --submission the tests run
on the reference, which must pass them all.
"""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def pytest_addoption(parser):
    group = parser.getgroup("day13", "Day 13 hidden graders")
    group.addoption("--submission", default=None, metavar="PATH",
                    help="folder of the submission to test (default: the reference in solutions/day13)")


def pytest_configure(config):
    for component in ("self_attention", "multihead", "positional", "block"):
        config.addinivalue_line("markers", f"{component}: hidden tests of {component}.py")


def pytest_collection_modifyitems(items):
    for item in items:
        name = Path(str(item.fspath)).stem  # test_<component>
        if name.startswith("test_"):
            item.add_marker(getattr(pytest.mark, name[len("test_"):]))


@pytest.fixture(scope="session")
def lesson():
    """The lesson value, built here once: a conftest is an entry point (pytest is the command)."""
    from grader.lesson import load_lesson

    return load_lesson("day13")


@pytest.fixture(scope="session")
def reference(lesson):
    from grader.judging.score import reference_adapter

    return reference_adapter(lesson=lesson)


@pytest.fixture(scope="session")
def student(request, lesson):
    from grader.running.calls import InProcessTransport
    from grader.day13.adapter import Adapter

    option = request.config.getoption("--submission")
    path = Path(option) if option else ROOT / "solutions" / "day13"
    if not path.is_dir():
        raise pytest.UsageError(f"--submission {option}: not a folder (unpack a .zip first)")
    return Adapter(InProcessTransport(path, lesson=lesson))

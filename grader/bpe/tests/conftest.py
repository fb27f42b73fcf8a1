"""Run the BPE hidden tests under real pytest: `pytest grader/bpe/tests --submission PATH`.

Batch grading does not use pytest (grader/judging/score.py calls the same test functions directly); this
is for an instructor debugging one submission, or a new hidden test, with pytest's output. The
submission runs IN THIS PROCESS, next to the reference: use it on code you trust (ours, a mutant, a
submission you have read). Untrusted work goes through `python -m grader grade --lesson bpe`. Without
--submission the tests run on the reference, which must pass them all.
"""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _lesson():
    from grader.lesson import load_lesson

    return load_lesson("bpe")


def pytest_addoption(parser):
    group = parser.getgroup("bpe", "BPE hidden graders")
    group.addoption("--submission", default=None, metavar="PATH",
                    help="folder of the submission to test (default: the reference in solutions/bpe)")


def pytest_configure(config):
    for component in _lesson().modules:
        config.addinivalue_line("markers", f"{component}: hidden tests of {component}.py")


def pytest_collection_modifyitems(items):
    for item in items:
        name = Path(str(item.fspath)).stem  # test_<component>
        if name.startswith("test_"):
            item.add_marker(getattr(pytest.mark, name[len("test_"):]))


@pytest.fixture(scope="session")
def reference():
    from grader.judging.score import reference_adapter

    return reference_adapter(lesson=_lesson())


@pytest.fixture(scope="session")
def student(request):
    from grader.running.calls import InProcessTransport

    lesson = _lesson()
    option = request.config.getoption("--submission")
    path = Path(option) if option else lesson.solutions
    if not path.is_dir():
        raise pytest.UsageError(f"--submission {option}: not a folder (unpack a .zip first)")
    return lesson.adapter()(InProcessTransport(path, lesson=lesson))

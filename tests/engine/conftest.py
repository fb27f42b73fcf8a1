"""Fixtures of the engine's tests: the neutral lessons they go through (tests/fixtures/lessons/)."""
import dataclasses
import sys
from pathlib import Path

import pytest

from grader.lesson import load_lesson

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))
from engine_helpers import TOY  # noqa: E402


@pytest.fixture(scope="session")
def toy():
    """The toy lesson's value, built once for the whole run: what it derives (its catalogue's mutant
    folders, its reference's answers) is shared by every test that reads it, and removed at the end."""
    lesson = load_lesson(str(TOY))
    yield lesson
    lesson.cleanup()


@pytest.fixture(scope="session")
def toy_with_deliverables(toy):
    """The toy with deliverables (a plot, notes, a README: its deliverable_checks.py), for the engine's tests
    of what shows, compares or checks a lesson's deliverables. The toy itself declares none, so grading it
    (and every total the other tests assert) has no deliverables part."""
    return dataclasses.replace(toy, deliverables_checks=TOY / "deliverable_checks.py")

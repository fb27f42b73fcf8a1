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
# The suite's torch work is on tensors of a few dozen numbers. With a thread per core in each parallel
# worker, and in every process a test starts (a release's `make test`, a notebook's kernel, a grading run),
# ops wait for threads that compete for the same cores: one visible-parity slice took 60 s of CPU against
# 34 s with one thread. One thread computes the same numbers; a value set by whoever runs the suite stays.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A release's `make test` starts a warm checker (grader/student/warm.py) that waits 15 minutes for the next
# run; the suite's folders get no next run. tests/engine/test_warm_check.py and the release tests turn it on.
os.environ["WARM"] = "0"


def _engine_helpers():
    fixtures = str(Path(__file__).resolve().parent / "fixtures")
    if fixtures not in sys.path:
        sys.path.insert(0, fixtures)
    import engine_helpers

    return engine_helpers


@pytest.fixture(scope="module", autouse=True)
def _module_start_for_leftover_checks():
    """Mark when this test module began, for engine_helpers.descendants (see MODULE_STARTED there)."""
    engine_helpers = _engine_helpers()
    engine_helpers.MODULE_STARTED[0] = engine_helpers.now_ticks() - 1
    yield


@pytest.fixture(scope="session", autouse=True)
def _close_kept_zygotes_at_the_end():
    """The zygotes this process kept for its grading runs (engine_helpers.kept_zygotes) end with the session."""
    yield
    _engine_helpers().close_kept_zygotes()


# -- the order a parallel run (`make test`: -n auto --dist loadfile) hands its work out in ------------------
# xdist's loadfile keeps a file's tests in one worker and, by default, hands out the files with the most tests
# first, so a long file of few tests (the visible-parity test, the notebook's nbgrader runs) starts last and
# the other workers wait for it. LongestFirst hands out the longest work first instead, and lets the files in
# EACH_TEST_ALONE spread their tests over the workers (their module fixtures are cheap to build twice), and the
# tests in ALONE_TESTS run beside the rest of their file.

# Seconds each unit of work (a file, or one test of a file: path::test name) takes in a whole-suite run on a
# quiet 2-core machine: per-file totals of two whole-suite runs (main 682ad57, 2026-12-05, on a shared machine
# with a load of 5-7), each scaled to the 381.5 s a quiet run of that commit took. Only their order matters, and
# a file missing here only starts later. For a file in EACH_TEST_ALONE, a path's figure is what each of its tests
# takes; a test in ALONE_TESTS has its own figure, and its file's figure is what the rest of the file takes.
LONGEST = {
    "tests/day13/test_day13_release.py": 53,
    "tests/day13/test_visible_tests.py": 52,
    "tests/day13/test_nbgrader_course.py::test_the_readme_course_gives_a_correct_student_full_marks": 48,
    "tests/day13/test_day13_workflows.py": 48,
    "tests/day13/test_skeletons.py": 47,
    "tests/day13/test_diagnostics_audit.py": 42,  # two module fixtures: every mistake graded hidden and visible
    "tests/engine/test_nbgrader_autograde.py": 37,  # one autograde of 15 notebooks, one kept sandbox
    "tests/day13/test_graders.py": 37,
    "tests/engine/test_run.py": 36,
    "tests/day13/test_nbgrader_course.py": 30,  # the steps left out, on one generated course
    "tests/engine/test_sandbox.py": 29,
    "tests/day13/test_freedoms.py": 29,
    "tests/engine/test_bench.py": 27,
    "tests/engine/test_notebook.py::test_notebook_cells_fail_exactly_as_the_py_tests_do": 24,
    "tests/bpe/test_hidden_under_pytest.py": 24,
    "tests/kit/test_lessons_side_by_side.py": 22,
    "tests/day13/test_standin_isolation.py": 18,
    "tests/engine/test_student_feedback.py": 18,  # its visible runs forked from the kept pytest server
    "tests/day13/test_torch_audit.py": 16,
    "tests/engine/test_intake.py": 16,
    "tests/day13/test_heatmap.py": 15,
    "tests/bpe/test_gradescope.py": 14,
    "tests/day13/test_demo_audiences.py": 14,
    "tests/engine/test_gradescope.py": 14,
    "tests/bpe/test_release.py": 14,
    "tests/engine/test_checkout.py": 13,
    "tests/engine/test_second_lesson.py": 12,
    "tests/engine/test_visible_parity.py": 8,  # each slice
}
EACH_TEST_ALONE = {"tests/engine/test_visible_parity.py", "tests/engine/test_notebook.py"}
# Tests that use none of their file's module fixtures and take as long as the rest of their file: each is a unit
# of its own, so that another worker takes the rest of the file at the same time.
ALONE_TESTS = {"tests/day13/test_nbgrader_course.py::test_the_readme_course_gives_a_correct_student_full_marks"}


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the test itself (EACH_TEST_ALONE, ALONE_TESTS)."""
    path = nodeid.split("::", 1)[0]
    return nodeid if path in EACH_TEST_ALONE or nodeid.split("[", 1)[0] in ALONE_TESTS else path


def expected_seconds(unit: str) -> float:
    """What LONGEST says a unit of work (a file, or one test of a file in EACH_TEST_ALONE) takes; 0 unknown."""
    return max((seconds for name, seconds in LONGEST.items() if unit == name or unit.startswith(name + "::")),
               default=0)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            # The longest waiting unit goes next; among equals, xdist's own order (most tests first).
            longest = max(self.workqueue, key=expected_seconds)
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)

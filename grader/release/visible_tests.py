"""A lesson's visible tests as a student gets them: its tests folder and pytest.ini, with the engine's
student-side feedback package (grader/student/) shipped beside them as tests/_feedback/.

The release and the notebook's nbgrader source both write them, so they live below both."""
from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What every lesson's visible tests share (grader/student/, with the engine's fact finder inside it): the
# release puts it beside the lesson's tests as tests/_feedback/, so a student's folder needs no kit.
STUDENT_FEEDBACK = ROOT / "grader" / "student"
DIAGNOSE = ROOT / "grader" / "judging" / "diagnose.py"
# The engine's readers the students' side shares, standard library only: of a notebook's IPython syntax
# (tools/ci_feedback.py reads notebooks with it) and of which names a file takes from a sibling (the plugin).
SHARED = (DIAGNOSE, ROOT / "grader" / "intake" / "magics.py", ROOT / "grader" / "running" / "siblings.py")
FEEDBACK_FOLDER = "_feedback"

SKIP_DIRS = {"__pycache__", ".pytest_cache", ".ipynb_checkpoints"}
SKIP_SUFFIXES = {".pyc", ".pyo"}


def _copy_tree(source: Path, target: Path) -> None:
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if SKIP_DIRS.intersection(relative.parts) or path.suffix in SKIP_SUFFIXES or path.is_symlink():
            continue
        if path.is_dir():
            (target / relative).mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target / relative)


def feedback_files() -> list[Path]:
    """What tests/_feedback/ holds: the student-side package's modules and the engine files it shares."""
    return [*sorted(STUDENT_FEEDBACK.glob("*.py")), *SHARED]


def ship_feedback(tests: Path) -> None:
    """Write tests/_feedback/: the engine's student-side package (grader/student/*.py) and the engine files it
    shares (SHARED: diagnose.py, magics.py, siblings.py)."""
    target = tests / FEEDBACK_FOLDER
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for path in feedback_files():
        shutil.copyfile(path, target / path.name)


def write_visible_tests(folder: Path, *, lesson) -> Path:
    """`folder`/tests and `folder`/pytest.ini as a student gets them: the lesson's visible tests, with the
    feedback package beside them. Returns the tests folder (the kit runs the visible tests from here)."""
    tests = folder / "tests"
    _copy_tree(lesson.assignment / "tests", tests)
    shutil.copyfile(lesson.assignment / "pytest.ini", folder / "pytest.ini")
    ship_feedback(tests)
    return tests

"""Every lesson is reachable the same way. In a copy of the kit with the toy lesson beside Day 13 (and
the kit's other lessons: grader/toy/ next to grader/day13/ and grader/bpe/), the Makefile's targets work
on the kit's default lesson (pyproject.toml, [tool.grader] default_lesson), `LESSON=toy` or `LESSON=bpe`
chooses another, `grader stubs --check` passes for each (the toy commits no stub: its release generates
them), `make test` passes the tests that walk every lesson, and with no default a plain target stops, saying
which lessons there are and how to choose, without a traceback.

The copy is the kit's tracked files as they are on disk, with the kit's .venv linked in (so `make` sets up
nothing); the real grader/ is never touched."""
from __future__ import annotations

import csv
import os
import re
import shutil
import sys
import subprocess
import tempfile
from pathlib import Path

import pytest

from grader import lesson as lessons
from grader.release import stubs

KIT = Path(__file__).resolve().parents[2]
TOY = KIT / "tests" / "fixtures" / "lessons" / "toy"
# Two students of the demo class: one full marks, one with a catalogue bug.
STUDENTS = ("ada_reference", "chloe_no_scale")


def _make(kit: Path, *args: str, timeout: int = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    # STAMP= : the copy shares the kit's .venv, already set up; `make setup` run from the copy (its
    # pyproject.toml newer than the venv's stamp) would point the kit's editable install at the copy.
    env = {**{k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL")}, **(env or {})}
    return subprocess.run(["make", "--no-print-directory", "STAMP=", *args], cwd=kit, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _installed_grader() -> str:
    """Where the kit's venv finds `grader` from outside any kit folder (its editable install)."""
    done = subprocess.run([sys.executable, "-c", "import grader; print(grader.__file__)"],
                          cwd="/", capture_output=True, text=True, timeout=120)
    return done.stdout.strip() if done.returncode == 0 else ""


INSTALLED_BEFORE = _installed_grader()


@pytest.fixture(scope="module")
def kit():
    root = Path(tempfile.mkdtemp(prefix="kit-two-lessons-"))
    os.chmod(root, 0o755)  # the sandbox's uid imports the copy's grader from here
    copy = root / "kit"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=KIT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode("utf-8", "surrogateescape").split("\0")):
        source = KIT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    shutil.copytree(TOY, copy / "grader" / "toy", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / ".venv").symlink_to(sys.prefix)  # the venv running this suite
    class_folder = root / "class"
    for student in STUDENTS:
        shutil.copytree(KIT / "demo" / "class" / student, class_folder / student)
    try:
        yield copy
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_copy_has_several_lessons_and_the_default_is_day13(kit):
    assert {"day13", "toy"} <= set(lessons.lesson_names(kit / "grader")) == set(lessons.lesson_names()) | {"toy"}
    assert lessons.default_lesson(kit / "grader") == "day13"


def test_make_grade_grades_the_default_lesson(kit):
    out = kit.parent / "out"
    done = _make(kit, "grade", f"SUBMISSIONS={kit.parent / 'class'}", f"OUT={out}", "JOBS=1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    assert set(rows) == set(STUDENTS)
    day13 = lessons.load_lesson("day13")
    assert all(part in rows["ada_reference"] for part in day13.components)
    assert float(rows["ada_reference"]["total"]) == float(rows["ada_reference"]["max_total"]) > 0
    assert float(rows["chloe_no_scale"]["total"]) < float(rows["chloe_no_scale"]["max_total"])


def test_make_release_builds_the_default_and_lesson_toy_the_toys(kit):
    done = _make(kit, "release")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (kit / "dist" / "day13.zip").is_file() and (kit / "dist" / "day13" / "CONTRACT.md").is_file()
    assert not (kit / "dist" / "toy").exists()
    done = _make(kit, "release", "LESSON=toy")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    toy = kit / "dist" / "toy"
    assert (kit / "dist" / "toy.zip").is_file()
    for part in ("activations", "classifier"):
        solution = (TOY / "solutions" / f"{part}.py").read_text(encoding="utf-8")
        assert (toy / f"{part}.py").read_text(encoding="utf-8") == stubs.make_stub(solution)
    assert (toy / "toy.ipynb").is_file() and not (toy / "self_attention.py").exists()
    for other in set(lessons.lesson_names()) - {"day13"}:  # the kit's own other lessons (grader/bpe/)
        done = _make(kit, "release", f"LESSON={other}")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        released = lessons.load_lesson(other)
        assert (kit / "dist" / f"{other}.zip").is_file() and (kit / "dist" / other / released.notebook).is_file()
        for module in released.modules:
            assert "raise NotImplementedError" in (kit / "dist" / other / f"{module}.py").read_text(encoding="utf-8")


def _grader(kit: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m grader ARGS` run in the copy, which imports the copy's grader (the folder it runs in comes first)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(kit / ".venv" / "bin" / "python"), "-m", "grader", *args], cwd=kit, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_stubs_check_passes_for_every_lesson_and_an_unknown_one_is_told_them_all(kit):
    """Day 13 and BPE commit their stubs, the toy none (its release generates them): `stubs --check` passes for
    each, and for the default; a lesson that is not there is answered with every lesson that is."""
    names = lessons.lesson_names(kit / "grader")
    assert "toy" in names and len(names) >= 3
    for chosen in (*[["--lesson", name] for name in names], []):
        done = _grader(kit, "stubs", "--check", *chosen)
        assert done.returncode == 0, (chosen, done.stdout[-2000:] + done.stderr[-2000:])
        if chosen == ["--lesson", "toy"]:
            assert "no stub committed in grader/toy/assignment" in done.stdout, done.stdout
    assert not list((kit / "grader" / "toy" / "assignment").glob("*.py")), "the check wrote a stub"
    done = _grader(kit, "release", "--lesson", "no-such-lesson", "--out", str(kit.parent / "nowhere"))
    assert done.returncode == 2 and f"(there are: {', '.join(names)})" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (kit.parent / "nowhere").exists()


# The kit's tests that walk every lesson present (its boundary, its values, its imports, the lesson-as-a-value
# rule, its stubs, its engine tests' neutrality, in which the toy's copy under grader/ stays the fixture's),
# run by `make test` in the copy: a third lesson beside the others breaks none. `-k` is given the files' names
# whole: a shorter word would match tests elsewhere too (a test that runs pytest itself, inheriting the filter).
EVERY_LESSON_TESTS = ("test_lesson_boundary.py", "test_lesson.py", "test_imports.py", "test_ambient_lesson.py",
                      "test_stubs.py", "test_engine_tests_are_neutral.py")


def test_make_test_passes_the_tests_that_walk_every_lesson(kit):
    chosen = " or ".join(EVERY_LESSON_TESTS)
    # The other files are not collected at all: importing every test module of the suite (torch, each lesson,
    # their fixtures) only to deselect its tests was half of this test's CPU.
    others = sorted(str(path) for path in (kit / "tests").rglob("test_*.py")
                    if path.name not in EVERY_LESSON_TESTS and "fixtures" not in path.relative_to(kit / "tests").parts)
    env_options = f'-p no:xdist -p no:cacheprovider -rA -k "{chosen}" ' + " ".join(f"--ignore={path}" for path in others)
    done = _make(kit, "test", "TEST_WORKERS=0", env={"PYTEST_ADDOPTS": env_options}, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    ran = re.search(r"(\d+) passed", done.stdout)
    assert ran and int(ran.group(1)) >= 20 and " failed" not in done.stdout, done.stdout[-2000:]
    # The toy under grader/ was among the lessons walked, and an engine test that loads the fixture toy by its
    # path was checked against the copy's lessons.
    for walked in ("test_stubs.py::test_a_lesson_commits_every_stub_byte_for_byte_or_none[toy]",
                   "test_engine_tests_are_neutral.py::test_engine_test_names_no_real_lesson[test_workflows.py]"):
        assert f"PASSED tests/engine/{walked}" in done.stdout, walked


def test_with_no_default_a_plain_target_says_which_lessons_there_are_and_how_to_choose(kit):
    settings = kit / "pyproject.toml"
    kept = settings.read_text(encoding="utf-8")
    settings.write_text(re.sub(r"(?m)^default_lesson = .*\n", "", kept), encoding="utf-8")
    try:
        for target in ("grade", "release", "gradescope"):
            done = _make(kit, target, f"OUT={kit.parent / 'out-none'}", timeout=300)
            said = done.stderr
            assert done.returncode != 0, (target, done.stdout[-2000:])
            names = ", ".join(lessons.lesson_names(kit / "grader"))
            assert f"({names})" in said and "LESSON=NAME" in said and "--lesson" in said, (target, said)
            assert "Traceback" not in said, (target, said)
        done = _make(kit, "release", "LESSON=toy", timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        settings.write_text(kept, encoding="utf-8")
    assert not list((kit.parent / "out-none").glob("*/record.json")), "nothing was graded"


def test_the_copy_never_becomes_the_kits_installed_grader(kit):
    """After every make run above, the kit's venv imports the grader it imported before, not the copy's."""
    assert _installed_grader() == INSTALLED_BEFORE
    assert not _installed_grader().startswith(str(kit.parent))

"""The nbgrader route in a real nbgrader course: the hidden tests graded by the kit's autograde step
(grader/release/nbgrader_autograde.py) in nbgrader's process, never in the student's kernel.

Hostile notebooks sit beside honest ones in one autograde run: a cell faking the kit's modules, a cell
patching torch or the kit, a cell that sleeps, a cell that exits. None gains a point over `grader grade`
of the same notebook, and the honest notebooks keep full marks. The course is the toy lesson's (found by path,
named to the kit's step in the course's config)."""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import types
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY, kept_zygotes, shared_config  # noqa: E402

from grader.lesson import load_lesson
from grader.release import notebook

from grader.running import grade as run

from grader.release import stubs  # noqa: E402
from grader.sandbox import DEFAULT_CONFIG  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage
CONFIG = shared_config(call_timeout=5.0)
# The course's own call timeout (HiddenTests.call_timeout): the notebook whose cell sleeps waits it out on first use
# of each part, twice, so the kit's 5 s default would make this module wait 20 s for that notebook alone.
COURSE_CALL_TIMEOUT = 2.0
needs_nbgrader = pytest.mark.skipif(shutil.which("nbgrader", path=str(VENV_BIN)) is None,
                                    reason="nbgrader is in the dev extra: `pip install -e .[dev]`")

# --------------------------------------------------------------------------- hostile cells

# Puts a fake grader.hidden_cell (and a fake grader) in the kernel: the old in-kernel hidden cells
# imported `hidden_test` from there after the student's cells had run.
FAKE_KIT_MODULE = """\
import sys, types
_fake = types.ModuleType("grader.hidden_cell")
_fake.hidden_test = lambda *args, **kwargs: print("passed")
sys.modules["grader"] = types.ModuleType("grader")
sys.modules["grader"].hidden_cell = _fake
sys.modules["grader.hidden_cell"] = _fake
def hidden_test(*args, **kwargs):
    print("passed")"""
# Makes every comparison pass in the process that runs it, and the kit's own checks too where importable.
PATCH_TORCH_AND_KIT = """\
import torch
torch.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None
try:
    import grader.judging.assertions, grader.judging.score
    grader.judging.assertions.close = lambda *args, **kwargs: None
    grader.judging.score.grade_in_process = lambda *args, **kwargs: None
except Exception:
    pass"""
SLEEPS = "import time\ntime.sleep(30)"
# Leaves a mark wherever it runs with the machine's files in reach (a kernel); the sandbox has none.
MARKS_WHERE_IT_RUNS = """\
try:
    with open({path!r}, "a") as _mark:
        _mark.write("ran\\n")
except Exception:
    pass"""
EXITS = "import os\nos._exit(0)"


def _solution_code(folder: Path, module: str) -> str:
    """`module` of `folder` (the reference or a mutant) as a student types it into its cell."""
    _, imports, code = notebook._split((folder / f"{module}.py").read_text(encoding="utf-8"), lesson=LESSON)
    code = "\n".join(line for line in code.split("\n") if not (stubs.BEGIN.match(line) or stubs.END.match(line)))
    return "\n".join(imports) + "\n\n" + code


def _filled(base, folder: Path | None, extra: str | None = None, at: int = 3):
    """A copy of `base` with `folder`'s code in the solution cells and, when given, one student cell
    `extra` inserted at position `at` (after the set-up cells, before the first part)."""
    nb = nbformat.from_dict(json.loads(json.dumps(base)))
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if folder is not None and grade_id.startswith("solution_"):
            cell.source = _solution_code(folder, grade_id.removeprefix("solution_"))
    if extra is not None:
        cell = nbformat.v4.new_code_cell(extra)
        cell.id = "student-extra"
        nb.cells.insert(at, cell)
    return nb


def _jupyter_env(home: Path) -> dict:
    kernels = home / "jupyter" / "kernels" / "python3"
    kernels.mkdir(parents=True, exist_ok=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (kit venv)", "language": "python"}), encoding="utf-8")
    env = {**os.environ, "JUPYTER_PATH": str(home / "jupyter"), "JUPYTER_CONFIG_DIR": str(home / "jupyter-config"),
           "JUPYTER_DATA_DIR": str(home / "jupyter-data"), "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)  # the kit is importable because it is installed in its venv, nowhere else
    return env


def _nbgrader(course: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(VENV_BIN / "nbgrader"), *args], cwd=course, env=_jupyter_env(course),
                            capture_output=True, text=True, timeout=1800)
    if check:
        assert result.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _course(tmp: Path, *, kit_step: bool = True) -> Path:
    course, name = tmp / "course", LESSON.name
    (course / "source").mkdir(parents=True)
    lines = ["c = get_config()", f"c.CourseDirectory.course_id = {name!r}"]
    if kit_step:
        lines += ["from grader.release.nbgrader_autograde import use_the_kit", f"use_the_kit(c, lesson={LESSON.ref!r})",
                  f"c.HiddenTests.sandbox_uid_base = {CONFIG.uid_base}",
                  f"c.HiddenTests.call_timeout = {COURSE_CALL_TIMEOUT}"]
    (course / "nbgrader_config.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    notebook.write_nbgrader_source(course / "source" / name, lesson=LESSON)
    _nbgrader(course, "generate_assignment", name, "--force")
    return course


def _released(course: Path):
    return nbformat.read(course / "release" / LESSON.name / LESSON.notebook, as_version=4)


def _submit(course: Path, cases: dict) -> None:
    for student, nb in cases.items():
        notebook.write(nb, course / "submitted" / student / LESSON.name / LESSON.notebook)


def _gradebook_points(course: Path, students) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {s: round(gradebook.find_submission(LESSON.name, s).score, 4) for s in students}


def _grader_points(cases: dict, tmp: Path) -> dict[str, dict[str, float]]:
    """`python -m grader grade` of the same notebooks as a class folder: row -> part -> points, from its grades.csv."""
    folder = tmp / "class"
    folder.mkdir()
    for student, nb in cases.items():
        notebook.write(nb, folder / f"{student}.ipynb")
    out = tmp / "out"
    assert run.main(submissions=folder, out=out, jobs=2, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    with open(out / "grades.csv", encoding="utf-8", newline="") as f:
        return {row["submission"]: {part: float(row[part]) for part in LESSON.modules} for row in csv.DictReader(f)}


# --------------------------------------------------------------------------- one course, one autograde

# Every catalogue mutant of the toy (over both parts), and correct implementations that differ from the
# reference in how they compute (the toy has no variants folder: these are honest students of it, who import
# softmax by name, as a notebook's one namespace allows; written for the similarity tests).
NBGRADER_MUTANTS = ("act.no_shift", "act.wrong_dim", "cls.returns_logits")
NBGRADER_VARIANTS = ("ben", "dev", "fay")
TOY_STUDENTS = ROOT / "tests" / "fixtures" / "toy_similarity"
HOSTILE = ("fake_kit", "patches", "sleeps", "exits")
# The notebooks `grader grade` grades too, to compare: all but the hostile ones that get 0 and `honest`.
BY_GRADER = ("reference", "blank", *(f"variant_{v}" for v in NBGRADER_VARIANTS),
             *(bug.replace(".", "_") for bug in NBGRADER_MUTANTS), "fake_kit_correct")


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    LESSON.cleanup()  # the catalogue's mutant folders, built for these tests


@pytest.fixture(scope="module")
def autograded(tmp_path_factory):
    """One course and ONE `nbgrader autograde` of every notebook the tests below judge (an autograde grades
    each notebook on its own: a notebook's points do not depend on who else was submitted), and one `grader
    grade` of the notebooks the tests compare with it, as a class folder. Returns what the tests read: the course, the notebooks,
    autograde's output, and the points per part in the gradebook and (for BY_GRADER) in grader grade's csv."""
    from grader.admin import killrate

    tmp = tmp_path_factory.mktemp("autograded")
    catalogue = killrate.catalogue(lesson=LESSON)
    course = _course(tmp)
    released = _released(course)
    mark = tmp / "a-kernel-ran-the-students-code"
    variants = {f"variant_{path.name}": path for path in sorted(TOY_STUDENTS.iterdir()) if path.name in NBGRADER_VARIANTS}
    cases = {"reference": _filled(released, LESSON.solutions), "blank": _filled(released, None),
             **{name: _filled(released, path) for name, path in variants.items()},
             **{bug.replace(".", "_"): _filled(released, catalogue.mutant_dir(bug)) for bug in NBGRADER_MUTANTS},
             "honest": _filled(released, LESSON.solutions, MARKS_WHERE_IT_RUNS.format(path=str(mark))),
             "fake_kit": _filled(released, None, FAKE_KIT_MODULE),
             "fake_kit_correct": _filled(released, LESSON.solutions, FAKE_KIT_MODULE),
             "patches": _filled(released, None, PATCH_TORCH_AND_KIT),
             "sleeps": _filled(released, None, SLEEPS),
             "exits": _filled(released, None, EXITS)}
    _submit(course, cases)
    graded = _nbgrader(course, "autograde", LESSON.name, "--force")
    from nbgrader.api import Gradebook

    points = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        max_score = gradebook.find_assignment(LESSON.name).max_score
        for student in cases:
            totals = defaultdict(float)
            for nb in gradebook.find_submission(LESSON.name, student).notebooks:
                for grade in nb.grades:
                    if grade.name.startswith("hidden-"):
                        totals[grade.name.split("-")[1]] += grade.score
            points[student] = {part: round(totals[part], 4) for part in LESSON.modules}
    return types.SimpleNamespace(course=course, released=released, cases=cases, variants=variants, mark=mark,
                                 said=graded.stdout + graded.stderr, points=points, max_score=max_score,
                                 totals=_gradebook_points(course, cases), catalogue=catalogue,
                                 grader=_grader_points({s: nb for s, nb in cases.items() if s in BY_GRADER}, tmp))


@needs_nbgrader
def test_hostile_cells_gain_nothing_and_cost_honest_students_nothing(autograded):
    """Hostile notebooks beside honest ones in one autograde run: `honest` carries a cell that leaves a mark
    wherever it runs with the machine's files in reach, `reference` is the same code without it."""
    full = sum(notebook.component_points(lesson=LESSON).values())
    points = autograded.totals
    assert points["honest"] == points["reference"] == full, points
    # The students' code ran in no kernel, and each notebook was graded once (in the sandbox, by the kit).
    assert not autograded.mark.exists()
    assert autograded.said.count("Graded the hidden tests of") == len(autograded.cases)
    # ...by one sandbox kept from notebook to notebook (nbgrader grades them in name order: `exits`, `fake_kit`
    # and `patches` before `honest` and `reference`), which no hostile notebook broke or got replaced.
    assert autograded.said.count("the sandbox started") == 1, autograded.said
    assert autograded.said.count("the sandbox kept from the last notebook") == len(autograded.cases) - 1
    for hostile in HOSTILE:
        assert points[hostile] == 0, (hostile, points)
    # The sleeping notebook was stopped at the course's call timeout, not the kit's default.
    slept = nbformat.read(autograded.course / "autograded" / "sleeps" / LESSON.name / LESSON.notebook, as_version=4)
    said = "".join(str(out.get("text", "")) + "\n".join(out.get("traceback", []))
                   for cell in slept.cells for out in cell.get("outputs", []))
    assert f"no answer within {COURSE_CALL_TIMEOUT:g} s" in said, said[-3000:]
    # A correct notebook with the fake-module cell: what `grader grade` gives it, no more.
    assert points["fake_kit_correct"] == round(sum(autograded.grader["fake_kit_correct"].values()), 4)


@needs_nbgrader
def test_nbgrader_autograde_gives_the_points_grader_grade_gives(autograded):
    """One nbgrader course, one autograde run for the reference, an untouched notebook, three correct
    variants and every catalogue mutant (beside the hostile notebooks above): per part, nbgrader's gradebook
    holds exactly what `grader grade` gives the same notebooks."""
    catalogue = autograded.catalogue
    assert set(NBGRADER_MUTANTS) == {bug.id for bug in catalogue.bugs}
    assert len(autograded.variants) == len(NBGRADER_VARIANTS), "the correct variants named here exist"
    name = LESSON.name
    source = nbformat.read(autograded.course / "source" / name / LESSON.notebook, as_version=4)
    # Nothing is hidden, so nothing is cleared: every cell but the solutions is released as written.
    assert [c.source for c in autograded.released.cells if not c.metadata["nbgrader"].get("solution")] == [
        c.source for c in source.cells if not c.metadata["nbgrader"].get("solution")]
    nbgrader_points = autograded.points
    full = notebook.component_points(lesson=LESSON)
    assert autograded.max_score == pytest.approx(sum(full.values()))
    assert autograded.grader == {student: nbgrader_points[student] for student in BY_GRADER}
    assert nbgrader_points["reference"] == full and sum(nbgrader_points["blank"].values()) == 0
    assert all(nbgrader_points[name] == full for name in autograded.variants), "a correct variant gets full marks"
    for bug in NBGRADER_MUTANTS:
        lost = [part for part in LESSON.modules if nbgrader_points[bug.replace(".", "_")][part] < full[part]]
        assert lost == [next(b.component for b in catalogue.bugs if b.id == bug)], \
            (bug, nbgrader_points[bug.replace(".", "_")])


# --------------------------------------------------------------------------- the kit in its venv

# A student module that is the reference, unless the sandboxed child can reach the kit through the venv's
# path file (the editable install puts the kit's folder on every interpreter's path): then it raises, and
# the part it belongs to loses its points. Reflective on purpose: the scan cannot see the names. What it
# looks for: the engine, and the lesson's hidden tests and rubric, wherever the kit's folder is on the path.
_LESSON_IN_KIT = LESSON.folder.relative_to(ROOT).parts
PROBE = '''\
import importlib as _importlib, os as _os, sys as _sys
_reached = []
for _name in ("gra" + "der", "gra" + "der.judging.score"):
    try:
        _importlib.import_module(_name)
        _reached.append(_name)
    except BaseException:
        pass
for _folder in list(_sys.path):
    for _tail in (@@TESTS@@, @@RUBRIC@@):
        try:
            if _os.path.exists(_os.path.join(_folder, *_tail)):
                _reached.append(_os.path.join(_folder, *_tail))
        except BaseException:
            pass
if _reached:
    raise RuntimeError(f"reached the kit: {_reached}")
'''.replace("@@TESTS@@", repr((*_LESSON_IN_KIT, "tests"))).replace("@@RUBRIC@@", repr((*_LESSON_IN_KIT, "rubric.toml")))


def test_the_kit_is_importable_from_anywhere_and_never_copied_into_its_venv(tmp_path):
    """`make setup` installs the kit editable: a path file names the kit's folder and no file of the kit lies
    in the venv, where a sandboxed child could read it (the sandbox hides the kit's folder, not the venv)."""
    site = Path(nbformat.__file__).resolve().parents[1]
    if site.parent.parent.parent != ROOT / ".venv":
        pytest.skip("checks the kit's own venv (make setup)")
    anywhere = subprocess.run([sys.executable, "-c", "import grader, sys; print(grader.__file__)"], cwd=tmp_path,
                              env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                              capture_output=True, text=True, timeout=120)
    assert anywhere.stdout.strip() == str(ROOT / "grader" / "__init__.py"), anywhere
    copied = [str(p) for p in site.rglob("*") if p.name in ("rubric.toml", "lesson.toml", "hidden_cell.py")
              or p.parts[-2:] == ("grader", "__init__.py")]
    assert copied == [], f"files of the kit were copied into the venv: {copied}"
    paths = [line for pth in site.glob("*.pth") for line in pth.read_text(encoding="utf-8").splitlines()]
    assert str(ROOT) in paths, "the kit is on the venv's path through a path file"


def test_a_sandboxed_child_cannot_reach_the_hidden_tests_through_the_venv(tmp_path):
    subs = tmp_path / "subs"
    honest, probing = subs / "honest", subs / "probing"
    for folder in (honest, probing):
        folder.mkdir(parents=True)
        for module in LESSON.modules:
            shutil.copyfile(LESSON.solutions / f"{module}.py", folder / f"{module}.py")
    first = LESSON.modules[0]
    (probing / f"{first}.py").write_text(PROBE + (honest / f"{first}.py").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "out"
    assert run.main(submissions=subs, out=out, jobs=1, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    with open(out / "grades.csv", encoding="utf-8", newline="") as f:
        rows = {row["submission"]: float(row[first]) for row in csv.DictReader(f)}
    assert rows["probing"] == rows["honest"] == notebook.component_points(lesson=LESSON)[first], rows
    # The probe is not blind: run where the kit is reachable, it raises.
    reach = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert reach.returncode != 0 and "reached the kit" in reach.stderr, reach


# A student cell that goes for the sandbox the next notebook will be graded in: it signals its parent (the
# zygote, were it reachable) and everything it may signal, and leaves a process of its own behind.
ATTACKS_ITS_ZYGOTE = """\
import os as _os, signal as _signal, time as _time
for _target in (_os.getppid(), -1):
    try:
        _os.kill(_target, _signal.SIGKILL)
    except BaseException:
        pass
try:
    if _os.fork() == 0:
        _os.setsid()
        _time.sleep(600)
except BaseException:
    pass"""


def _never(*args, **kwargs):
    raise AssertionError("the kit's step wrote the class's outputs for one notebook")


def test_notebooks_graded_one_after_another_share_a_sandbox_and_nothing_else(tmp_path, monkeypatch):
    """The kit's step keeps the sandbox's zygote between the notebooks of one autograde. A notebook graded
    after one that went for that zygote is graded in it, as if alone: full marks, the same record, nothing of
    the other notebook's left; a zygote that is gone is started again rather than blamed on the next student."""
    from engine_helpers import processes_of, settled

    from grader.release import nbgrader_autograde
    from grader.sandbox.confinement import slot_uid
    from grader.sandbox.zygote import KeptZygotes

    blank = notebook.build(student=True, lesson=LESSON)
    honest, hostile = _filled(blank, LESSON.solutions), _filled(blank, LESSON.solutions, ATTACKS_ITS_ZYGOTE)
    full = sum(notebook.component_points(lesson=LESSON).values())
    # The step reads one record: the class's outputs are never written (grade.main's class_stage).
    from grader.results import classreport

    monkeypatch.setattr(classreport, "write_class", _never)
    monkeypatch.setattr(nbgrader_autograde, "_not_ready", [])  # the engine fault below must stay this test's
    monkeypatch.setattr(run, "_similarity", _never)
    alone = nbgrader_autograde.grade_notebook(honest, lesson=LESSON, uid_base=CONFIG.uid_base)
    kept = KeptZygotes()
    try:
        attacked = nbgrader_autograde.grade_notebook(hostile, lesson=LESSON, uid_base=CONFIG.uid_base, zygotes=kept)
        (zygote,) = kept._kept.values()
        after = nbgrader_autograde.grade_notebook(honest, lesson=LESSON, uid_base=CONFIG.uid_base, zygotes=kept)
        assert kept.started == 1 and kept._kept and next(iter(kept._kept.values())) is zygote
        assert zygote.process.poll() is None, "a notebook's code reached the zygote"
        assert after.total == alone.total == full, (after.total, alone.total)
        assert [(t.name, t.status, t.score) for t in after.tests] == [(t.name, t.status, t.score) for t in alone.tests]
        assert attacked.status != "engine-error", attacked.notes
        uid = slot_uid(dataclasses.replace(DEFAULT_CONFIG, uid_base=CONFIG.uid_base), 0)
        assert settled(lambda: processes_of({uid})) == [], "a process of the first notebook outlived its grading"
        # A zygote that died between two notebooks (killed from outside) is replaced, not reported as a fault.
        zygote.process.kill()
        zygote.process.wait()
        again = nbgrader_autograde.grade_notebook(honest, lesson=LESSON, uid_base=CONFIG.uid_base, zygotes=kept)
        assert again.total == full and kept.started == 2
        # A run that met an engine fault closes its zygote: the next notebook never gets a possibly broken one.
        (faulted,) = kept._kept.values()
        graded_as_usual = run._grade_all
        monkeypatch.setattr(run, "_grade_all", lambda *a, **k: [*graded_as_usual(*a, **k), "row: an engine fault"])
        with pytest.raises(nbgrader_autograde.KitNotReady):
            nbgrader_autograde.grade_notebook(honest, lesson=LESSON, uid_base=CONFIG.uid_base, zygotes=kept)
        monkeypatch.setattr(run, "_grade_all", graded_as_usual)
        assert faulted.process.poll() is not None and not kept._kept
        after_fault = nbgrader_autograde.grade_notebook(honest, lesson=LESSON, uid_base=CONFIG.uid_base, zygotes=kept)
        assert after_fault.total == full and kept.started == 3
    finally:
        kept.close()
    assert not kept._kept and zygote.process.poll() is not None


def test_a_sandbox_that_refuses_stops_every_notebook_with_what_to_do(monkeypatch, tmp_path):
    """`grader grade` refuses to grade when the sandbox's start-up check fails: the kit's step says so, with
    where to look, instead of saving points, and does not start the sandbox again for the next notebook."""
    from grader.release import nbgrader_autograde

    starts = []

    def refusing(**kwargs):
        starts.append(kwargs)
        print("grade: the sandboxed child could not be started with its view of the machine (mount: EPERM).",
              file=sys.stderr)
        return run.EXIT_ENGINE_FAULT

    monkeypatch.setattr(run, "main", refusing)
    monkeypatch.setattr(nbgrader_autograde, "_not_ready", [])
    released = notebook.build(student=False, lesson=LESSON)
    for _ in range(2):
        with pytest.raises(nbgrader_autograde.KitNotReady) as refused:
            nbgrader_autograde.grade_notebook(released, lesson=LESSON)
        assert "could not be started with its view of the machine" in str(refused.value)
        assert "python -m grader.sandbox --check" in str(refused.value)
    assert len(starts) == 1


@needs_nbgrader
def test_a_course_call_timeout_below_zero_is_refused_when_the_config_is_read():
    from traitlets import TraitError
    from traitlets.config import Config

    from grader.release.nbgrader_autograde import HiddenTests

    assert HiddenTests(config=Config({"HiddenTests": {"call_timeout": 2.5}})).call_timeout == 2.5
    with pytest.raises(TraitError, match="call_timeout"):
        HiddenTests(config=Config({"HiddenTests": {"call_timeout": -1.0}}))

"""The README's nbgrader course, run as written in a clean folder: a correct student gets full marks and
feedback that names only what nbgrader students have; a step left out stops autograde with what to do."""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import uid_base_for_tests  # noqa: E402

from grader.lesson import load_lesson
from grader.release import notebook

from grader.release import stubs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
LESSON = load_lesson("day13")  # the lesson value these tests pass to each stage
UID_BASE = uid_base_for_tests(10)
pytestmark = pytest.mark.skipif(shutil.which("nbgrader", path=str(VENV_BIN)) is None
                                or VENV_BIN.parent != ROOT / ".venv",
                                reason="runs the README's commands with the kit's own venv (make setup) and nbgrader")


def _block(name: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- nbgrader-course:{name} -->\n```\w+\n(.*?)```\n<!-- /nbgrader-course:{name} -->", text, re.S)
    assert found, f"README.md has no nbgrader-course:{name} block"
    return found.group(1)


def _env(home: Path) -> dict:
    """A clean shell's environment: no PYTHONPATH, no venv on PATH (the README's commands put it there),
    Jupyter's files in `home`, and a python3 kernel of the kit's venv (what students run is theirs)."""
    kernels = home / "jupyter" / "kernels" / "python3"
    kernels.mkdir(parents=True, exist_ok=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(VENV_BIN / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}), encoding="utf-8")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p).resolve() != VENV_BIN.resolve())
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV", "GRADER_"))}
    return {**env, "PATH": path, "HOME": str(home), "JUPYTER_PATH": str(home / "jupyter"),
            "JUPYTER_CONFIG_DIR": str(home / "jupyter-config"), "JUPYTER_DATA_DIR": str(home / "jupyter-data"),
            "OMP_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def _bash(script: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=2400)


def _split_script() -> tuple[str, str]:
    """The README's commands up to the students' turn, and from it on; the KIT line names this kit."""
    script = _block("shell")
    kit_line = next(line for line in script.splitlines() if line.startswith("KIT="))
    script = script.replace(kit_line, f"KIT={ROOT}")
    before, marker, after = script.partition("# each student:")
    assert marker, "the README's commands say where the students' turn comes"
    after = after.split("\n", 1)[1]
    while after.startswith("#"):
        after = after.split("\n", 1)[1]
    # The second half runs in its own shell: it starts where the first left off.
    prefix = "\n".join(line for line in before.splitlines() if line.startswith(("KIT=", "export ")))
    return before, f"{prefix}\ncd day13-course\n{after}"


def _fill(path: Path) -> None:
    """What a correct student does: the reference's code in each solution cell."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if grade_id.startswith("solution_"):
            _, imports, code = notebook._split((LESSON.solutions / f"{grade_id.removeprefix('solution_')}.py")
                                               .read_text(encoding="utf-8"), lesson=LESSON)
            code = "\n".join(line for line in code.split("\n")
                             if not (stubs.BEGIN.match(line) or stubs.END.match(line)))
            cell.source = "\n".join(imports) + "\n\n" + code
    nbformat.write(nb, str(path))


def test_the_config_file_is_the_readmes():
    assert (ROOT / "docs" / "nbgrader_config.py").read_text(encoding="utf-8") == _block("config")


def test_the_readme_course_gives_a_correct_student_full_marks(tmp_path):
    env = _env(tmp_path / "home")
    before, after = _split_script()
    # The test's sandbox uids, so that a grading run elsewhere on the machine never shares them.
    config_line = f"\nc.HiddenTests.sandbox_uid_base = {UID_BASE}\n"
    before = before.replace('cp "$KIT/docs/nbgrader_config.py" .',
                            f'cp "$KIT/docs/nbgrader_config.py" . && echo "{config_line.strip()}" >> nbgrader_config.py')
    ran = _bash(before, tmp_path, env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    course = tmp_path / "day13-course"

    # A student, in a folder of their own, through the exchange the config names.
    student = tmp_path / "student"
    student.mkdir()
    where = f'--course day13 --Exchange.root="{course / "exchange"}"'
    kit_path = f'export PATH="{VENV_BIN}:$PATH"'
    fetched = _bash(f"{kit_path}\nnbgrader fetch_assignment day13 {where}", student, env)
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    mine = student / "day13" / LESSON.notebook
    untouched = _bash(f"{kit_path}\nnbgrader validate day13/{LESSON.notebook}", student, env)
    assert "VALIDATION FAILED" in untouched.stdout, untouched.stdout[-3000:] + untouched.stderr[-3000:]
    _fill(mine)
    correct = _bash(f"{kit_path}\nnbgrader validate day13/{LESSON.notebook}", student, env)
    assert "Success! Your notebook passes all the tests." in correct.stdout, correct.stdout[-5000:]
    submitted = _bash(f"{kit_path}\nnbgrader submit day13 {where}", student, env)
    assert submitted.returncode == 0, submitted.stderr[-3000:]

    ran = _bash(after, tmp_path, env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-5000:]
    log = ran.stdout + ran.stderr
    assert "checksum" not in log.lower(), "untouched cells are not reported as changed"
    assert log.count("Graded the hidden tests of") == 1, "one grading of the notebook, in nbgrader's process"
    with open(course / "grades.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and float(rows[0]["score"]) == float(rows[0]["max_score"]) == 90.0, rows
    feedback = next((course / "feedback").rglob("*.html")).read_text(encoding="utf-8")
    # Each hidden test's cell shows its verdict (the cell's code is highlighted, so its words are split).
    assert feedback.count(": passed, ") == len(notebook.hidden_tests(lesson=LESSON)), "each hidden test's verdict in its cell"
    for absent in ("CONTRACT.md", "assignments/", str(ROOT)):
        assert absent not in feedback, f"the feedback names {absent}, which nbgrader students do not have"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A course made with the README's config: the source notebook, and generate_assignment run once (the same
    course for every step left out; each test autogrades its own copy)."""
    home = tmp_path_factory.mktemp("generated")
    env = _env(home / "home")
    course = home / "course"
    notebook.write_nbgrader_source(course / "source" / LESSON.name, lesson=LESSON)
    (course / "nbgrader_config.py").write_text(_block("config") + f"c.HiddenTests.sandbox_uid_base = {UID_BASE}\n",
                                               encoding="utf-8")
    made = subprocess.run(["nbgrader", "generate_assignment", LESSON.name], cwd=course,
                          env={**env, "PATH": f"{VENV_BIN}{os.pathsep}{env['PATH']}"},
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    return course


@pytest.mark.parametrize("left_out", ["use_the_kit", "kit_importable", "lesson"])
def test_a_step_left_out_stops_autograde_with_what_to_do(tmp_path, left_out, generated):
    """Autograde of a correct notebook without the kit's step, without the kit importable, or without the
    lesson: a non-zero exit and a message saying what to do, never points of 0 saved for the student."""
    env = _env(tmp_path / "home")
    course = tmp_path / "course"
    shutil.copytree(generated, course)
    config = _block("config") + f"c.HiddenTests.sandbox_uid_base = {UID_BASE}\n"
    run_env = {**env, "PATH": f"{VENV_BIN}{os.pathsep}{env['PATH']}"}
    assert (course / "nbgrader_config.py").read_text(encoding="utf-8") == config
    submitted = course / "submitted" / "ada" / LESSON.name / LESSON.notebook
    submitted.parent.mkdir(parents=True)
    shutil.copyfile(course / "release" / LESSON.name / LESSON.notebook, submitted)
    _fill(submitted)
    if left_out == "use_the_kit":
        (course / "nbgrader_config.py").write_text(config.replace("use_the_kit(c)\n", ""), encoding="utf-8")
        expected = notebook.NOT_SET_UP[:60]
    elif left_out == "kit_importable":
        # An environment where `grader` is something else (nbgrader installed apart from the kit).
        shadow = tmp_path / "elsewhere" / "grader"
        shadow.mkdir(parents=True)
        (shadow / "__init__.py").write_text("", encoding="utf-8")
        run_env["PYTHONPATH"] = str(shadow.parent)
        expected = notebook.NOT_SET_UP[:60]
    else:
        (course / "nbgrader_config.py").write_text(config + 'c.HiddenTests.lesson = "no_such_lesson"\n',
                                                   encoding="utf-8")
        expected = "could not load its lesson"
    graded = subprocess.run(["nbgrader", "autograde", LESSON.name], cwd=course, env=run_env,
                            capture_output=True, text=True, timeout=1200)
    said = graded.stdout + graded.stderr
    assert graded.returncode != 0, said[-3000:]
    assert expected in " ".join(said.split()), said[-5000:]
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        grades = gradebook.find_submission_notebook(LESSON.notebook.removesuffix(".ipynb"), LESSON.name, "ada").grades
        assert all(grade.auto_score is None for grade in grades if grade.name.startswith("hidden-")), \
            "no hidden test's points saved from a run that could not grade"

"""grader/notebook.py: the notebook built from the reference, checked with the real nbgrader."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader import notebook, stubs

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def rubric() -> Path:
    return notebook.RUBRIC


@pytest.fixture(scope="module")
def source_nb(rubric):
    return notebook.build(student=False, rubric=rubric)


@pytest.fixture(scope="module")
def student_nb(rubric):
    return notebook.build(student=True, rubric=rubric)


def _cells(nb, kind):
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get(kind)}


def test_component_points_sums_each_component(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text('[self_attention.a]\npoints = 2\n[self_attention.b]\npoints = 3.5\n'
                    '[[tests]]\nid = "multihead.x"\npoints = 4\n'
                    '[positional]\nt = { points = 1 }\n[block.w]\npoints = 6\ncomponent = "block"\n'
                    '[deliverables.readme]\npoints = 9\n', encoding="utf-8")
    assert notebook.component_points(path) == {"self_attention": 5.5, "multihead": 4.0,
                                               "positional": 1.0, "block": 6.0}


def test_component_points_names_what_is_missing(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text("[self_attention.a]\npoints = 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="multihead, positional, block"):
        notebook.component_points(path)


def test_source_notebook_follows_nbgrader_conventions(source_nb, rubric):
    solutions, graded = _cells(source_nb, "solution"), _cells(source_nb, "grade")
    assert sorted(solutions) == sorted(f"solution_{m}" for m in notebook.MODULES)
    assert sorted(graded) == sorted(f"test_{m}" for m in notebook.MODULES)
    points = notebook.component_points(rubric)
    for module in notebook.MODULES:
        code = solutions[f"solution_{module}"].source
        assert code.count("### BEGIN SOLUTION") == code.count("### END SOLUTION") >= 1
        test = graded[f"test_{module}"]
        assert test.metadata["nbgrader"]["points"] == points[module]
        assert test.metadata["nbgrader"]["locked"] is True
        assert notebook.BEGIN_HIDDEN in test.source and notebook.END_HIDDEN in test.source
    ids = [c.id for c in source_nb.cells]
    assert len(set(ids)) == len(ids)
    nbformat.validate(source_nb)


def test_student_notebook_has_the_stubs_and_no_solution_or_hidden_test(student_nb):
    code = notebook.code_of(student_nb)
    assert "BEGIN SOLUTION" not in code and "HIDDEN TESTS" not in code
    squeezed = "".join(code.split())
    for module in notebook.MODULES:
        source = (notebook.SOLUTIONS / f"{module}.py").read_text(encoding="utf-8")
        for line in stubs.solution_lines(source):
            assert "".join(line.split()) not in squeezed, f"solution line leaked: {line}"
        # Every stub line of the .py stub (bar module docstring and imports) is in the notebook.
        _, _, stub_body = notebook._split(stubs.make_stub(source))
        assert stub_body in code


def test_build_is_deterministic(rubric, tmp_path):
    a = notebook.write(notebook.build(student=True, rubric=rubric), tmp_path / "a.ipynb")
    b = notebook.write(notebook.build(student=True, rubric=rubric), tmp_path / "b.ipynb")
    assert a.read_bytes() == b.read_bytes()


def _run_cells(nb, replace=None) -> dict[str, str]:
    """Run the code cells in one namespace like a kernel would; grade_id -> error ('' when it ran)."""
    namespace: dict = {}
    errors = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        source = (replace or {}).get(grade_id, cell.source)
        try:
            exec(compile(source, grade_id, "exec"), namespace)  # noqa: S102 - our own notebook
            errors[grade_id] = ""
        except Exception as error:  # noqa: BLE001 - a failing cell is the result under test
            errors[grade_id] = f"{type(error).__name__}: {error}"
    return errors


def test_test_cells_pass_on_the_reference_and_fail_on_the_stubs(source_nb, student_nb):
    assert all(not e for e in _run_cells(source_nb).values()), _run_cells(source_nb)
    errors = _run_cells(student_nb)
    for module in notebook.MODULES:
        assert "not implemented yet" in errors[f"test_{module}"], errors
        assert errors[f"solution_{module}"] == ""  # defining a stub is not an error


def test_hidden_tests_catch_a_missing_scale(source_nb):
    """The hidden part checks real numbers: dropping 1/sqrt(d_k) fails it, the visible part alone would not."""
    solution = _cells(source_nb, "solution")["solution_self_attention"].source
    buggy = solution.replace("/ math.sqrt(d_k)", "")
    assert buggy != solution
    errors = _run_cells(source_nb, {"solution_self_attention": buggy})
    assert "weights" in errors["test_self_attention"]
    assert errors["test_positional"] == ""


# --------------------------------------------------------------------------- real nbgrader

def _nbgrader(course: Path, *args: str) -> None:
    env = dict(os.environ)
    # The kernel must be this venv's python (the venv's own kernel.json says plain "python").
    kernels = course / "jupyter" / "kernels" / "python3"
    kernels.mkdir(parents=True, exist_ok=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (kit venv)", "language": "python"}), encoding="utf-8")
    env.update(JUPYTER_PATH=str(course / "jupyter"), JUPYTER_CONFIG_DIR=str(course / "jupyter-config"),
               JUPYTER_DATA_DIR=str(course / "jupyter-data"), PATH=f"{VENV_BIN}{os.pathsep}{env['PATH']}",
               OMP_NUM_THREADS="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    result = subprocess.run([str(VENV_BIN / "nbgrader"), *args], cwd=course, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


@pytest.mark.skipif(shutil.which("nbgrader", path=str(VENV_BIN)) is None,
                    reason="nbgrader is in the dev extra: `pip install -e .[dev]`")
def test_real_nbgrader_generate_and_autograde(tmp_path, source_nb, rubric):
    course = tmp_path / "course"
    students = {"filled": {}, "blank": None, "partial": {"solution_block"}}
    (course / "source" / "day13").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        "c.CourseDirectory.course_id = 'day13'\n"
        "c.CourseDirectory.db_assignments = [dict(name='day13')]\n"
        f"c.CourseDirectory.db_students = [{', '.join(f'dict(id={s!r})' for s in students)}]\n"
        "c.ExecutePreprocessor.timeout = 120\n", encoding="utf-8")
    notebook.write(source_nb, course / "source" / "day13" / "day13.ipynb")
    _nbgrader(course, "generate_assignment", "day13", "--force")

    released = nbformat.read(course / "release" / "day13" / "day13.ipynb", as_version=4)
    assert "HIDDEN TESTS" not in notebook.code_of(released)
    reference = {gid: "\n".join(l for l in c.source.split("\n") if "SOLUTION" not in l)
                 for gid, c in _cells(source_nb, "solution").items()}
    for student, keep_blank in students.items():
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if keep_blank is not None and grade_id in reference and grade_id not in keep_blank:
                cell.source = reference[grade_id]
        notebook.write(nb, course / "submitted" / student / "day13" / "day13.ipynb")
    _nbgrader(course, "autograde", "day13", "--force")

    from nbgrader.api import Gradebook

    points = notebook.component_points(rubric)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {s: gradebook.find_submission("day13", s).score for s in students}
        max_score = gradebook.find_assignment("day13").max_score
    assert max_score == pytest.approx(sum(points.values()))
    assert scores["filled"] == pytest.approx(max_score)
    assert scores["blank"] == 0
    assert scores["partial"] == pytest.approx(max_score - points["block"])


# --------------------------------------------------------------------------- the kit's own grader

def _filled(student_nb, source_nb, edit=lambda code: code):
    """The student notebook with the reference typed into its solution cells (and magics on top)."""
    reference = {gid: "\n".join(l for l in c.source.split("\n") if "SOLUTION" not in l)
                 for gid, c in _cells(source_nb, "solution").items()}
    nb = nbformat.from_dict(json.loads(json.dumps(student_nb)))
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in reference:
            cell.source = edit(reference[grade_id])
    magic = nbformat.v4.new_code_cell("%matplotlib inline\n!pip install -q torch\nimport math")
    magic.id = "magics"
    nb.cells.insert(1, magic)
    return nb, {gid.removeprefix("solution_"): edit(code) for gid, code in reference.items()}


def test_notebook_and_py_files_get_the_same_score(tmp_path, student_nb, source_nb):
    """The same code, once as day13.ipynb and once as the four .py files, graded by the kit's engine.

    The code has a classic bug (no 1/sqrt(d_k)), so the scores compared are partial and itemised;
    the notebook also carries IPython magics, which must cost nothing.
    """
    subs = tmp_path / "subs"
    deliverables = [p for p in notebook.SOLUTIONS.iterdir() if p.is_file() and p.suffix != ".py"]
    no_scale = lambda code: code.replace("/ math.sqrt(d_k)", "")  # noqa: E731 - a classic bug
    for label, edit in (("noscale", no_scale),):
        nb, modules = _filled(student_nb, source_nb, edit)
        for form in ("nb", "py"):
            folder = subs / f"{label}-{form}"
            folder.mkdir(parents=True)
            for path in deliverables:
                shutil.copyfile(path, folder / path.name)
            if form == "nb":
                notebook.write(nb, folder / "day13.ipynb")
            else:
                for module, code in modules.items():
                    # The .py files import what the notebook's setup cell imported, and their siblings.
                    imports = "import math\nimport torch\nimport torch.nn as nn\n"
                    siblings = "".join(f"from {m} import *\n" for m in notebook.MODULES[:notebook.MODULES.index(module)])
                    (folder / f"{module}.py").write_text(imports + siblings + code + "\n", encoding="utf-8")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "grader", "grade", str(subs), "--out", str(out), "--jobs", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]

    def scores(row):
        results = json.loads((out / row / "results.json").read_text(encoding="utf-8"))
        return results["score"], {t["name"]: (t["score"], t["status"]) for t in results["tests"]}

    total, tests = scores("noscale-nb")
    assert (total, tests) == scores("noscale-py")
    passed = [name for name, (_, status) in tests.items() if status == "passed"]
    failed = [name for name, (_, status) in tests.items() if status == "failed"]
    assert passed and failed, "the bug must cost some tests and leave others: a real, partial score"
    assert any("positional" in name for name in passed)

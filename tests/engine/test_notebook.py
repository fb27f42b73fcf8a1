"""grader/release/notebook.py: the notebook built from the reference, the visible tests and the rubric, run in a
real Jupyter kernel and graded with the real nbgrader. Through the toy lesson (tests/fixtures/lessons/toy)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY, kept_zygotes, shared_config  # noqa: E402
from visible_run import run_pytest_in_each  # noqa: E402

from grader.intake import submissions as intake

from grader.release import notebook

from grader.release import student_release as release

from grader.running import grade as run

from grader.judging import score

from grader.release import stubs  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage
CONFIG = shared_config(call_timeout=5.0)
needs_jupyter = pytest.mark.skipif(shutil.which("jupyter-nbconvert", path=str(VENV_BIN)) is None
                                   or shutil.which("nbgrader", path=str(VENV_BIN)) is None,
                                   reason="Jupyter and nbgrader are in the dev extra: `pip install -e .[dev]`")


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    LESSON.cleanup()  # the catalogue's mutant folders, built for these tests


@pytest.fixture(scope="module")
def rubric() -> Path:
    return LESSON.rubric_path


@pytest.fixture(scope="module")
def source_nb(rubric):
    return notebook.build(student=False, rubric=rubric, lesson=LESSON)


@pytest.fixture(scope="module")
def student_nb(rubric):
    return notebook.build(student=True, rubric=rubric, lesson=LESSON)


def _cells(nb, kind):
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get(kind)}


def _catalogue():
    from grader.admin import killrate  # the lesson's catalogue, as the kill rate reads it

    return killrate.catalogue(lesson=LESSON)


def test_component_points_sums_each_component(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text('[activations.a]\npoints = 2\n[activations.b]\npoints = 3.5\n'
                    '[[tests]]\nid = "classifier.x"\npoints = 4\n'
                    '[classifier]\nt = { points = 1 }\n[classifier.w]\npoints = 6\ncomponent = "classifier"\n'
                    '[deliverables.readme]\npoints = 9\n', encoding="utf-8")
    assert notebook.component_points(path, lesson=LESSON) == {"activations": 5.5, "classifier": 11.0}


def test_component_points_names_what_is_missing(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text("[activations.a]\npoints = 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="classifier"):
        notebook.component_points(path, lesson=LESSON)


def test_the_prose_is_the_lessons(tmp_path):
    prose = notebook.texts(lesson=LESSON)
    assert LESSON.notebook_texts.parent == LESSON.folder
    declared = tomllib.loads(LESSON.notebook_texts.read_text(encoding="utf-8"))
    assert prose["intro"].startswith("# ") and (prose["intro"], prose["closing"]) == (declared["intro"], declared["closing"])
    path = tmp_path / "texts.toml"
    path.write_text('intro = "# Hi"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="closing"):
        notebook.texts(path, lesson=LESSON)


def test_test_cells_are_the_visible_test_files(tmp_path):
    """The cells come from pytest's own collection of the assignment's tests: a test added there is a
    cell here, parametrised cases included, in `make test`'s order."""
    tests = notebook.visible_tests(lesson=LESSON)
    parts = [part for part, _ in tests]
    assert parts == sorted(parts, key=LESSON.modules.index), "make test runs the parts in task order"
    copy = tmp_path / "assignment"
    shutil.copytree(LESSON.assignment, copy, ignore=shutil.ignore_patterns("__pycache__"))
    first = LESSON.modules[0]
    with open(copy / "tests" / f"test_{first}.py", "a", encoding="utf-8") as f:
        f.write("\n\n@pytest.mark.parametrize('n', [1, 2])\ndef test_added_here(n):\n    assert n\n")
    added = notebook.visible_tests(copy, lesson=LESSON)
    assert any("[" in test for _, test in added), "parametrised cases are cells of their own"
    assert set(added) - set(tests) == {(first, f"test_{first}.py::test_added_here[1]"),
                                       (first, f"test_{first}.py::test_added_here[2]")}


def test_a_collection_is_kept_on_disk_and_asked_again_when_any_byte_changes(tmp_path, monkeypatch):
    """pytest collects a folder once (a child that imports torch and every test file); a new process asks the
    disk. A changed byte anywhere in the folder, a failing collection and an unwritable cache folder all lead
    to pytest being asked, never to a stale or empty list. (A folder of two parts whose tests import nothing,
    so that each collection here takes a fraction of a second.)"""
    monkeypatch.setenv(notebook.COLLECTION_CACHE_ENV, str(tmp_path / "cache"))
    folder, parts = tmp_path / "assignment", ("first", "second")
    (folder / "tests").mkdir(parents=True)
    (folder / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n", encoding="utf-8")
    for part in parts:
        (folder / "tests" / f"test_{part}.py").write_text(f"def test_{part}_works():\n    assert True\n",
                                                           encoding="utf-8")
    asked = []
    collect = notebook._collect_visible_tests
    monkeypatch.setattr(notebook, "_collect_visible_tests", lambda *a: asked.append(a) or collect(*a))
    first = notebook._visible_tests(folder, parts)
    assert first == (("first", "test_first.py::test_first_works"), ("second", "test_second.py::test_second_works"))
    assert len(asked) == 1 and len(list((tmp_path / "cache").glob("visible-tests-*.json"))) == 1
    assert notebook._visible_tests(folder, parts) == first and len(asked) == 1, "kept, not asked again"

    with open(folder / "tests" / "test_second.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef test_one_more():\n    assert True\n")
    grown = notebook._visible_tests(folder, parts)
    assert len(asked) == 2 and set(grown) - set(first) == {("second", "test_second.py::test_one_more")}

    (folder / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n# a comment\n", encoding="utf-8")
    assert notebook._visible_tests(folder, parts) == grown and len(asked) == 3, "any file's bytes count"

    with open(folder / "tests" / "test_second.py", "a", encoding="utf-8") as f:
        f.write("\nthis is not python\n")
    for _ in range(2):  # a failure is never kept: each time, pytest's own words
        with pytest.raises(RuntimeError, match="could not list the visible tests"):
            notebook._visible_tests(folder, parts)
    assert len(asked) == 5

    (folder / "tests" / "test_second.py").write_text("def test_second_works():\n    assert True\n", encoding="utf-8")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be", encoding="utf-8")
    monkeypatch.setenv(notebook.COLLECTION_CACHE_ENV, str(blocked / "cache"))
    assert notebook._visible_tests(folder, parts) == first and len(asked) == 6, "no cache: collected, not refused"

def test_student_notebook_has_the_stubs_and_one_cell_per_visible_test(student_nb, rubric):
    code = notebook.code_of(student_nb)
    assert "BEGIN SOLUTION" not in code and "HIDDEN TESTS" not in code and "hidden_test" not in code
    squeezed = "".join(code.split())
    for module in LESSON.modules:
        source = (LESSON.solutions / f"{module}.py").read_text(encoding="utf-8")
        for line in stubs.solution_lines(source):
            assert "".join(line.split()) not in squeezed, f"solution line leaked: {line}"
        _, _, stub_body = notebook._split(stubs.make_stub(source), lesson=LESSON)
        assert stub_body in code
    graded = _cells(student_nb, "grade")
    calls = {c.source: c.metadata["nbgrader"]["points"] for c in graded.values()}
    shares = notebook.visible_points(rubric, lesson=LESSON)
    assert calls == {notebook.VISIBLE_CALL.format(test=test): shares[test] for _, test in notebook.visible_tests(lesson=LESSON)}
    points = notebook.component_points(rubric, lesson=LESSON)
    for part in LESSON.modules:
        mine = [shares[test] for p, test in notebook.visible_tests(lesson=LESSON) if p == part]
        assert sum(mine) == pytest.approx(points[part])
    ids = [c.id for c in student_nb.cells]
    assert len(set(ids)) == len(ids)
    nbformat.validate(student_nb)


def test_visible_points_are_those_of_the_feedback_on_push(rubric):
    """tools/ci_feedback.py shares a part's points among its tests: the notebook's cells get the same."""
    # As released: the template's PARTS line is written from the lesson (grader.release.student_release).
    feedback = types.ModuleType("ci_feedback_under_test")
    feedback.__file__ = str(notebook.CI_FEEDBACK)
    exec(compile(release.ci_feedback_source(lesson=LESSON), str(notebook.CI_FEEDBACK), "exec"), feedback.__dict__)  # noqa: S102
    tests = {f"tests/{test}": {"part": part, "passed": True, "message": "", "seconds": 0.0}
             for part, test in notebook.visible_tests(lesson=LESSON)}
    result = feedback.classroom_result(tests, [], notebook.component_points(rubric, lesson=LESSON))
    shares = notebook.visible_points(rubric, lesson=LESSON)
    assert {e["name"]: e["score"] for e in result["tests"]} == {
        f"{part}: {test.split('::')[1]}": shares[test] for part, test in notebook.visible_tests(lesson=LESSON)}


def test_source_notebook_has_one_autograded_cell_per_hidden_test(source_nb, rubric):
    """Each hidden test cell names its rubric id and carries its points, and holds no test (the kit's
    autograde step grades it in nbgrader's process); each visible test cell is a grade cell worth 0."""
    solutions, graded = _cells(source_nb, "solution"), _cells(source_nb, "grade")
    assert sorted(solutions) == sorted(f"solution_{m}" for m in LESSON.modules)
    hidden = {notebook.hidden_test_of(c.source): c for c in graded.values() if notebook.hidden_test_of(c.source)}
    visible = {gid: c for gid, c in graded.items() if notebook.hidden_test_of(c.source) is None}
    engine = {f"{component}.{test_id}" for component, test_id, _ in LESSON.hidden_tests}
    table = notebook.read_rubric(rubric)
    assert set(hidden) == {rid for rid in engine if rid.split(".")[1] in table[rid.split(".")[0]]}
    for rid, cell in hidden.items():
        part, test = rid.split(".")
        assert cell.metadata["nbgrader"]["points"] == table[part][test]["points"]
        assert cell.metadata["nbgrader"]["locked"] is True
        assert notebook.BEGIN_HIDDEN not in cell.source and "import" not in cell.source, "nothing to hide, nothing run"
    assert {c.source for c in visible.values()} == {notebook.VISIBLE_CALL.format(test=t) for _, t in notebook.visible_tests(lesson=LESSON)}
    assert all(c.metadata["nbgrader"]["points"] == 0 for c in visible.values())
    assert sum(c.metadata["nbgrader"]["points"] for c in graded.values()) == pytest.approx(
        sum(notebook.component_points(rubric, lesson=LESSON).values()))
    for module in LESSON.modules:
        code = solutions[f"solution_{module}"].source
        assert code.count("### BEGIN SOLUTION") == code.count("### END SOLUTION") >= 1
    ids = [c.id for c in source_nb.cells]
    assert len(set(ids)) == len(ids)
    nbformat.validate(source_nb)


def test_build_is_deterministic(rubric, tmp_path):
    a = notebook.write(notebook.build(student=True, rubric=rubric, lesson=LESSON), tmp_path / "a.ipynb")
    b = notebook.write(notebook.build(student=True, rubric=rubric, lesson=LESSON), tmp_path / "b.ipynb")
    assert a.read_bytes() == b.read_bytes()


def test_the_grader_leaves_out_test_cells_only(student_nb, source_nb):
    tests = [c.source for c in student_nb.cells if c.cell_type == "code"
             and c.metadata["nbgrader"]["grade_id"] not in ("setup",) and not c.metadata["nbgrader"]["solution"]]
    hidden = [c.source for c in _cells(source_nb, "grade").values()] + [notebook.HIDDEN_SETUP]
    assert tests and all(notebook.is_test_cell(code, lesson=LESSON) for code in tests + hidden)
    # Saved with CRLF line ends (held-out s57: the set-up cell was then the student's, and flagged for globals()).
    assert all(notebook.is_test_cell(code.replace("\n", "\r\n"), lesson=LESSON) for code in tests + hidden)
    for code in ("visible_test('x')\nresult = 1", "def visible_test(t):\n    pass", "import torch",
                 "# visible_test('x')", "visible_test('x'); import os", "hidden_test('x')\nimport os",
                 "def hidden_test(t):\n    pass"):
        assert not notebook.is_test_cell(code, lesson=LESSON), code


# --------------------------------------------------------------------------- filling a notebook

def _solution_code(folder: Path, module: str) -> str:
    """`module` of `folder` (the reference or a mutant) as a student types it into its cell: its own
    library imports, then its code (sibling imports dropped: a notebook has one namespace)."""
    _, imports, code = notebook._split((folder / f"{module}.py").read_text(encoding="utf-8"), lesson=LESSON)
    code = "\n".join(line for line in code.split("\n") if not (stubs.BEGIN.match(line) or stubs.END.match(line)))
    return "\n".join(imports) + "\n\n" + code


def _filled(base, folder: Path, blank=()):
    nb = nbformat.from_dict(json.loads(json.dumps(base)))
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        module = grade_id.removeprefix("solution_")
        if grade_id.startswith("solution_") and module not in blank:
            cell.source = _solution_code(folder, module)
    return nb


def _student_folder(tmp: Path, files: Path | None = None) -> Path:
    """A student folder as the release makes it: tests/, pytest.ini, tools/notebook_tests.py (and `files`' .py)."""
    tmp.mkdir(parents=True)
    shutil.copytree(LESSON.assignment / "tests", tmp / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(LESSON.assignment / "pytest.ini", tmp / "pytest.ini")
    (tmp / "tools").mkdir()
    (tmp / "tools" / "notebook_tests.py").write_text(notebook.runner_source(), encoding="utf-8")
    for module in LESSON.modules if files else ():
        shutil.copyfile(files / f"{module}.py", tmp / f"{module}.py")
    return tmp


def _jupyter_env(home: Path) -> dict:
    """A Jupyter whose python3 kernel is this venv's interpreter (the venv's kernel.json says "python")."""
    kernels = home / "jupyter" / "kernels" / "python3"
    kernels.mkdir(parents=True, exist_ok=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (kit venv)", "language": "python"}), encoding="utf-8")
    return {**os.environ, "JUPYTER_PATH": str(home / "jupyter"), "JUPYTER_CONFIG_DIR": str(home / "jupyter-config"),
            "JUPYTER_DATA_DIR": str(home / "jupyter-data"), "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
            "OMP_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def _run_in_kernels(folders: list[Path], home: Path) -> dict[Path, dict[str, str | None]]:
    """Run each folder's <notebook> in a real kernel of its own, top to bottom, as "Run All" does: no
    --allow-errors, so a failing test cell lets the run go on only through its raises-exception tag. One
    nbconvert for them all (it starts a fresh kernel per notebook, in the notebook's folder, and writes ran.ipynb
    beside it); folder -> grade_id -> None (ran) or what it showed."""
    run = subprocess.run([str(VENV_BIN / "jupyter-nbconvert"), "--execute", "--to", "notebook",
                          "--ExecutePreprocessor.timeout=300", "--output", "ran.ipynb",
                          *(str(folder / LESSON.notebook) for folder in folders)],
                         env=_jupyter_env(home), capture_output=True, text=True, timeout=900 * len(folders))
    assert run.returncode == 0, run.stderr[-3000:]
    return {folder: _shown(folder / "ran.ipynb") for folder in folders}


def _shown(ran_path: Path) -> dict[str, str | None]:
    ran = nbformat.read(ran_path, as_version=4)
    shown = {}
    for cell in ran.cells:
        if cell.cell_type == "code":
            errors = [o for o in cell.outputs if o.output_type == "error"]
            shown[cell.metadata["nbgrader"]["grade_id"]] = "\n".join(errors[0].traceback) if errors else None
    return shown


def _visible_py(folders: list[Path]) -> dict[Path, dict[str, str | None]]:
    """The same tests run as `make test` runs them on .py files (pytest in each folder, a child forked per folder
    by tests/fixtures/visible_run.py): folder -> test id under tests/ -> None or pytest's report."""
    run_pytest_in_each(folders)
    return {folder: _junit(folder / "report.xml") for folder in folders}


def _junit(report: Path) -> dict[str, str | None]:
    import xml.etree.ElementTree as ET

    found = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        problem = next((child for child in case if child.tag in ("failure", "error")), None)
        test = f"{case.get('classname').removeprefix('tests.')}.py::{case.get('name')}"
        found[test] = None if problem is None else (problem.text or problem.get("message") or "failed")
    return found


# Where an error was raised (a .py line or a notebook cell's), and objects' addresses, differ by route.
PLACE = re.compile(r"(\b\w+\.py|Cell In\[\d+\]):\d+|0x[0-9a-f]+")


# --------------------------------------------------------------------------- the notebook in a real kernel

# Every catalogue mutant of the toy (both parts), and a classifier whose error is raised in the student's
# code (x @ weight without the transpose, on a non-square weight).
KERNEL_MUTANTS = ("act.no_shift", "act.wrong_dim", "cls.returns_logits")
RAISES = "raises_in_student_code"


def _raises_in_student_code(tmp: Path) -> Path:
    folder = tmp / RAISES
    shutil.copytree(LESSON.solutions, folder, ignore=shutil.ignore_patterns("__pycache__"))
    path = folder / "classifier.py"
    text = path.read_text(encoding="utf-8")
    assert "logits = self.linear(x)" in text
    path.write_text(text.replace("logits = self.linear(x)", "logits = x @ self.linear.weight + self.linear.bias"),
                    encoding="utf-8")
    return folder


@needs_jupyter
def test_notebook_cells_fail_exactly_as_the_py_tests_do(tmp_path, student_nb):
    """The reference passes every test cell, the stubs fail every one, and each mutant fails exactly the
    cells whose tests it fails as .py files, each cell showing the report `make test` shows."""
    catalogue = _catalogue()
    cases = {"reference": LESSON.solutions, **{bug: catalogue.mutant_dir(bug) for bug in KERNEL_MUTANTS},
             RAISES: _raises_in_student_code(tmp_path / "written")}
    by_cell = {notebook._test_cell_id(f"test_{part}", test.split("::", 1)[1].removeprefix("test_")): test
               for part, test in notebook.visible_tests(lesson=LESSON)}
    stub_folder = _student_folder(tmp_path / "stubs")
    notebook.write(student_nb, stub_folder / LESSON.notebook)
    works = {name: _student_folder(tmp_path / name.replace(".", "_"), files=folder) for name, folder in cases.items()}
    for name, folder in cases.items():
        notebook.write(_filled(student_nb, folder), works[name] / LESSON.notebook)
    # Every notebook first (as before, each kernel runs before pytest sees its folder), then pytest in each folder.
    shown_in = _run_in_kernels([stub_folder, *works.values()], tmp_path / "home")
    expected_in = _visible_py(list(works.values()))
    shown = shown_in[stub_folder]
    assert all("not implemented yet" in (shown[cell] or "") for cell in by_cell), shown
    for name, folder in cases.items():
        shown, expected = shown_in[works[name]], expected_in[works[name]]
        assert set(expected) == set(by_cell.values())
        assert {c for c, text in shown.items() if text and not c.startswith("test_")} == set(), (name, shown)
        failed_cells = {by_cell[c] for c in by_cell if shown[c]}
        failed_py = {test for test, text in expected.items() if text}
        assert failed_cells == failed_py, (name, failed_cells ^ failed_py)
        if name == "reference":
            assert not failed_cells
        else:
            assert failed_cells, f"{name} passes every visible test: pick a mutant they catch"
        for cell, test in by_cell.items():
            if shown[cell] and "(as in " not in expected[test]:  # a .py run names a repeated error once
                cell_report = shown[cell].split("\n", 1)[1]
                assert PLACE.sub("<line>", cell_report).strip() == PLACE.sub("<line>", expected[test]).strip(), test
        if name == RAISES:  # raised in the student's code: the cell names the notebook's line
            assert any("Cell In[" in (shown[cell] or "") for cell in by_cell), shown


# --------------------------------------------------------------------------- nbgrader
# nbgrader's autograde of these notebooks (the points per part equal `grader grade`'s) is judged in
# tests/engine/test_nbgrader_autograde.py, in the one autograde run that also grades the hostile notebooks.


def test_old_hidden_cells_grade_nothing_in_a_kernel(source_nb):
    """The hidden cells of source notebooks built before the kit's autograde step import
    grader.hidden_cell: it decides nothing in a kernel, and under nbgrader autograde (which should run no
    cell of the notebook) it stops the kernel with what to do, so the run fails instead of giving points.
    The new cells' set-up does the same."""
    old = "from grader.hidden_cell import hidden_test\n\nhidden_test('activations.worked_values', globals())"
    new = notebook.HIDDEN_SETUP + "\n\nhidden_test('activations.worked_values')"
    for code in (old, new):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("NBGRADER_EXECUTION", None)
        plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        graded = subprocess.run([sys.executable, "-c", code], env={**env, "NBGRADER_EXECUTION": "autograde"},
                                capture_output=True, text=True, timeout=120)
        assert graded.returncode == 70 and "use_the_kit(c)" in graded.stderr, graded
        assert notebook.hidden_test_of(code) == "activations.worked_values"
        if code == old:
            assert plain.returncode == 1 and "graded by nbgrader autograde" in plain.stderr
        else:
            assert plain.returncode == 0 and "graded when your notebook is autograded" in plain.stdout


# --------------------------------------------------------------------------- the kit's own grader

def test_notebook_and_py_files_get_the_same_score(tmp_path, student_nb):
    """The same code, once as the lesson's notebook and once as its .py files, graded by the kit's engine.

    The code has a classic bug (softmax without the max shift), so the scores compared are partial and itemised; the
    notebook also carries IPython magics, which must cost nothing, and its test cells, which the grader
    leaves out."""
    bug = _catalogue().mutant_dir("act.no_shift")
    subs = tmp_path / "subs"
    deliverables = [p for p in LESSON.solutions.iterdir() if p.is_file() and p.suffix != ".py"]
    nb = _filled(student_nb, bug)
    magic = nbformat.v4.new_code_cell("%matplotlib inline\n!pip install -q torch\nimport math")
    magic.id = "magics"
    nb.cells.insert(1, magic)
    for form in ("nb", "py"):
        folder = subs / f"noscale-{form}"
        folder.mkdir(parents=True)
        for path in deliverables:
            shutil.copyfile(path, folder / path.name)
        if form == "nb":
            notebook.write(nb, folder / LESSON.notebook)
        else:
            for module in LESSON.modules:
                shutil.copyfile(bug / f"{module}.py", folder / f"{module}.py")
    out = tmp_path / "out"
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0

    def scores(row):
        results = json.loads((out / row / "results.json").read_text(encoding="utf-8"))
        return results["score"], {t["name"]: (t["score"], t["status"]) for t in results["tests"]}

    total, tests = scores("noscale-nb")
    assert (total, tests) == scores("noscale-py")
    passed = [name for name, (_, status) in tests.items() if status == "passed"]
    failed = [name for name, (_, status) in tests.items() if status == "failed"]
    assert passed and failed, "the bug must cost some tests and leave others: a real, partial score"
    assert any("classifier" in name.lower() for name in passed)  # graded over the grader's softmax
    converted = intake.notebook_code_cells(subs / "noscale-nb" / LESSON.notebook, lesson=LESSON)
    assert any(notebook.is_test_cell(cell, lesson=LESSON) for cell in converted)

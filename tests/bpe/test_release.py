"""The BPE lesson's release and notebook routes: `python -m grader release --lesson bpe` builds the student
folder (stubs, visible tests, handout, contract, notebook) and nbgrader's source notebook; a notebook
filled in with the reference runs every visible test cell and gets every point, by `grader grade` and by
nbgrader's autograde step; the untouched notebook gets none."""
import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile

import nbformat
import pytest

from grader.release import stubs

from .helpers import ASSIGNMENT, REFERENCE, ROOT

GRADE_NOTEBOOK = """
import json, sys, nbformat
from grader.lesson import load_lesson
from grader.release.nbgrader_autograde import grade_notebook
lesson = load_lesson("bpe")
record = grade_notebook(nbformat.read(sys.argv[1], as_version=4), lesson=lesson)
print(json.dumps({"status": record.status, "scores": record.component_scores(lesson.components)}))
"""


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    out = tmp_path_factory.mktemp("bpe-release")
    done = subprocess.run([sys.executable, "-m", "grader", "release", "--lesson", "bpe", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def test_the_release_holds_the_student_folder_and_nothing_secret(released):
    folder = released / "bpe"
    for name in ("training.py", "tokenizer.py", "HANDOUT.md", "CONTRACT.md", "README.md", "bpe.ipynb",
                 "tests/test_training.py", "tests/test_tokenizer.py", "Makefile", "pytest.ini"):
        assert (folder / name).is_file(), name
    assert (folder / "training.py").read_text(encoding="utf-8") == stubs.stub_texts_of(REFERENCE)["training.py"]
    with zipfile.ZipFile(released / "bpe.zip") as archive:
        names = archive.namelist()
    assert not [n for n in names if "grader/bpe" in n or "solutions" in n or "catalogue" in n], names
    shipped = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in folder.rglob("*") if p.is_file())
    for line in stubs.solution_lines((REFERENCE / "tokenizer.py").read_text(encoding="utf-8")):
        assert line.strip() not in shipped, f"a solution line reached the release: {line.strip()}"


def test_the_released_tests_are_the_visible_tests(released):
    for test in (ASSIGNMENT / "tests").glob("*.py"):
        assert (released / "bpe" / "tests" / test.name).read_bytes() == test.read_bytes()


def test_a_solved_notebook_runs_every_visible_test_cell(released, tmp_path):
    """The student's notebook route: the release's notebook, its cells filled in (nbgrader's source notebook
    holds the reference in them), run top to bottom in the release folder."""
    from nbclient import NotebookClient

    folder = tmp_path / "bpe"
    shutil.copytree(released / "bpe", folder)
    nb = nbformat.read(str(released / "nbgrader" / "source" / "bpe" / "bpe.ipynb"), as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute(cwd=str(folder))
    ran = [c for c in nb.cells if c.cell_type == "code" and "visible_test(" in c.source]
    errors = [(c.source, o.get("evalue")) for c in nb.cells if c.cell_type == "code"
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert len(ran) >= 20 and not errors, errors[:3]


def test_notebooks_are_graded_by_grade_and_by_the_nbgrader_step(released, tmp_path):
    solved = released / "nbgrader" / "source" / "bpe" / "bpe.ipynb"
    (tmp_path / "class").mkdir()
    shutil.copyfile(solved, tmp_path / "class" / "solved.ipynb")
    shutil.copyfile(released / "bpe" / "bpe.ipynb", tmp_path / "class" / "untouched.ipynb")
    done = subprocess.run([sys.executable, "-m", "grader", "grade", "--lesson", "bpe", str(tmp_path / "class"),
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with open(tmp_path / "out" / "grades.csv", newline="", encoding="utf-8") as f:
        totals = {row["submission"]: float(row["total"]) for row in csv.DictReader(f)}
    assert totals == {"solved": 100, "untouched": 0}
    step = subprocess.run([sys.executable, "-c", GRADE_NOTEBOOK, str(solved)], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert step.returncode == 0, step.stderr[-2000:]
    graded = json.loads(step.stdout.strip().splitlines()[-1])
    assert graded["scores"] == {"training": 50, "tokenizer": 50}, graded

"""A notebook is graded by its code (grader/intake/submissions.py, grader/intake/nbstrip.py): its outputs, attachments and
metadata are dropped while it is read, in a process limited in memory and time, and the notebook limits
apply to what is left. A notebook saved after "Run All" with its pictures once scored 0 for its code
(10 MB, over an 8 MB limit on the whole file). Also: the student notebook's test cells let "Run All" go
on past a failing test (run in a real kernel by tests/engine/test_notebook.py, without --allow-errors)."""
from __future__ import annotations

import base64
import json
import os
import resource
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY  # noqa: E402

from grader.intake import submissions as intake

from grader.admin import killrate

from grader.release import notebook  # noqa: E402

from grader.lesson import load_lesson  # noqa: E402

LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage: the toy's
REFERENCE = LESSON.solutions
NOTEBOOK = LESSON.notebook

MB = 1 << 20


def _code_cells() -> list[str]:
    """The reference as a notebook student types it: one cell per file, sibling imports dropped."""
    cells = []
    for name in LESSON.modules:
        src = (REFERENCE / f"{name}.py").read_text()
        cells.append("\n".join(line for line in src.splitlines()
                               if not line.startswith(tuple(f"from {m} " for m in LESSON.modules))))
    return cells


def _picture(size: int) -> str:
    """A picture's worth of base64 (random bytes, as compressed PNG data looks: it is carried, never decoded)."""
    return base64.b64encode(os.urandom(size)).decode()


def _notebook_with_outputs(path: Path, outputs_bytes: int) -> Path:
    """A correct notebook saved after "Run All": every code cell shows heatmaps and printed text, a Markdown
    cell carries an attachment, and cells and notebook carry metadata."""
    nb = nbformat.v4.new_notebook()
    md = nbformat.v4.new_markdown_cell("# my work\n![heatmap](attachment:heatmap.png)")
    md.attachments = {"heatmap.png": {"image/png": _picture(200_000)}}
    nb.cells = [md] + [nbformat.v4.new_code_cell(code) for code in ["%matplotlib inline", *_code_cells()]]
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    per_picture = 600_000
    pictures = max(1, outputs_bytes // (per_picture * 4 // 3) + 1)
    for i in range(pictures):
        cell = code_cells[i % len(code_cells)]
        cell.outputs.append(nbformat.v4.new_output("display_data", data={"image/png": _picture(per_picture),
                                                                           "text/plain": "<Figure size 640x480>"}))
        cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=["tensor([0.25, 0.75])\n"] * 50))
        cell.metadata["collapsed"] = False
        cell.metadata["tags"] = ["heatmap"]
    nb.metadata["widgets"] = {"state": {"blob": "x" * 50_000}}
    nbformat.write(nb, str(path))
    return path


def test_a_correct_notebook_with_15_mb_of_outputs_gets_full_marks_for_its_code(tmp_path):
    folder = tmp_path / "class" / "ada"
    folder.mkdir(parents=True)
    _notebook_with_outputs(folder / NOTEBOOK, 15 * MB)
    assert 15 * MB < (folder / NOTEBOOK).stat().st_size < 20 * MB
    (sub,) = intake.discover(tmp_path / "class")
    result = intake.materialise(sub, tmp_path / "scratch", lesson=LESSON)
    assert result.notebook == NOTEBOOK, result.notes
    graded = killrate.grade(tmp_path / "scratch", "ada", lesson=LESSON)
    full = killrate.full_marks(lesson=LESSON)
    assert full and {c: graded.component_scores(LESSON.components)[c] for c in full} == full, [(t.name, t.output[:200]) for t in graded.tests
                                                                      if t.status != "passed"]


def test_outputs_attachments_and_metadata_are_not_what_the_limits_count(tmp_path):
    path = _notebook_with_outputs(tmp_path / NOTEBOOK, 9 * MB)  # the whole file is over the 8 MB limit
    assert path.stat().st_size > intake.notebook_limits(LESSON)["bytes"]
    cells = intake.notebook_code_cells(path, lesson=LESSON)
    assert cells[1:] == _code_cells() and cells[0].startswith("pass  # neutralised")


def test_a_notebook_over_intakes_file_limit_is_not_read_and_the_note_says_to_clear_outputs(tmp_path):
    folder = tmp_path / "class" / "bea"
    folder.mkdir(parents=True)
    _notebook_with_outputs(folder / NOTEBOOK, 21 * MB)
    (sub,) = intake.discover(tmp_path / "class")
    result = intake.materialise(sub, tmp_path / "scratch", lesson=LESSON)
    assert result.notebook is None
    assert any(NOTEBOOK in n and "larger than 20 MB" in n and "Clear Outputs" in n for n in result.notes), result.notes


def test_code_over_the_limit_once_outputs_are_dropped_is_still_refused(tmp_path):
    path = tmp_path / NOTEBOOK
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1\n" + "# filler\n" * (intake.notebook_limits(LESSON)["bytes"] // 9))]
    nbformat.write(nb, str(path))
    with pytest.raises(intake.NotebookTooLarge, match="outputs aside"):
        intake.notebook_code_cells(path, lesson=LESSON)


def test_outputs_built_to_cost_memory_are_read_within_the_limit_or_refused(tmp_path):
    """19 MB of tiny JSON values in one cell's outputs (~700 MB as Python objects, were they all built at
    once in the grader's process). Read in the limited helper: the grader's own memory does not grow by
    more than the text it keeps, and the answer is the code or a refusal that says to clear outputs."""
    path = tmp_path / NOTEBOOK
    code = json.dumps("x = 1\n")
    tiny = "{}," * (19 * MB // 3)
    path.write_text('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", '
                    f'"metadata": {{}}, "execution_count": 1, "source": {code}, "outputs": [{tiny}{{}}]}}]}}')
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        assert intake.notebook_code_cells(path, lesson=LESSON) == ["x = 1\n"]
    except intake.NotebookTooLarge as refused:
        assert "Clear Outputs" in str(refused)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KB: well under 100 MB


def test_a_damaged_notebook_is_reported_not_crashed_on(tmp_path):
    path = tmp_path / NOTEBOOK
    path.write_text('{"nbformat": 4, "cells": [')
    with pytest.raises(ValueError):
        intake.notebook_code_cells(path, lesson=LESSON)


def test_an_old_notebook_is_read_after_the_same_stripping(tmp_path):
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {"name": "old"}, "worksheets": [
        {"cells": [{"cell_type": "code", "input": "y = 2", "language": "python", "metadata": {},
                    "outputs": [{"output_type": "display_data", "png": _picture(1000)}]}], "metadata": {}}]}))
    assert intake.notebook_code_cells(path, lesson=LESSON) == ["y = 2"]


def test_the_student_notebooks_test_cells_let_run_all_go_on():
    nb = notebook.build(student=True, lesson=LESSON)
    tests = [c for c in nb.cells if c.cell_type == "code" and notebook.is_test_cell(c.source, lesson=LESSON)
             and c.source.startswith("visible_test(")]
    assert tests and len(tests) == len(notebook.visible_tests(lesson=LESSON))
    assert all("raises-exception" in c.metadata.get("tags", []) for c in tests)
    others = [c for c in nb.cells if c.cell_type == "code" and c not in tests]
    assert all("raises-exception" not in c.metadata.get("tags", []) for c in others)

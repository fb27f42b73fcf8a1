"""What the hidden test cells of nbgrader source notebooks built before the kit's autograde step import.

Those cells ran `from grader.hidden_cell import hidden_test; hidden_test("part.test", globals())` in the
student's kernel, after the student's cells, where a student cell could replace this module or patch
what it used. They no longer grade anything here: the kit's autograde step (grader/release/nbgrader_autograde.py)
reads their rubric ids from the gradebook and grades the notebook in nbgrader's own process. Run in a
kernel, this function only says so, and under `nbgrader autograde` (which should run no cell of such a
notebook) it stops the run rather than let a cell decide points.
"""
from __future__ import annotations

import os

from grader.release.notebook import NOT_SET_UP


def hidden_test(test: str, namespace: dict | None = None) -> None:
    """A hidden test cell of an older source notebook: graded by the kit's autograde step, never here."""
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        os.write(2, f"\n{NOT_SET_UP}\n".encode())
        os._exit(70)
    raise RuntimeError(f"hidden test {test} is graded by nbgrader autograde with the kit's step "
                       "(grader/release/nbgrader_autograde.py), not in a notebook's kernel")

"""The body of the instructor notebook's hidden test cells (grader/notebook.py writes the cells).

Apart from grader.notebook because it needs the intake and the engine, which themselves read the
notebook's rules (grader.notebook.is_test_cell): the stage that builds notebooks imports neither.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from grader.lesson import load_lesson
from grader.notebook import is_test_cell


class HiddenTestFailed(AssertionError):
    """A hidden test failed in an nbgrader cell; the message is the feedback `grader grade` gives."""


def _ran_cells(namespace: dict) -> list[str]:
    """The code cells this kernel ran, in order: IPython's raw input history (nbgrader runs each cell once,
    top to bottom), or namespace["In"] where cells run without IPython (the kit's own tests do that)."""
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = lambda: None  # noqa: E731
    shell = get_ipython()
    if shell is not None:
        return list(shell.history_manager.input_hist_raw[1:])
    return list(namespace.get("In", [""])[1:])


def hidden_test(test: str, namespace: dict) -> None:
    """An autograded cell of the instructor's notebook: grade one hidden test (`part.test`, a rubric id) on
    the code this notebook ran, exactly as `python -m grader grade` grades a handed-in notebook.

    The cells that ran (test cells left out) become the contract modules the way the grader's intake
    makes them (grader.intake), and the engine runs that one hidden test on them in this process
    (grader.score.grade_in_process): each part over the grader's stand-ins, with the rubric's points
    and the feedback's text. The instructor's nbgrader environment has the kit installed; students
    never see this cell's body. A failed test raises, so nbgrader gives the cell 0 points."""
    from grader import intake, score

    lesson = load_lesson()
    cells = [intake.neutralise_magics(cell) for cell in _ran_cells(namespace) if not is_test_cell(cell)]
    with tempfile.TemporaryDirectory(prefix="hidden-test-") as tmp:
        folder = Path(tmp)
        (folder / f"{intake.notebook_module_name()}.py").write_text(intake.notebook_module_source(lesson.notebook, cells),
                                                                    encoding="utf-8")
        for module in lesson.modules:
            (folder / f"{module}.py").write_text(intake.contract_module_source(lesson.notebook, module),
                                                 encoding="utf-8")
        result = score.grade_in_process(folder, lesson.notebook, tests={test})
    found = [t for t in result.tests if t.name == test]
    if not found:
        raise KeyError(f"{test} is not a hidden test with points in {lesson.rubric_path.name}: rebuild the notebook "
                       "(python -m grader.notebook --source)")
    if found[0].status != "passed":
        raise HiddenTestFailed(f"{found[0].title}\n\n{found[0].output}")
    print(f"{test}: passed ({found[0].score:g} points)")

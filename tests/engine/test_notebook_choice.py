"""Which of a submission's notebooks and .py files is graded (grader/intake/submissions.py; issue 13, point 5).

Whatever name a student gives the notebook, the one that differs from the released template is
graded; of several, the most recently changed, the others named in a note; edited .py files beside a
notebook are graded instead of it, with a note; the release handed in untouched is graded as its
stubs, with a note. Real folders, graded beside honest siblings.
"""
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import engine_helpers  # noqa: E402
from engine_helpers import TOY, descendants, kept_zygotes, processes_of, settled, shared_config  # noqa: E402

from grader.lesson import load_lesson  # noqa: E402

from grader.release import notebook

from grader.release import student_release as release

from grader.running import grade as run  # noqa: E402

CONFIG = shared_config(call_timeout=3.0)
LESSON = load_lesson(str(TOY))  # the toy: `activations` (softmax), and `classifier` graded over the grader's softmax
REFERENCE = LESSON.solutions
NOTEBOOK = LESSON.notebook  # the released notebook's name
FULL = {part: (LESSON.points[part], LESSON.points[part]) for part in LESSON.modules}
# The bug a notebook student may carry: softmax without its max shift, which overflows on large inputs.
SHIFT = "shifted = x - x.amax(dim=dim, keepdim=True)"
OLD, NEW = 1_700_000_000, 1_700_086_400  # a day apart


def make_submission(folder: Path) -> Path:
    return engine_helpers.make_submission(folder, solutions=REFERENCE)


def components(record: dict) -> dict:
    return engine_helpers.components(record, LESSON.modules)


def cells(*, bug: bool = False) -> list[str]:
    """A notebook student's code cells: the reference, or the reference with softmax's shift left out."""
    out = ["%matplotlib inline"]
    for name in LESSON.modules:
        src = (REFERENCE / f"{name}.py").read_text()
        if bug:
            src = src.replace(SHIFT, "shifted = x")
        out.append("\n".join(l for l in src.splitlines() if not l.startswith(tuple(f"from {m} " for m in LESSON.modules))))
    assert not bug or not any(SHIFT in c for c in out), "the bug was planted"
    return out


def write_notebook(path: Path, code: list[str], when: int | None = None) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# my work")] + [nbformat.v4.new_code_cell(c) for c in code]
    nbformat.write(nb, str(path))
    if when is not None:
        os.utime(path, (when, when))


def released(folder: Path) -> Path:
    """What a student starts from: the released stubs and notebook, untouched."""
    folder.mkdir(parents=True)
    for name, text in release.stub_texts(lesson=LESSON).items():
        (folder / name).write_text(text, encoding="utf-8")
    notebook.write(notebook.build(student=True, lesson=LESSON), folder / NOTEBOOK)
    return folder


def build_class(subs: Path) -> None:
    # Honest siblings: a .py student (the released notebook lies beside the files) and a notebook student.
    make_submission(subs / "honest_py")
    notebook.write(notebook.build(student=True, lesson=LESSON), subs / "honest_py" / NOTEBOOK)
    write_notebook(released(subs / "honest_nb") / NOTEBOOK, cells())
    # The student's notebook under another name, beside the untouched template and stubs.
    write_notebook(released(subs / "renamed") / "homework (mine).ipynb", cells())
    # Two edited notebooks: the most recently changed one is graded, whichever name it has.
    for name, good_is_newer in (("two_good_newer", True), ("two_bug_newer", False)):
        folder = released(subs / name)
        write_notebook(folder / NOTEBOOK, cells(bug=True), OLD if good_is_newer else NEW)
        write_notebook(folder / "final.ipynb", cells(), NEW if good_is_newer else OLD)
    # Edited .py files beside an edited notebook: the .py files.
    make_submission(subs / "py_and_nb")
    write_notebook(subs / "py_and_nb" / NOTEBOOK, cells(bug=True))
    # The release handed in as it was.
    released(subs / "as_released")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("notebook-choice")
    build_class(root / "subs")
    out = root / "out"
    assert run.main(submissions=root / "subs", out=out, jobs=2, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    yield out
    uids = range(CONFIG.uid_base, CONFIG.uid_base + 4)
    assert settled(lambda: processes_of(uids)) == []
    assert settled(lambda: descendants(os.getpid())) == []


def record(out: Path, name: str) -> dict:
    return json.loads((out / name / "record.json").read_text())


def notes(out: Path, name: str) -> str:
    return "\n".join(record(out, name)["notes"])


def test_honest_siblings_get_full_code_points_and_no_note_about_files(graded):
    for name in ("honest_py", "honest_nb"):
        assert components(record(graded, name)) == FULL, name
        assert record(graded, name)["status"] == "ok"
    assert "notebook" not in notes(graded, "honest_py")


def test_a_renamed_notebook_beside_the_untouched_template_is_graded(graded):
    assert components(record(graded, "renamed")) == FULL
    text = notes(graded, "renamed")
    assert f"{NOTEBOOK} is the released notebook" in text, text
    assert "untouched stubs" in text


def test_of_two_edited_notebooks_the_most_recently_changed_is_graded(graded):
    assert components(record(graded, "two_good_newer")) == FULL
    assert components(record(graded, "two_bug_newer"))["activations"] < FULL["activations"]
    assert components(record(graded, "two_bug_newer"))["classifier"] == FULL["classifier"]
    assert f"graded final.ipynb, the most recently changed; not graded: {NOTEBOOK}" in notes(graded, "two_good_newer")
    assert f"graded {NOTEBOOK}, the most recently changed; not graded: final.ipynb" in notes(graded, "two_bug_newer")


def test_edited_py_files_beside_a_notebook_are_graded_with_a_note(graded):
    assert components(record(graded, "py_and_nb")) == FULL
    assert f"graded your .py files; the notebook {NOTEBOOK} was not graded" in notes(graded, "py_and_nb")
    assert "graded your .py files" in (graded / "py_and_nb" / "feedback.md").read_text()


def test_the_release_handed_in_untouched_is_graded_as_its_stubs_with_a_clear_note(graded):
    r = record(graded, "as_released")
    assert all(got == 0 for got, _ in components(r).values())
    assert "nothing here differs from the released files" in notes(graded, "as_released")
    assert "graded the .py stubs" in (graded / "as_released" / "feedback.md").read_text()

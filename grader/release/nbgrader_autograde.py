"""The kit's step in `nbgrader autograde`: a lesson notebook's hidden tests graded by the kit, in nbgrader's
own process, never in the student's kernel.

nbgrader autogrades a notebook with a list of preprocessors (`Autograde.autograde_preprocessors`):
sanitising first (outputs cleared, every locked and graded cell restored from the gradebook), then
`Execute` runs the notebook in a kernel and `SaveAutoGrades` gives each graded cell its points from
its outputs (an error: 0; nothing: full points). `HiddenTests` takes `Execute`'s place. For a notebook
whose cells in the gradebook call `hidden_test(...)` (the instructor's notebook of grader/release/notebook.py),
it starts no kernel: it writes the notebook, as nbgrader sanitised it, into a class folder of one and
grades it with `grader grade`'s own run (grader/running/grade.py: the intake, the scan, the sandbox, the hidden
tests), then writes each hidden test's outcome into its cell as the output SaveAutoGrades reads (the
test's points; the feedback's text). The student's code runs once, in the sandbox; nothing a cell
could do in a kernel reaches a verdict. Any other notebook is executed as `Execute` does.

A set-up fault (the lesson not found, a sandbox that refuses to start, an engine fault) raises
`KitNotReady` with what to do: nbgrader reports it, saves no points for the notebook and exits
non-zero; a correct student never gets 0 for the instructor's set-up.

Enable it in nbgrader_config.py, in the kit's venv (`make setup` installs the kit there):

    from grader.release.nbgrader_autograde import use_the_kit
    use_the_kit(c)

The lesson is the kit's (its only one, or the kit's default_lesson); a kit with several names the one to
grade with `use_the_kit(c, lesson="NAME")` (or a path), which sets `c.HiddenTests.lesson`.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import io
import json
import tempfile
import time
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import Execute
from traitlets import Float, Integer, Unicode

# Said once per process when the sandbox or the lesson cannot work: every later notebook fails the same way.
_not_ready: list[str] = []
# nbgrader makes its preprocessors anew for each notebook, so what this step builds once for every notebook
# of an autograde lives here, in nbgrader's process: the lesson values, by name, and the kept sandbox
# (_kept_zygotes).
_lessons: dict = {}
_keeper = None


class KitNotReady(RuntimeError):
    """The kit cannot grade on this machine or with this set-up; the message says what to do."""


def use_the_kit(c, lesson: str | None = None) -> None:
    """Put `HiddenTests` in the place of nbgrader's `Execute` in autograde's preprocessors (`c`: the
    config of nbgrader_config.py), keeping the rest of the list, the instructor's own if they set one.
    `lesson`: the lesson's name under grader/ or its folder's path (default: the kit's, as `python -m grader`)."""
    if lesson:
        c.HiddenTests.lesson = str(lesson)
    from nbgrader.converters.autograde import Autograde

    chosen = c.Autograde.get("autograde_preprocessors") if "autograde_preprocessors" in c.Autograde else None
    steps = list(chosen or Autograde.class_traits()["autograde_preprocessors"].default())
    if not any(step is Execute or step == "nbgrader.preprocessors.Execute" for step in steps):
        raise KitNotReady("nbgrader_config.py: Autograde.autograde_preprocessors has no Execute step for the kit's "
                          "step to replace; put Execute back in the list (or leave the list unset), then "
                          "call use_the_kit(c) after it")
    c.Autograde.autograde_preprocessors = [HiddenTests if step is Execute or step == "nbgrader.preprocessors.Execute"
                                           else step for step in steps]


class HiddenTests(Execute):
    """nbgrader's Execute, except for the kit's notebooks: those are graded by the kit (see the module)."""

    sandbox_uid_base = Integer(0, help="The sandbox's first uid (0: the kit's default, as `grader grade` uses); "
                               "set another to autograde beside a grading run on the same machine").tag(config=True)
    call_timeout = Float(0.0, min=0.0, help="Wall seconds one call of a student's code may run in the sandbox before "
                         "it is stopped and its test fails (0: the kit's default, as `grader grade` uses)").tag(config=True)
    lesson = Unicode("", help="The lesson: a name under the kit's grader/ or the path of a lesson folder (empty: the "
                     "kit's only lesson, or its default_lesson, as `python -m grader`)").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        info = (resources or {}).get("nbgrader", {})
        hidden = _hidden_cells(info) if info.get("db_url") else {}
        if not hidden:
            return super().preprocess(nb, resources, km)
        start = time.monotonic()
        lesson = _the_lesson(self.lesson)
        zygotes = _kept_zygotes()
        started = zygotes.started
        result = grade_notebook(nb, lesson=lesson, uid_base=self.sandbox_uid_base, zygotes=zygotes,
                                call_timeout=self.call_timeout)
        by_test = {test.name: test for test in result.tests}
        unknown = sorted(set(hidden.values()) - set(by_test))
        if unknown:
            raise KitNotReady(f"the notebook's hidden test cells name {', '.join(unknown)}, which the kit's lesson does "
                              "not grade: the course's source notebook comes from another version of the kit; "
                              "regenerate it (python -m grader.release.notebook --source --out <course>/source/<assignment>), "
                              "run nbgrader generate_assignment again, then autograde")
        present = {cell.metadata.get("nbgrader", {}).get("grade_id") for cell in nb.cells}
        for grade_id, source in _missing_cells(info, hidden, present):
            nb.cells.append(source)  # a hidden test cell the student deleted: graded all the same
        notes = "\n".join(f"- {note}" for note in result.notes)
        from grader.results.feedback import lesson_words, student_output

        words = lesson_words(lesson)  # a failed test's words are data on its record; they come from the rubric
        first = True
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in hidden:
                test = by_test[hidden[grade_id]]
                cell.outputs = _outputs(test, float(cell.metadata["nbgrader"]["points"]), notes if first else "",
                                        student_output(test, words, cut=False))
                cell.execution_count = None
                first = False
        self.log.info("Graded the hidden tests of %s with the kit in %.1f s: %g of %g points (%s; %s)",
                      info.get("notebook"), time.monotonic() - start,
                      sum(by_test[t].score for t in hidden.values()),
                      sum(by_test[t].max_score for t in hidden.values()), result.status,
                      "the sandbox started" if zygotes.started > started else "the sandbox kept from the last notebook")
        return nb, resources


def _config(default, **settings):
    """The sandbox's config with the settings that are not 0, or None (the run's own default) when all are."""
    chosen = {name: value for name, value in settings.items() if value}
    return dataclasses.replace(default, **chosen) if chosen else None


def _hidden_cells(info: dict) -> dict[str, str]:
    """grade id -> rubric id of the notebook's hidden test cells, read from the gradebook (the instructor's
    source notebook as generate_assignment saved it), never from the student's copy."""
    from grader.release.notebook import hidden_test_of

    try:
        with Gradebook(info["db_url"]) as gradebook:
            source = gradebook.find_notebook(info["notebook"], info["assignment"])
            graded = {cell.name for cell in source.grade_cells}
            found = {cell.name: hidden_test_of(cell.source) for cell in source.source_cells if cell.name in graded}
    except MissingEntry:
        return {}
    return {grade_id: test for grade_id, test in found.items() if test}


def _missing_cells(info: dict, hidden: dict[str, str], present: set):
    """(grade id, cell) for each hidden test cell missing from the notebook, rebuilt from the gradebook."""
    missing = [grade_id for grade_id in hidden if grade_id not in present]
    if not missing:
        return []
    with Gradebook(info["db_url"]) as gradebook:
        cells = []
        for grade_id in missing:
            source = gradebook.find_source_cell(grade_id, info["notebook"], info["assignment"])
            graded = gradebook.find_graded_cell(grade_id, info["notebook"], info["assignment"])
            cell = nbformat.v4.new_code_cell(source.source)
            cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "locked": True, "points": graded.max_score,
                                         "schema_version": 3, "solution": False, "task": False,
                                         "checksum": source.checksum}
            cells.append((grade_id, cell))
    return cells


def _outputs(test, points: float, notes: str, output: str) -> list:
    """The cell's outputs for one hidden test: SaveAutoGrades gives full points to a cell without an error or
    a result, 0 to a cell with an error, and a result's number otherwise."""
    score = points if test.max_score == 0 else round(points * test.score / test.max_score, 4)
    title = test.title or test.name
    text = f"{title}: {'passed' if test.status == 'passed' else 'failed'}, {score:g} of {points:g} points\n"
    if notes:
        text += f"Notes on this notebook:\n{notes}\n"
    if test.status == "passed" and score >= points:
        return [nbformat.v4.new_output("stream", name="stdout", text=text)]
    if score <= 0:
        return [nbformat.v4.new_output("stream", name="stdout", text=text),
                nbformat.v4.new_output("error", ename="HiddenTestFailed", evalue=title,
                                       traceback=(output or "failed").split("\n"))]
    return [nbformat.v4.new_output("execute_result", data={"text/plain": repr(score)}, execution_count=None),
            nbformat.v4.new_output("stream", name="stdout", text=text + (output or "") + "\n")]


def _kept_zygotes():
    """The sandbox kept from one notebook to the next in this process (grader.sandbox.zygote.KeptZygotes): made by
    the first notebook, ended when nbgrader exits. Held in a plain global, not a functools cache: the kit keeps
    no module-level cache of what it derives from a lesson (tests/kit/test_ambient_lesson.py), and this holds
    zygotes keyed by the lessons' own data, started for whichever lesson each notebook is graded with."""
    global _keeper
    if _keeper is None:
        from grader.sandbox.zygote import KeptZygotes

        _keeper = KeptZygotes()
        atexit.register(_keeper.close)
    return _keeper


def _the_lesson(name: str):
    """The lesson value this nbgrader process grades with (an entry point: built here, once, from the config's
    `HiddenTests.lesson`); a lesson that cannot be loaded stops autograde with what to do."""
    if _not_ready:
        raise KitNotReady(_not_ready[0])
    if name in _lessons:
        return _lessons[name]
    try:
        from grader.lesson import load_lesson

        _lessons[name] = load_lesson(name or None)
        return _lessons[name]
    except Exception as error:  # noqa: BLE001 - whatever stops the lesson loading stops the run, said once
        _not_ready.append(f"the kit could not load its lesson ({type(error).__name__}: {error}); check "
                          "c.HiddenTests.lesson in nbgrader_config.py (use_the_kit(c, lesson=...)) and that the "
                          "kit's folder is complete (make setup in it), then autograde again")
        raise KitNotReady(_not_ready[0]) from error


def grade_notebook(nb, *, lesson, uid_base: int = 0, zygotes=None, call_timeout: float = 0.0):
    """Grade one notebook exactly as `python -m grader grade` grades a class folder holding only that notebook
    (the intake, the scan, the sandbox, the hidden tests) and return its record (grader.results.records); the
    class's outputs (gradebook, report, similarity) are not written: nothing would read them.
    `lesson`: the lesson value. `zygotes` (grader.sandbox.zygote.KeptZygotes): the sandbox kept between the
    notebooks of one autograde, each still graded in a fresh child of its own, as the rows of a class run are."""
    if _not_ready:
        raise KitNotReady(_not_ready[0])
    from grader.running import grade as run
    from grader.sandbox import DEFAULT_CONFIG
    from grader.results.storage import record_from_json

    with tempfile.TemporaryDirectory(prefix="nbgrader-autograde-") as tmp:
        folder, out = Path(tmp) / "class", Path(tmp) / "out"
        folder.mkdir()
        nbformat.write(nb, str(folder / lesson.notebook))
        said = io.StringIO()
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            code = run.main(submissions=folder, out=out, jobs=1, lesson=lesson,
                            config=_config(DEFAULT_CONFIG, uid_base=uid_base, call_timeout=call_timeout,
                                           import_timeout=call_timeout),  # a course's call limit holds imports too
                            zygotes=zygotes, class_stage=False)  # only the record is read
        record = out / Path(lesson.notebook).stem / "record.json"
        if code != run.EXIT_OK or not record.is_file():
            message = _what_went_wrong(said.getvalue())
            if any(line.startswith("grade:") for line in said.getvalue().splitlines()):
                _not_ready.append(message)  # the run's own refusal (the sandbox's start-up check): the next is the same
            raise KitNotReady(message)
        result = record_from_json(json.loads(record.read_text(encoding="utf-8")))
    if result.status == "engine-error":
        raise KitNotReady("the kit's grading engine failed on this notebook: " + "; ".join(result.notes)
                          + "; run nbgrader autograde again with --force for this student")
    return result


def _what_went_wrong(said: str) -> str:
    lines = [line for line in said.splitlines() if line.startswith(("grade:", "engine fault"))]
    return ("the kit could not grade this notebook: " + (" ".join(lines) or said.strip()[-2000:] or "no reason given")
            + " (the same command, `python -m grader grade`, says the same on a folder of notebooks; "
            "`python -m grader.sandbox --check` shows what this machine's sandbox can do)")

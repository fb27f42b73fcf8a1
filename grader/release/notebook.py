"""Stage "notebook": build the lesson's notebook from its reference, visible tests and rubric.

Two versions come out of the same cells:

- the *student* notebook (`student=True`), shipped in the release: each solution region is the
  same TODO + `raise NotImplementedError` as the .py stubs (grader/release/stubs.py); after each part come
  its test cells, one per visible test of the lesson's assignment folder, each worth that test's
  points in the feedback on push. A test cell runs that very test with pytest, on the notebook's
  code, through tools/notebook_tests.py (grader/templates/notebook_tests.py): the same checks,
  messages and hints as `make test`, from the one source, the visible test files.
- the *source* notebook (instructor only, `student=False`), in nbgrader's conventions: solution
  cells hold the reference between `### BEGIN SOLUTION` / `### END SOLUTION`; each visible test cell
  is an nbgrader grade cell worth 0 points, so `nbgrader validate` fails on a test the notebook
  fails; one autograded cell per hidden test carries the rubric's points. A hidden test cell holds
  no test: it names its hidden test (`hidden_test("part.test")`), and the kit's autograde step
  (grader/release/nbgrader_autograde.py, enabled in nbgrader_config.py) grades the notebook with the kit's
  engine and sandbox in nbgrader's own process and writes each test's points and feedback into its
  cell. Nothing runs in the student's kernel at autograde, so nothing a cell does there can change
  a hidden verdict. A course puts `write_nbgrader_source`'s folder (the notebook, with the files its
  visible test cells need) in `source/<lesson>/` and runs `nbgrader generate_assignment`.

The prose (intro, closing) is the lesson's (its notebook texts file, lesson.toml [notebook]).
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

from grader.release import stubs
from grader.results.storage import hash_files, write_atomic
from grader import lesson as lessons
from grader.lesson import read_rubric, rubric_points

ROOT = Path(__file__).resolve().parents[2]


TEMPLATES = ROOT / "grader" / "templates"
# Ships as tools/notebook_tests.py: runs the visible tests in the notebook's kernel, on its code.
RUNNER = TEMPLATES / "notebook_tests.py"
CI_FEEDBACK = TEMPLATES / "ci_feedback.py"

# The cell that readies the test cells: the runner, told which modules the notebook stands for and which
# name each imports from a sibling (where the tests put a stand-in, the notebook's name is rebound).
VISIBLE_SETUP = '''\
# Each cell below that calls visible_test(...) runs one test of tests/ on this notebook's code: the
# same test, checks, messages and hints as `make test` on the .py files (tools/notebook_tests.py).
import sys

if "tools" not in sys.path:
    sys.path.insert(0, "tools")
from notebook_tests import VisibleTests

visible_test = VisibleTests(globals(), parts={parts!r},
                            sibling_imports={siblings!r})'''
VISIBLE_CALL = "visible_test({test!r})"
# The instructor's notebook: what the hidden test cells call. Outside autograde a hidden test cell only
# says when it is graded. Under `nbgrader autograde` no cell should run at all (the kit's step grades the
# notebook in nbgrader's process): if one does, the course's nbgrader_config.py lacks that step, and the
# cell stops the run (a dead kernel fails autograde for the notebook) rather than give its points.
NOT_SET_UP = ("nbgrader autograde ran a hidden test cell in the student's kernel: the course's nbgrader_config.py "
              "does not enable the grading kit's autograde step, or could not import it (see the error printed "
              "when nbgrader read its config). Run nbgrader from the kit's venv, end nbgrader_config.py with "
              "`from grader.release.nbgrader_autograde import use_the_kit` and `use_the_kit(c)` (the kit's README, "
              "section nbgrader), then run nbgrader autograde again with --force.")
HIDDEN_SETUP = '''\
# The hidden test cells below are graded when the course autogrades this notebook, with the course's
# grading kit, on the code of this notebook; here they only say so.
import os

NOT_SET_UP = (
MESSAGE)


def hidden_test(test):
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        os.write(2, f"\\n{NOT_SET_UP}\\n".encode())
        os._exit(70)
    print(f"hidden test {test}: graded when your notebook is autograded")'''.replace(
    "MESSAGE", "\n".join(f"    {line!r}" for line in textwrap.wrap(NOT_SET_UP, 96, drop_whitespace=False)))
# One autograded cell per hidden test in the instructor's notebook: its title, its points, its rubric id.
HIDDEN_CELL = '''\
# Hidden test ({points:g} points): {title}
hidden_test({test!r})'''
# The hidden test cells of notebooks built before the kit's autograde step (grader/hidden_cell.py):
# the step grades them too, from their rubric id.
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
HIDDEN_TEST_ID = re.compile(r"""^hidden_test\((?:"([^"\\\n]+)"|'([^'\\\n]+)')(?:, globals\(\))?\)$""", re.M)
_TEST_CALL_LINE = re.compile(r"""^(?:visible|hidden)_test\((?:"[^"\\\n]*"|'[^'\\\n]*')\)$""")

# --------------------------------------------------------------------------- source splitting

def _split(source: str, *, lesson) -> tuple[str, list[str], str]:
    """(docstring's first paragraph, library import lines, the rest) of one solution file.

    Imports of sibling modules are dropped: in a notebook every cell shares one namespace.
    """
    tree = ast.parse(source)
    lines = source.splitlines()
    drop: set[int] = set()
    imports: list[str] = []
    doc = ast.get_docstring(tree) or ""
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        drop.update(range(body[0].lineno - 1, body[0].end_lineno))
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            drop.update(range(node.lineno - 1, node.end_lineno))
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if module not in lesson.modules:
                imports.append(ast.get_source_segment(source, node))
    rest = "\n".join(line for n, line in enumerate(lines) if n not in drop).strip("\n")
    return doc.split("\n\n")[0], imports, rest


def _to_nbgrader_markers(code: str) -> str:
    """`# BEGIN SOLUTION (Task N · name)` -> `### BEGIN SOLUTION (Task N · name)`; END likewise."""
    out = []
    for line in code.split("\n"):
        if stubs.BEGIN.match(line) or stubs.END.match(line):
            indent = line[: len(line) - len(line.lstrip())]
            line = indent + "##" + line.lstrip()
        out.append(line)
    return "\n".join(out)


# --------------------------------------------------------------------------- points

def component_points(rubric: Path | None = None, *, lesson) -> dict[str, float]:
    """Points per component, summed over every rubric entry that has `points`.

    An entry counts for the component its table path (or its `component` key) names.
    """
    rubric = rubric or lesson.rubric_path
    cells = lesson.notebook_cells
    if not rubric.exists():
        raise FileNotFoundError(f"{rubric} is missing: the notebook takes its points from the rubric, "
                                "so build it from a full checkout of the kit")
    totals = rubric_points(read_rubric(rubric), cells)
    missing = [c for c in cells if not totals.get(c)]
    if missing:
        raise ValueError(f"{rubric} gives no points to {', '.join(missing)}: add them there "
                         "(points live only in the rubric)")
    return {c: round(totals[c], 4) for c in cells}


# --------------------------------------------------------------------------- the lesson's texts and tests

def texts(path: Path | None = None, *, lesson) -> dict[str, str]:
    """The notebook's prose, from the lesson's folder: `intro` and `closing` (Markdown)."""
    path = path or lesson.notebook_texts
    with open(path, "rb") as f:
        data = tomllib.load(f)
    missing = [key for key in ("intro", "closing") if not isinstance(data.get(key), str)]
    if missing:
        raise ValueError(f"{path} has no {' or '.join(missing)} text: add it (Markdown, see the lesson's notebook.toml)")
    return {"intro": data["intro"], "closing": data["closing"]}


def visible_tests(assignment: Path | None = None, *, lesson) -> tuple[tuple[str, str], ...]:
    """(part, test id under tests/) of every visible test of `assignment` (the lesson's by default), asked
    of pytest once per lesson value and folder."""
    assignment = Path(assignment or lesson.assignment)
    return lesson.derived(f"notebook.visible_tests {assignment}", lambda: _visible_tests(assignment, lesson.modules))


def _visible_tests(assignment: Path, modules: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(part, test id under tests/) of every visible test, in the order `make test` runs them.

    Asked of pytest itself (a collection in a child process: the tests' conftest.py must not patch
    torch in this one), so the notebook's test cells are the .py tests, parametrised cases included.
    That child imports torch and every test file (~2 s of CPU), and every release, notebook and
    nbgrader source asks again in a new process: the answer is kept on disk under a digest of all
    it depends on (_collection_key), so a folder whose bytes, interpreter or pytest changed is asked anew."""
    key = _collection_key(assignment, modules)
    kept = _kept_collection(key)
    if kept is not None:
        return kept
    found = _collect_visible_tests(assignment, modules)
    _keep_collection(key, found)
    return found


def _collect_visible_tests(assignment: Path, modules: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts=",
                          "-p", "no:cacheprovider"],
                         cwd=assignment, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    found = []
    for line in run.stdout.splitlines():
        path, sep, name = line.strip().partition("::")
        if not sep or not path.startswith("tests/"):
            continue
        part = Path(path).stem.removeprefix("test_")
        if part not in modules:
            raise ValueError(f"{assignment / path} tests no part of the contract ({', '.join(modules)}): "
                             "name a visible test file tests/test_<part>.py")
        found.append((part, f"{path.removeprefix('tests/')}::{name}"))
    if run.returncode != 0 or not found:
        raise RuntimeError(f"could not list the visible tests of {assignment}: fix them so that `pytest "
                           f"--collect-only` passes there\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    return tuple(found)


# -- the collection kept on disk ---------------------------------------------------------------
# What pytest's collection of a folder depends on: every byte under the folder (its pytest.ini stops
# pytest at it: no conftest.py above is read), the interpreter and the packages that collect (pytest,
# its plugins, torch, which the test files import), and the environment variables pytest reads. Only
# a collection that succeeded is kept; a failing one raises each time, with pytest's words.
COLLECTION_CACHE_ENV = "GRADER_CACHE_DIR"


def _collection_key(assignment: Path, modules: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    hash_files(digest, Path(assignment), [p for p in Path(assignment).rglob("*")
                                          if p.is_file() and not {"__pycache__", ".pytest_cache"} & set(p.parts)])
    versions = []
    for dist in ("pytest", "torch", "numpy"):
        try:
            versions.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist}=absent")
    plugins = sorted(f"{e.name}={e.value}" for e in metadata.entry_points(group="pytest11"))
    context = [os.path.realpath(sys.executable), sys.version, *versions, *plugins, *modules,
               *(f"{k}={os.environ.get(k, '')}" for k in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPATH"))]
    digest.update("\n".join(context).encode())
    return digest.hexdigest()


def cache_dir() -> Path:
    """The kit's cache folder, private to the user: GRADER_CACHE_DIR, else the user's cache folder
    (XDG_CACHE_HOME, else ~/.cache), /grader."""
    if os.environ.get(COLLECTION_CACHE_ENV):
        return Path(os.environ[COLLECTION_CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grader"


def _kept_collection(key: str) -> tuple[tuple[str, str], ...] | None:
    try:
        data = json.loads((cache_dir() / f"visible-tests-{key}.json").read_text(encoding="utf-8"))
        found = tuple((str(part), str(test)) for part, test in data)
    except (OSError, ValueError, TypeError):
        return None  # none kept, or not a list this code wrote: collect again
    return found or None


def _keep_collection(key: str, found: tuple[tuple[str, str], ...]) -> None:
    """Best effort: a cache folder that cannot be written only means the next run collects again."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / f"visible-tests-{key}.json", json.dumps([list(pair) for pair in found]), durable=False)
    except OSError:
        pass


def visible_points(rubric: Path | None = None, *, lesson) -> dict[str, float]:
    """Test id -> its points: each visible test's share of its part, as the feedback on push counts them
    (tools/ci_feedback.py, `_shares`), so a notebook's test cells are worth what the .py tests are."""
    spec = importlib.util.spec_from_file_location("_ci_feedback_template", CI_FEEDBACK)
    feedback = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(feedback)
    points, tests = component_points(rubric, lesson=lesson), visible_tests(lesson=lesson)
    shares = {}
    for part in lesson.modules:
        mine = sorted(test for p, test in tests if p == part)  # the order ci_feedback shares them in
        shares.update(zip(mine, feedback._shares(points[part], len(mine))))
    return shares


def hidden_tests(rubric: Path | None = None, *, lesson) -> list[tuple[str, str, dict]]:
    """(part, rubric id, entry) of every hidden test with points, in the rubric's order."""
    table = read_rubric(rubric or lesson.rubric_path)
    return [(part, f"{part}.{test}", entry) for part in lesson.modules
            for test, entry in table.get(part, {}).items()
            if isinstance(entry, dict) and isinstance(entry.get("points"), (int, float))]


def visible_setup(*, lesson) -> str:
    return VISIBLE_SETUP.format(parts=tuple(lesson.modules),
                                siblings={m: tuple(s) for m, s in lesson.sibling_imports.items()})


def is_test_cell(source: str, *, lesson) -> bool:
    """A cell that runs tests and defines nothing: the released test-cell set-up, visible_test(...) calls,
    the hidden tests' set-up and cells. The grader leaves them out when it runs a notebook (running the visible tests in the
    sandbox would only cost time), and so does a hidden test cell."""
    text = source.replace("\r\n", "\n").strip()  # saved with CRLF line ends, it is the same cell (held-out s57)
    if text in (visible_setup(lesson=lesson).strip(), HIDDEN_SETUP.strip()) or BEGIN_HIDDEN in text:
        return True
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return bool(lines) and all(_TEST_CALL_LINE.match(line) for line in lines)


def hidden_test_of(source: str) -> str | None:
    """The rubric id a hidden test cell of the instructor's notebook names (this kit's cells and those of
    notebooks built before its autograde step), or None."""
    found = HIDDEN_TEST_ID.search(source)
    return (found.group(1) or found.group(2)) if found else None


# --------------------------------------------------------------------------- building

def _cell_id(name: str) -> str:
    return name.replace("_", "-")


def _markdown(name: str, text: str):
    import nbformat

    cell = nbformat.v4.new_markdown_cell(text.strip("\n"))
    cell.id = _cell_id(name)
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": name, "locked": True,
                                 "schema_version": 3, "solution": False, "task": False}
    return cell


def _code(name: str, code: str, *, solution=False, points=None):
    import nbformat

    cell = nbformat.v4.new_code_cell(code.strip("\n"))
    cell.id = _cell_id(name)
    meta = {"grade": points is not None, "grade_id": name, "locked": not solution,
            "schema_version": 3, "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    cell.metadata["nbgrader"] = meta
    return cell


def _test_cell_id(prefix: str, name: str) -> str:
    """A cell id (and nbgrader grade id) for a test: letters, digits, - and _, at most 64 characters."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", name.replace("::", "-").removesuffix("]")).strip("_")
    text = f"{prefix}-{name}"
    if len(text) > 64:
        text = text[:55] + "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return text


def build(*, student: bool, solutions: Path | None = None, rubric: Path | None = None, lesson):
    """The lesson's notebook: the nbgrader source version (student=False) or the student version.

    Both hold, after each part's solution cell, one cell per visible test (the student version gives
    each the points the feedback on push gives that test; the source version 0, so that `nbgrader
    validate` reports a failing one). The source version also holds one autograded cell per hidden
    test, worth the rubric's points, which the kit's autograde step grades (grader/release/nbgrader_autograde.py)."""
    import nbformat

    solutions = solutions or lesson.solutions
    prose = texts(lesson=lesson)
    shares = visible_points(rubric, lesson=lesson)
    parts, imports = [], []
    for module in lesson.modules:
        source = (solutions / f"{module}.py").read_text(encoding="utf-8")
        doc, found, reference = _split(source, lesson=lesson)
        _, _, stub = _split(stubs.make_stub(source), lesson=lesson)
        imports += [line for line in found if line not in imports]
        parts.append((module, doc, reference, stub))

    cells = [_markdown("intro", prose["intro"]), _code("setup", "\n".join(imports)),
             _code("visible_tests", visible_setup(lesson=lesson))]
    if not student:
        cells.append(_code("hidden_tests", HIDDEN_SETUP))
    hidden = hidden_tests(rubric, lesson=lesson)
    for module, doc, reference, stub in parts:
        cells.append(_markdown(f"about_{module}", f"## `{module}`: {doc}"))
        code = stub if student else _to_nbgrader_markers(reference)
        cells.append(_code(f"solution_{module}", code, solution=True))
        for part, test in visible_tests(lesson=lesson):
            if part == module:
                cell = _code(_test_cell_id(f"test_{part}", test.split("::", 1)[1].removeprefix("test_")),
                             VISIBLE_CALL.format(test=test), points=shares[test] if student else 0.0)
                # A failing test shows its report and "Run All" goes on to the next parts' tests, as
                # `make test` runs them all (Jupyter and nbclient honour this tag).
                cell.metadata["tags"] = ["raises-exception"]
                cells.append(cell)
        if not student:
            for part, test, entry in hidden:
                if part == module:
                    cells.append(_code(_test_cell_id("hidden", test.replace(".", "-")),
                                       HIDDEN_CELL.format(points=entry["points"], title=entry.get("title", test),
                                                          test=test),
                                       points=float(entry["points"])))
    cells.append(_markdown("closing", prose["closing"]))

    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    nbformat.validate(nb)
    return nb


def write_nbgrader_source(folder: Path, *, lesson) -> Path:
    """The instructor's nbgrader source folder of the lesson (`source/<lesson>/` of a course): the source
    notebook and what its visible test cells need beside it (tests/ with tests/_feedback/, pytest.ini, tools/notebook_tests.py),
    which `nbgrader generate_assignment` releases with the notebook and `nbgrader autograde` restores from
    here. Returns the notebook's path."""
    folder.mkdir(parents=True, exist_ok=True)
    from grader.release.visible_tests import write_visible_tests

    if (folder / "tests").exists():
        shutil.rmtree(folder / "tests")
    write_visible_tests(folder, lesson=lesson)
    (folder / "tools").mkdir(exist_ok=True)
    (folder / "tools" / "notebook_tests.py").write_text(runner_source(), encoding="utf-8")
    return write(build(student=False, lesson=lesson), folder / lesson.notebook)


def runner_source() -> str:
    """tools/notebook_tests.py, as the release ships it beside the notebook."""
    return RUNNER.read_text(encoding="utf-8")

def write(nb, path: Path) -> Path:
    """Write deterministically (fixed cell ids, sorted keys, one trailing newline)."""
    import nbformat

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    return path


def code_of(nb) -> str:
    """The code cells joined, as a reader sees them (used to search a release for leaks)."""
    return "\n\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")


def main(*, out: str = "dist", student: bool = True, lesson) -> int:
    """Write `<out>/<the lesson's notebook>` (student version) or the nbgrader source folder in `<out>`."""
    target = Path(out) / lesson.notebook
    if student:
        write(build(student=True, lesson=lesson), target)
    else:
        write_nbgrader_source(Path(out), lesson=lesson)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m grader.release.notebook", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="dist")
    parser.add_argument("--source", action="store_true",
                        help="the instructor's nbgrader source folder (the notebook and the files its test cells need)")
    parser.add_argument("--lesson", default=None, metavar="NAME|PATH",
                        help="the lesson (default: as `python -m grader`)")
    args = parser.parse_args()
    sys.exit(main(out=args.out, student=not args.source, lesson=lessons.load_lesson(args.lesson)))  # an entry point

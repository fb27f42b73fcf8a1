"""Stage "release": build the student release in dist/<lesson>/ and dist/<lesson>.zip.

What a student gets (and nothing else):
- the stubs, generated from the lesson's reference by grader/release/stubs.py (never the reference);
- the visible tests, pytest.ini, the student README and Makefile (the lesson's assignment folder);
- the student tools: the assignment's tools/ if present, grader/judging/deliverables.py (the standalone
  checker) with the lesson's deliverable checks beside it (tools/deliverable_checks.py, and the
  files those read, such as the handout's fingerprints), tools/ci_feedback.py (written from
  grader/templates/ with the lesson's parts, notebook and label), tools/points.json and
  tools/notebook_tests.py (runs the visible tests in the notebook's kernel);
- the student notebook (grader/release/notebook.py);
- .github/workflows/autograde.yml, feedback on every push (grader/templates/).

The instructor's nbgrader source notebook goes to dist/nbgrader/source/<lesson>/, outside the zip.
Before anything is written to the zip, the release is searched for every non-trivial solution line,
solution or hidden-test markers, the hidden graders' files (every file of the lesson's folder but the
deliverable checks it declares for students) and the reference's output files; a hit removes the
build and fails.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import nbformat

from grader.release import notebook
from grader.release.visible_tests import (DIAGNOSE, FEEDBACK_FOLDER, SKIP_DIRS, SKIP_SUFFIXES, STUDENT_FEEDBACK,  # noqa: F401
                                         _copy_tree, feedback_files, ship_feedback, write_visible_tests)

from grader.release import stubs
from grader.judging.deliverables import RELEASED_CHECKS
from grader.intake.submissions import not_written_by_notebooks
from grader.release.stubs import _digest
from grader.lesson import read_shipped_history

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "grader" / "templates"
CHECKER = ROOT / "grader" / "judging" / "deliverables.py"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so the same sources give the same zip bytes
EXECUTABLE = {"tools/ci_feedback.py"}
# The student's repository: a `git add -A` after the README's set-up must stage their work only.
# `.venv` without a slash also matches a symlink to an environment kept elsewhere. The deliverables
# (attention_heatmap.png, attention_weights.npy, ...) are outputs too, but they are handed in.
GITIGNORE = """\
# the Python environment of the README's set-up (python3 -m venv .venv), and other common names
.venv
venv/
env/
.python-version
# caches
__pycache__/
*.py[cod]
.pytest_cache/
.ipynb_checkpoints/
.mypy_cache/
.ruff_cache/
.cache/
.ipython/
.jupyter/
# outputs that are not deliverables: checkpoints and training logs
*.pt
*.pth
*.ckpt
runs/
wandb/
lightning_logs/
# editors and systems
.vscode/
.idea/
.DS_Store
Thumbs.db
"""




def student_tools(*, lesson) -> dict[Path, str]:
    """The lesson's files a student gets in tools/ (file -> name there): its deliverable checks, which the
    checker finds beside itself under RELEASED_CHECKS, and the files they read beside themselves."""
    return ({lesson.deliverables_checks: RELEASED_CHECKS} if lesson.deliverables_checks else {}) | \
        {path: path.name for path in lesson.deliverables_data}


class LeakError(RuntimeError):
    """The release holds something a student must not see."""


def feedback_points(*, lesson) -> dict[str, float]:
    """Points per part for the feedback on push, summed from the rubric (where points live)."""
    return dict(lesson.points)


def ci_feedback_source(*, lesson) -> str:
    """tools/ci_feedback.py: the template with the lesson's graded parts (the rubric's components but
    the deliverables, which the checker scores), the files a notebook may not write, its notebook's file name
    and its short title."""
    parts = [c for c in lesson.components if c != lesson.deliverables_component]
    text = (TEMPLATES / "ci_feedback.py").read_text(encoding="utf-8")
    text = _fill_tuple(text, "PARTS", parts, "the lesson's parts")
    text = _fill_tuple(text, "NOT_WRITTEN", not_written_by_notebooks(lesson), "the files a notebook may not write")
    return text.replace("@@NOTEBOOK@@", lesson.notebook).replace("@@LABEL@@", lesson.label or lesson.title)


def _fill_tuple(template: str, name: str, values, what: str) -> str:
    """`template` with its line `NAME = ...` set to the tuple of `values` (strings)."""
    literal = "(" + ", ".join(json.dumps(v) for v in values) + ("," if len(values) == 1 else "") + ")"
    text, found = re.subn(rf"^{name} = .*$", lambda _: f"{name} = {literal}", template, count=1, flags=re.M)
    if found != 1:
        raise ValueError(f"{TEMPLATES / 'ci_feedback.py'} has no line `{name} = ...` for {what}: put it back")
    return text


def shipped_sources(*, lesson) -> dict[str, bytes]:
    """The release's .py files that are the kit's, not the student's, by their path in it (the stubs aside): a
    student who hands in the whole repository hands them back, and the static scan neither reads nor flags a
    file of the kit's that comes back unchanged (grader/judging/source_scan.py, `snapshot`)."""
    files = {}
    contract = {f"{module}.py" for module in lesson.modules}
    for path in sorted(lesson.assignment.rglob("*.py")):
        rel = path.relative_to(lesson.assignment)
        if rel.as_posix() not in contract and not SKIP_DIRS.intersection(rel.parts):
            files[rel.as_posix()] = path.read_bytes()
    for path in feedback_files():
        files[f"tests/{FEEDBACK_FOLDER}/{path.name}"] = path.read_bytes()
    for name, read in _kit_tools(lesson=lesson).items():
        # A grader installed without the release's templates (the Gradescope bundle) reads such a file as the
        # student's: more to scan, never less.
        with contextlib.suppress(OSError):
            if name.endswith(".py"):
                files[f"tools/{name}"] = read()
    return files


def shipped_history_path(lesson) -> Path:
    """The lesson's record of every version of its shipped files (`shipped_sources`) a release has held."""
    return lesson.shipped_history_file


def shipped_history(*, lesson) -> dict[str, frozenset[str]]:
    """path in the release -> the digests of every version of that file a release has shipped. A student keeps the
    release they cloned: when the visible tests change during a course, their copy of an earlier version, handed
    back unchanged, is still the kit's, not theirs, and is neither read nor flagged."""
    return read_shipped_history(shipped_history_path(lesson))


def _kit_tools(*, lesson) -> dict[str, Callable[[], bytes]]:
    """The kit's files in a release's tools/, name -> how to read it: the release writes them, and the scan
    recognises them when a repository hands them back (`shipped_sources`)."""
    tools = {"deliverables.py": CHECKER.read_bytes}
    tools |= {name: source.read_bytes for source, name in student_tools(lesson=lesson).items() if source.exists()}
    tools["ci_feedback.py"] = lambda: ci_feedback_source(lesson=lesson).encode("utf-8")
    # The notebook's test cells run the visible tests with it (grader/release/notebook.py).
    tools["notebook_tests.py"] = lambda: notebook.runner_source().encode("utf-8")
    return tools


def stub_texts(*, lesson) -> dict[str, str]:
    """file name -> the stub a student gets, generated from the reference."""
    return stubs.stub_texts_of(lesson.solutions)


def _write_student_files(day: Path, *, lesson) -> None:
    _copy_tree(lesson.assignment, day)
    ship_feedback(day / "tests")
    # The stubs come from the one source of truth, whatever state assignments/ is in.
    texts = stub_texts(lesson=lesson)
    for name, text in texts.items():
        (day / name).write_text(text, encoding="utf-8")
    tools = day / "tools"
    tools.mkdir(exist_ok=True)
    for name, read in _kit_tools(lesson=lesson).items():
        (tools / name).write_bytes(read())
    (tools / "points.json").write_text(json.dumps(feedback_points(lesson=lesson), indent=1, sort_keys=True) + "\n",
                                       encoding="utf-8")
    # So the feedback script can tell a notebook student (stubs untouched) from a .py one.
    student_nb = notebook.build(student=True, lesson=lesson)
    released = {n: _digest(t) for n, t in texts.items()}
    released[f"{lesson.notebook}:code"] = _digest(notebook.code_of(student_nb))
    (tools / "stubs.json").write_text(json.dumps(released, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    notebook.write(student_nb, day / lesson.notebook)
    workflows = day / ".github" / "workflows"
    workflows.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(TEMPLATES / "autograde.yml", workflows / "autograde.yml")
    (day / ".gitignore").write_text(GITIGNORE, encoding="utf-8")


def leaks(folder: Path, *, lesson) -> list[str]:
    """Everything in `folder` a student must not see, in words (empty when the release is clean)."""
    found = []
    wanted = {}
    for solution in sorted(lesson.solutions.glob("*.py")):
        for line in stubs.solution_lines(solution.read_text(encoding="utf-8")):
            wanted["".join(line.split())] = f"{solution.name}: {line}"
    reference_outputs = {hashlib.sha256(p.read_bytes()).hexdigest(): p.name
                         for p in lesson.solutions.rglob("*") if p.is_file() and p.suffix not in {".py", ".pyc"}}
    shipped = student_tools(lesson=lesson)
    hidden_files = {hashlib.sha256(p.read_bytes()).hexdigest(): _shown(p)
                    for p in lesson.folder.rglob("*") if p.is_file() and p.suffix != ".pyc" and p.stat().st_size > 64
                    and p not in shipped and not p.is_relative_to(lesson.assignment)}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder)
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest in reference_outputs:
            found.append(f"{relative}: is the reference's {reference_outputs[digest]}")
        if digest in hidden_files:
            found.append(f"{relative}: is the hidden grader file {hidden_files[digest]}")
        if path.suffix == ".pt":
            found += [f"{relative}: {problem}" for problem in _not_just_numbers(path)]
            continue
        if path.suffix == ".json" and relative.parts[0] == "tests":
            found += [f"{relative}: {problem}" for problem in _not_just_fingerprints(path, folder, lesson=lesson)]
        text = data.decode("utf-8", errors="replace")
        if path.suffix == ".ipynb":
            text = notebook.code_of(nbformat.reads(text, as_version=4))
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
            if marker in text:
                found.append(f"{relative}: holds a '{marker}' marker")
        squeezed = "".join(text.split())
        found += [f"{relative}: holds solution line ({where})" for key, where in wanted.items() if key in squeezed]
    return found


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _not_just_numbers(path: Path) -> list[str]:
    """A stored table (the visible tests' stand-in answers) must be numbers only: loadable without
    running code, and made of lists, dicts, None and tensors, so it can hold no solution code."""
    import torch

    try:
        table = torch.load(path, weights_only=True)
    except Exception as error:  # noqa: BLE001 - anything but plain numbers is refused
        return [f"is not a table of numbers ({type(error).__name__})"]
    stack, problems = [table], []
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += [k for k in item if not isinstance(k, str)] + list(item.values())
        elif isinstance(item, (list, tuple)):
            stack += list(item)
        elif item is not None and not isinstance(item, torch.Tensor):
            problems.append(f"holds a {type(item).__name__}, not only numbers")
    return problems


# The visible tests' fingerprints of known mistakes (a lesson's tests/*.json): outputs of the bug
# catalogue's mutants on the visible tests' own inputs, and the rubric's words. Each array is a sample
# of an output, never a whole one, and nothing in the file is free text that could carry code.
FINGERPRINT_MAX_VALUES = 64
FINGERPRINT_MAX_BYTES = 1_000_000
_WORD = re.compile(r"-?[a-z][a-z_]{0,19}")  # short lowercase words as values: kinds of comparison, "nan", "inf"
_DIGEST = re.compile(r"[0-9a-f]{16}")  # a structured value's fingerprint: a digest prefix, never the value
# The file's own field names; every other key must be a visible test's name, a comparison's number or a
# rubric hint id, so nothing can be keyed to inputs the visible tests do not use.
FINGERPRINT_FIELDS = frozenset({"format", "hints", "facts", "forbidden", "anywhere", "torch_only", "kit_packages", "message",
                                "tests", "kind", "got", "expected", "shape", "values", "digest", "mutants", "passes"})


def _not_just_fingerprints(path: Path, folder: Path, *, lesson) -> list[str]:
    """What in a visible-test data file is not numbers, visible test names or the lesson's own published words
    (rubric hints and forbidden_message, the forbidden policy's names). Empty when it is clean."""
    if path.stat().st_size > FINGERPRINT_MAX_BYTES:
        return [f"is {path.stat().st_size} bytes, more than a fingerprint file's {FINGERPRINT_MAX_BYTES}"]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        return [f"is not JSON data ({type(error).__name__})"]
    rubric = lesson.rubric()
    hints = {k: v.get("text") for k, v in rubric.get("hints", {}).items() if isinstance(v, dict)}
    # the words for what a student's numbers show ([facts.*]), keyed by fact id, as the hints are
    hints.update({k: v.get("text") for k, v in rubric.get("facts", {}).items() if isinstance(v, dict)})
    names = lesson.forbidden_policy["names"]
    words = {*filter(None, hints.values()), rubric.get("meta", {}).get("forbidden_message"),
             *(n for group in names.values() for n in group)}
    visible = {m for p in (folder / "tests").glob("test_*.py")
               for m in re.findall(r"^def (test_\w+)", p.read_text(encoding="utf-8", errors="replace"), re.M)}

    def known_key(key: str) -> bool:
        test, _, param = key.partition("[")
        return (key.isdigit() or key in hints or key in FINGERPRINT_FIELDS
                or (test in visible and (not param or (param.endswith("]") and len(param) <= 40 and "\n" not in param))))

    problems, stack = [], [data]
    while stack and len(problems) < 5:
        item = stack.pop()
        if isinstance(item, dict):
            problems += [f"holds the key {k[:60]!r}, not a visible test's name or the rubric's" for k in item
                         if not known_key(k)]
            stack += item.values()
        elif isinstance(item, list):
            numbers = [v for v in item if isinstance(v, (int, float)) or v in ("nan", "inf", "-inf")]
            if len(numbers) > FINGERPRINT_MAX_VALUES:
                problems.append(f"holds an array of {len(numbers)} numbers (a fingerprint keeps at most "
                                f"{FINGERPRINT_MAX_VALUES}: a sample of an output, never a whole one)")
            stack += item
        elif (isinstance(item, str) and item not in words and item not in hints and not known_key(item)
              and not _WORD.fullmatch(item) and not _DIGEST.fullmatch(item)):  # a test's name: the tests a mistake passes
            problems.append(f"holds the text {item[:60]!r}, not one of the rubric's hints or forbidden names")
    return problems


def _zip(folder: Path, target: Path) -> None:
    tmp = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            relative = path.relative_to(folder).as_posix()
            info = zipfile.ZipInfo(f"{folder.name}/{relative}", date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if relative in EXECUTABLE else 0o644) << 16
            archive.writestr(info, path.read_bytes())
    tmp.replace(target)


def build(*, out: Path, lesson) -> Path:
    """Write <out>/<lesson>/ and <out>/<lesson>.zip; returns the folder. Raises LeakError on a leak."""
    out.mkdir(parents=True, exist_ok=True)
    day = out / lesson.name
    if day.exists():
        if not (day / "tools" / "points.json").is_file():
            # Never delete a folder this command did not make (say `--out assignments` by mistake).
            raise FileExistsError(f"{day} exists and is not a release made by `make release`; "
                                  "choose another --out or remove it yourself")
        shutil.rmtree(day)
    day.mkdir()
    _write_student_files(day, lesson=lesson)
    (day / "tools" / "ci_feedback.py").chmod(0o755)
    found = leaks(day, lesson=lesson)
    if found:
        shutil.rmtree(day)
        raise LeakError("the release would leak:\n  " + "\n  ".join(found))
    _zip(day, out / f"{lesson.name}.zip")
    # The nbgrader source folder: the notebook and the files its visible test cells need beside it.
    notebook.write_nbgrader_source(out / "nbgrader" / "source" / lesson.name, lesson=lesson)
    return day


def main(*, out: str = "dist", lesson) -> int:
    try:
        day = build(out=Path(out), lesson=lesson)
    except FileExistsError as error:
        print(f"release refused: {error}", file=sys.stderr)
        return 2
    except LeakError as error:
        print(f"release refused: {error}\nFix the file named above, then run `make release` again.",
              file=sys.stderr)
        return 1
    files = sorted(p.relative_to(day).as_posix() for p in day.rglob("*") if p.is_file())
    print(f"wrote {day}/ ({len(files)} files) and {day.parent / (lesson.name + '.zip')}")
    for name in files:
        print(f"  {name}")
    print(f"instructor only (not in the zip): {day.parent / 'nbgrader' / 'source' / lesson.name / lesson.notebook}")
    return 0

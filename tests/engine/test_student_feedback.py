"""Every lesson's students get the same feedback from `make test` (grader/student/, shipped as tests/_feedback/).

For each lesson (every lesson under grader/, and the toy), the release is built and its visible tests run in
the released folder as a student runs them, with no kit to import (a `grader` package that refuses to
import is first on the path): the reference passes, the stubs fail cleanly, and
- a catalogued mistake fails a comparison that shows expected, got and where they differ, and names the
  mistake in the rubric's words (tests/known_mistakes.json);
- an error raised in the student's code is told in a few lines at the student's line;
- a forbidden library name in a part's file fails that part's tests with the lesson's words;
- the tests run in the order of the tasks.
Each case is written from the lesson's own data (its catalogue, its reference, its forbidden names), so a
new lesson is checked the same way without a line here.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from grader.judging.mutants import apply
from grader.lesson import ENGINE, lesson_names, load_lesson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from visible_run import kept_server  # noqa: E402

KIT = Path(__file__).resolve().parents[2]
LESSONS = [*lesson_names(), str(KIT / "tests" / "fixtures" / "lessons" / "toy")]


def _label(ref: str) -> str:
    return Path(ref).name


@pytest.fixture(scope="module")
def no_kit(tmp_path_factory) -> Path:
    """A folder to put first on PYTHONPATH: its `grader` package refuses to import, as on a student's machine."""
    folder = tmp_path_factory.mktemp("no-kit")
    (folder / "grader").mkdir()
    (folder / "grader" / "__init__.py").write_text(
        'raise ImportError("a student has no kit: the released tests must not import grader")\n', encoding="utf-8")
    return folder


@pytest.fixture(scope="module", params=LESSONS, ids=_label)
def released(request, tmp_path_factory):
    """(lesson, the released student folder) for each lesson."""
    lesson = load_lesson(request.param)
    out = tmp_path_factory.mktemp(f"release-{lesson.name}")
    done = subprocess.run([sys.executable, "-m", "grader", "release", "--lesson", lesson.ref, "--out", str(out)],
                          cwd=KIT, capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "GRADER_LESSON"})
    assert done.returncode == 0, done.stderr[-3000:]
    return lesson, out / lesson.name


def _student(released, tmp_path, files: dict[str, str]) -> Path:
    """A copy of the released folder with the student's files `files` (name -> text) in place of the stubs."""
    _, day = released
    folder = tmp_path / "student"
    shutil.copytree(day, folder)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _reference(lesson) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(lesson.solutions.glob("*.py"))}


def _run(folder: Path, no_kit: Path, *args) -> tuple[int, dict[str, tuple[str, str]], str]:
    """(exit code, {test name: (outcome, message)} in the order run, output) of the student's `pytest`."""
    report = folder / "report.xml"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "BUILD_NUMBER", "GRADER_LESSON")}
    env.update(PYTHONPATH=str(no_kit), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")
    # Forked from a server that imported torch and pytest once (tests/fixtures/visible_run.py), with this
    # environment: the run is `python -m pytest` in the folder, without a torch import of its own each time.
    code, output = kept_server(env).run(folder, ["-p", "no:cacheprovider", f"--junitxml={report}", *args], timeout=300)
    results = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, f"{child.get('message', '')}\n{child.text or ''}"
        results[f"{case.get('classname')}::{case.get('name')}"] = (outcome, message)
    return code, results, output


def _known(lesson) -> dict:
    return json.loads((lesson.assignment / "tests" / "known_mistakes.json").read_text(encoding="utf-8"))


def test_the_release_ships_the_feedback_package_and_no_copy_in_the_lesson(released):
    """One source: grader/student/ and the engine files it shares (diagnose.py, magics.py, siblings.py) reach the
    student only through the release."""
    lesson, day = released
    shared = {"diagnose.py": "judging", "magics.py": "intake", "siblings.py": "running"}
    shipped = sorted(p.name for p in (day / "tests" / "_feedback").glob("*.py"))
    assert shipped == sorted([p.name for p in (ENGINE / "student").glob("*.py")] + list(shared))
    for name, package in shared.items():
        assert (day / "tests" / "_feedback" / name).read_bytes() == (ENGINE / package / name).read_bytes()
    assert not (lesson.assignment / "tests" / "diagnose.py").exists(), "diagnose.py has one source: grader/judging/"
    assert not (lesson.assignment / "tests" / "_feedback").exists()


def test_reference_passes_and_stubs_fail_cleanly_without_the_kit(released, tmp_path, no_kit):
    lesson, day = released
    code, results, output = _run(_student(released, tmp_path / "ref", _reference(lesson)), no_kit)
    assert code == 0 and results, output[-3000:]
    assert {outcome for outcome, _ in results.values()} == {"passed"}, output[-3000:]
    # The tests run in the order of the tasks (the contract's parts), whatever their files' names.
    order = [next(i for i, part in enumerate(lesson.modules) if test.startswith(f"tests.test_{part}::"))
             for test in results]
    assert order == sorted(order) and len(set(order)) == len(lesson.modules), list(results)

    # The stubs: every test that needs a task fails saying it is not written yet (a test of what the stub
    # already gives, a constant of the contract, may pass); never an error.
    code, results, output = _run(day, no_kit)
    assert code == 1 and results, output[-3000:]
    for test, (outcome, message) in results.items():
        assert outcome == "passed" or (outcome == "failure" and "not implemented yet" in message), \
            f"{test}: {outcome}\n{message}"
    for part in lesson.modules:
        assert any(t.startswith(f"tests.test_{part}::") and o == "failure" for t, (o, _) in results.items()), part
    assert "Traceback" not in output and "site-packages" not in output


def test_a_catalogued_mistake_shows_expected_got_where_and_its_hint(released, tmp_path, no_kit):
    """The first catalogued mistake with a fingerprint: its test fails with the numbers and the mistake's words."""
    lesson, _ = released
    known = _known(lesson)
    catalogue = importlib.import_module(lesson.catalogue_module)
    bugs = {bug.id: bug for bug in catalogue.BUGS}
    found = [(test, entry["mutants"][0]) for test, places in sorted(known["tests"].items())
             for slot in places.values() for entry in slot if entry["kind"] != "shape"]
    assert found, "known_mistakes.json holds no fingerprint: build it (python -m grader.devtools.visible_fingerprints)"
    test, bug_id = found[0]
    bug = bugs[bug_id]
    code, results, output = _run(_student(released, tmp_path, apply(bug, lesson.solutions)), no_kit, "-m", bug.component)
    assert code == 1, output[-3000:]
    message = next(m for t, (o, m) in results.items() if t.endswith(f"::{test}"))
    assert "expected" in message and "got" in message, message
    assert "largest difference at index" in message or "first difference at" in message, message
    assert f"Likely misconception (your numbers are exactly what this known mistake gives): " \
           f"{known['hints'][bug_id]}" in message or known["hints"][bug_id] in message, message


def _planted(text: str, line: str) -> tuple[str, int]:
    """`text` with `line` put as the first line of its first solution block; (new text, its line number)."""
    lines = text.splitlines(keepends=True)
    at = next(i for i, l in enumerate(lines) if "BEGIN SOLUTION" in l)
    indent = re.match(r"\s*", lines[at]).group(0)
    lines.insert(at + 1, f"{indent}{line}\n")
    return "".join(lines), at + 2


def test_an_error_in_student_code_is_told_at_their_line_once(released, tmp_path, no_kit):
    lesson, _ = released
    part = lesson.modules[0]
    files = _reference(lesson)
    files[f"{part}.py"], number = _planted(files[f"{part}.py"], "raise ZeroDivisionError('planted by the test')")
    code, results, output = _run(_student(released, tmp_path, files), no_kit, "-m", part)
    assert code == 1, output[-3000:]
    failed = [m for o, m in results.values() if o != "passed"]
    assert failed, output[-3000:]
    first = failed[0]
    assert "your code raised ZeroDivisionError: planted by the test" in first, first
    assert f"at {part}.py:{number}, in " in first and "raise ZeroDivisionError" in first, first
    assert "Traceback" not in output and "site-packages" not in output, output[-3000:]
    assert output.count("planted by the test") <= 2, output[-3000:]  # told in full once (and in the summary line)


def test_a_forbidden_library_name_fails_the_part_with_the_lessons_words(released, tmp_path, no_kit):
    lesson, _ = released
    policy = _known(lesson)["forbidden"]
    names = [(n, n) for n in policy["anywhere"]] + [(n, f"torch.{n}") for n in policy["torch_only"]]
    if not names:
        pytest.skip(f"{lesson.name} forbids no library name")
    name, written = names[0]
    part = lesson.modules[-1]
    files = _reference(lesson)
    files[f"{part}.py"] += f'\n\nLIBRARY = "{written}"  # named, never run: the graders read the file\n'
    code, results, output = _run(_student(released, tmp_path, files), no_kit)
    assert code == 1, output[-3000:]
    failed = {t: m for t, (o, m) in results.items() if o != "passed"}
    assert failed and all(t.startswith(f"tests.test_{part}::") for t in failed), sorted(failed)
    said = policy["message"].format(names=name)
    assert all(said in m for m in failed.values()), failed


@pytest.mark.parametrize("ref", LESSONS, ids=_label)
def test_the_known_mistakes_file_is_current(ref):
    """tests/known_mistakes.json holds what every catalogue mutant gives at the first visible comparison it
    fails (python -m grader.devtools.visible_fingerprints --lesson NAME|PATH rewrites it). A lesson with its
    own fingerprint command keeps its own test (with the lesson's tests), so it is not built twice."""
    from grader.devtools import visible_fingerprints

    lesson = load_lesson(ref)
    if importlib.util.find_spec(f"{lesson.package}.visible_fingerprints") is not None:
        pytest.skip(f"{lesson.name} checks its fingerprints with its own command")
    assert visible_fingerprints.main(lesson=lesson, check=True) == 0, \
        f"run: python -m grader.devtools.visible_fingerprints --lesson {lesson.ref}"


def test_a_mistake_is_ruled_out_by_a_test_the_student_failed_that_it_passes():
    """A held-out tokenizer compared its ties in another alphabet: its numbers on one test were those of "merges
    the pair seen first", a mistake that passes the worked-example test this student had already failed. Failing
    a test the mistake passes rules it out, as passing a test it fails does."""
    from grader.student.checks import Evidence

    known = {"tests": {"test_counts": {"1": [{"kind": "close", "got": {}, "mutants": ["first_seen"]}]}},
             "passes": {"first_seen": ["test_worked", "test_counts_again"]}}
    evidence = Evidence(known)
    evidence.start("test_worked")
    evidence.finish("test_worked", passed=True)
    evidence.start("test_counts")
    assert not evidence.refuted("first_seen")
    evidence.start("test_worked")
    evidence.finish("test_worked", passed=False)
    evidence.start("test_counts")
    assert evidence.refuted("first_seen")


def test_an_infinite_stored_value_matches_only_the_same_infinity():
    """A mistake whose answer holds -inf (an additive 0/-inf table) matched any finite number there: the relative
    term of the matching tolerance, times |-inf|, was infinite. A held-out student's 0/1 answer was told it might be
    that mistake as well as its own."""
    from grader.student.checks import fingerprint, same

    stored = {"shape": [3], "values": [0.0, "-inf", 1.0]}
    assert same(stored, fingerprint([0.0, float("-inf"), 1.0]))
    assert not same(stored, fingerprint([0.0, 1.0, 1.0]))
    assert not same(stored, fingerprint([0.0, float("inf"), 1.0]))
    assert not same({"shape": [2], "values": [0.0, 1.0]}, fingerprint([0.0, float("-inf")]))
    assert same({"shape": [2], "values": [0.0, 1.0]}, fingerprint([0.0, 1.0 + 1e-9]))

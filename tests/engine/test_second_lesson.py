"""A second lesson, found by its path, goes through every stage with no edit to the engine.

The toy lesson (tests/fixtures/lessons/toy/: softmax, and a linear classifier graded over the
grader's softmax) has its own contract, reference, rubric with hints, hidden tests over the engine's
call plumbing, three catalogue mutants, forbidden and limits files. Chosen after the engine was
imported (`--lesson PATH` on the command line, the value handed to each stage), it is released (stubs, no solution
leak), graded in the sandbox (an honest submission full marks, each mutant losing points in its own
part only with its catalogue hint, a broken one), reported (its parts are the gradebook's columns),
built into a notebook, and exported to Gradescope, where the exported zip grades it; its kill rate is
measured by the engine's `killrate` command.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import kept_zygotes, shared_config  # noqa: E402

from grader import lesson as lessons  # noqa: E402
from grader.release import stubs  # noqa: E402

KIT = Path(__file__).resolve().parents[2]
TOY = KIT / "tests" / "fixtures" / "lessons" / "toy"
PARTS = ("activations", "classifier")
CONFIG = shared_config(call_timeout=5.0)


@pytest.fixture
def toy():
    """The toy lesson's value, built here (a test is an entry point) and handed to each stage."""
    return lessons.load_lesson(str(TOY))


def test_the_toy_is_found_by_path_under_its_own_package(toy, monkeypatch):
    assert toy.folder == TOY and toy.components == PARTS and toy.points == {"activations": 6.0, "classifier": 4.0}
    assert not toy.package.startswith("grader")
    assert all(toy.package != lessons.load_lesson(name).package for name in lessons.lesson_names())
    assert toy.solutions == TOY / "solutions" and toy.contract == TOY / "assignment" / "CONTRACT.md"
    monkeypatch.chdir(KIT / "tests")
    assert lessons.lesson_option(os.path.join("fixtures", "lessons", "toy")) == str(TOY), "a path is kept absolute"
    # A lesson under grader/ keeps its kit-relative paths; one that holds its student folder (a copy of the toy)
    # keeps the paths inside it.
    from_the_kit = 0
    for name in lessons.lesson_names():
        lesson = lessons.load_lesson(name)
        declared = lessons.read_toml(lesson.folder / lessons.DECLARATION)["contract"]
        if (lesson.folder / declared).is_file():
            assert lesson.contract == lesson.folder / declared
        else:
            assert lesson.contract == KIT / declared == KIT / "assignments" / name / "CONTRACT.md"
            from_the_kit += 1
    assert from_the_kit, "no lesson under grader/ declares its paths from the kit's root: nothing was checked"


def _cli(*args, cwd=KIT, timeout=600) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_release_ships_stubs_and_no_solution(tmp_path):
    done = _cli("release", "--lesson", str(TOY.relative_to(KIT)), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    day = tmp_path / "toy"
    assert (tmp_path / "toy.zip").is_file()
    for part in PARTS:
        solution = (TOY / "solutions" / f"{part}.py").read_text(encoding="utf-8")
        assert (day / f"{part}.py").read_text(encoding="utf-8") == stubs.make_stub(solution)
        assert "raise NotImplementedError" in (day / f"{part}.py").read_text(encoding="utf-8")
    for name in ("CONTRACT.md", "tests/test_activations.py", "tests/test_classifier.py", "toy.ipynb",
                 "tools/points.json", "tools/ci_feedback.py"):
        assert (day / name).is_file(), name
    solution_lines = ["".join(line.split()) for part in PARTS
                      for line in stubs.solution_lines((TOY / "solutions" / f"{part}.py").read_text(encoding="utf-8"))]
    assert solution_lines
    for path in day.rglob("*"):
        if path.is_file():
            text = "".join(path.read_text(encoding="utf-8", errors="replace").split())
            assert not [line for line in solution_lines if line in text], path
    assert not (day / "tests" / "__init__.py").exists() and not (day / "catalogue.py").exists()
    assert json.loads((day / "tools" / "points.json").read_text()) == {"activations": 6.0, "classifier": 4.0}
    feedback = (day / "tools" / "ci_feedback.py").read_text(encoding="utf-8")
    assert 'PARTS = ("activations", "classifier")' in feedback and "toy.ipynb" in feedback
    # No other lesson's name (a copy of the toy under grader/ is the toy, whose notebook the script names).
    others = [name for name in lessons.lesson_names() if name != TOY.name]
    assert others and not any(name in feedback for name in others) and "@@" not in feedback
    # The student's own visible tests pass on the reference and fail on the stubs.
    for part in PARTS:
        shutil.copyfile(TOY / "solutions" / f"{part}.py", day / f"{part}.py")
    visible = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=day,
                             capture_output=True, text=True, timeout=300)
    assert visible.returncode == 0, visible.stdout[-2000:]


def _class(root: Path, catalogue) -> dict[str, str]:
    """honest, one folder per catalogue mutant, and a broken one; returns row -> the bug it holds."""
    shutil.copytree(TOY / "solutions", root / "honest", ignore=shutil.ignore_patterns("__pycache__"))
    rows = {"honest": None}
    for bug in catalogue.bugs:
        folder = root / bug.id.replace(".", "_")
        folder.mkdir()
        for name, text in catalogue.apply(bug).items():
            (folder / name).write_text(text, encoding="utf-8")
        rows[folder.name] = bug.id
    shutil.copytree(TOY / "solutions", root / "broken", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "broken" / "classifier.py").write_text("class Classifier(:\n", encoding="utf-8")
    rows["broken"] = "broken"
    return rows


def test_grade_in_the_sandbox_report_and_feedback(toy, tmp_path):
    from grader.running import grade as run

    catalogue = toy.catalogue
    assert len(catalogue.bugs) == 3
    subs, out = tmp_path / "subs", tmp_path / "out"
    rows = _class(subs, catalogue)
    assert run.main(submissions=str(subs), out=str(out), jobs=1, config=CONFIG, lesson=toy, zygotes=kept_zygotes()) == 0
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    header = list(table[0])
    assert header[header.index("max_total") + 1:header.index("status")] == list(PARTS), header
    by_row = {r["submission"]: r for r in table}
    assert set(by_row) == set(rows)
    full = {"activations": 6.0, "classifier": 4.0}
    assert {p: float(by_row["honest"][p]) for p in PARTS} == full and float(by_row["honest"]["total"]) == 10
    for row, bug_id in rows.items():
        record = json.loads((out / row / "record.json").read_text(encoding="utf-8"))
        assert record["isolation"], row
        feedback = (out / row / "feedback.md").read_text(encoding="utf-8")
        for part in PARTS:
            assert part in feedback, (row, part)
        if bug_id in (None, "broken"):
            continue
        bug = catalogue.by_id[bug_id]
        scores = {p: float(by_row[row][p]) for p in PARTS}
        assert scores[bug.component] < full[bug.component], row
        assert {p: s for p, s in scores.items() if p != bug.component} == \
               {p: s for p, s in full.items() if p != bug.component}, row
        failed = [t for t in record["tests"] if t["status"] != "passed"]
        assert failed and all(t["component"] == bug.component for t in failed), row
        assert bug.test in {t["name"] for t in failed} and {t["hint_id"] for t in failed} == {bug_id}, row
        # The mistake is data in the record (hint_id); the student's files word it from the rubric.
        hint = toy.rubric()["hints"][bug_id]["text"]
        assert not any(hint in t["output"] for t in failed), row
        shown = json.loads((out / row / "results.json").read_text(encoding="utf-8"))["tests"]
        assert all(hint in t["output"] for t in shown if t["status"] != "passed"), row
        from grader.results.document import md_inline

        assert md_inline(hint) in feedback, row
    broken = json.loads((out / "broken" / "record.json").read_text(encoding="utf-8"))
    assert float(by_row["broken"]["activations"]) == 6 and float(by_row["broken"]["classifier"]) == 0
    assert "classifier.py" in broken["status"]


def test_notebook_is_built_from_the_toy(toy):
    from grader.release import notebook

    student, source = notebook.build(student=True, lesson=toy), notebook.build(student=False, lesson=toy)
    code = notebook.code_of(student)
    assert "raise NotImplementedError" in code and "def softmax" in code and "class Classifier" in code
    assert "exps.sum(dim=dim" not in code and "exps.sum(dim=dim" in notebook.code_of(source)


def test_gradescope_zip_holds_the_toy_and_grades_with_it(toy, tmp_path):
    done = _cli("gradescope", "--lesson", str(TOY), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    with zipfile.ZipFile(tmp_path / "gradescope.zip") as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "autograder" / "source")
    inside = TOY.relative_to(KIT).as_posix()
    for name in ("tests/test_activations.py", "tests/test_classifier.py", "catalogue.py", "rubric.toml",
                 "solutions/activations.py", "solutions/classifier.py"):
        assert f"{inside}/{name}" in names, name
    assert not any(n.startswith((f"grader/{other}/", f"solutions/{other}/"))
                   for other in lessons.lesson_names() for n in names), "no other lesson ships"
    script = (tmp_path / "autograder" / "source" / "run_autograder").read_text(encoding="utf-8")
    assert f'--lesson "$ROOT/source/{inside}"' in script, "the run script names the lesson as an argument"
    assert "GRADER_LESSON" not in script and "export" not in script.split("exec", 1)[1]
    root = tmp_path / "autograder"
    shutil.copytree(TOY / "solutions", root / "submission", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "submission" / "classifier.py").write_text(
        (TOY / "solutions" / "classifier.py").read_text(encoding="utf-8").replace(
            "        return softmax(logits, dim=-1)", "        return logits"), encoding="utf-8")
    env = dict(os.environ)
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
    graded = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                            text=True, timeout=600)
    assert graded.returncode == 0, graded.stdout[-2000:] + graded.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    # Gradescope's test names are "<title> (<part>.<test>)".
    tests = {t["name"].rsplit("(", 1)[1].rstrip(")"): t for t in results["tests"]}
    assert {name.split(".")[0] for name in tests} == set(PARTS)
    assert results["score"] == pytest.approx(7.0)
    assert tests["classifier.reference"]["score"] == 0 and tests["activations.reference"]["score"] == 2


def test_kill_rate_of_the_toys_catalogue():
    done = _cli("killrate", "--lesson", str(TOY))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Kill rate: 3/3 = 100.0%" in done.stdout, done.stdout[-2000:]

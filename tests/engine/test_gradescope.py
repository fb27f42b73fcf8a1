"""grader/release/gradescope.py: the autograder zip, and run_autograder on a fake /autograder tree. The zip is
the toy lesson's, found by path: its folder ships inside the kit's tree and the run script names it."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY, in_kit_view, make_submission, uid_base_for_tests  # noqa: E402

from grader.lesson import lesson_names
from grader.release import gradescope

from grader.intake import submissions as intake

from grader.running import grade as run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = TOY / "solutions"
CODE = tuple(sorted(p.name for p in REFERENCE.glob("*.py")))  # the toy's reference files
INSIDE = TOY.relative_to(ROOT).as_posix()  # where the toy sits in the kit, and so in the unzipped zip


@pytest.fixture(scope="module")
def built(tmp_path_factory, toy) -> Path:
    out = tmp_path_factory.mktemp("dist")
    assert gradescope.main(out=str(out), lesson=toy) == 0
    return out / "gradescope.zip"


def test_zip_holds_scripts_engine_hidden_graders_and_reference(built, tmp_path, toy):
    with zipfile.ZipFile(built) as archive:
        infos = {i.filename: i for i in archive.infolist()}
        setup = archive.read("setup.sh").decode()
    for script in ("setup.sh", "run_autograder"):
        assert infos[script].external_attr >> 16 & 0o111, f"{script} must be executable"
    names = set(infos)
    for needed in ("grader/running/grade.py", "grader/judging/score.py", "grader/sandbox/zygote.py", "grader/results/storage.py", "grader/results/feedback.py",
                   f"{INSIDE}/rubric.toml", "pyproject.toml", *(f"{INSIDE}/solutions/{m}" for m in CODE)):
        assert needed in names, f"{needed} missing from the autograder zip"
    hidden = {p.relative_to(ROOT).as_posix() for p in TOY.rglob("*.py") if "__pycache__" not in p.parts}
    assert hidden and hidden <= names
    # Of the kit's tests, assignments, outputs and demo nothing ships but the lesson's own folder; no other lesson.
    assert not any(n.startswith(("tests/", "assignments/", "dist/", "demo/")) and not n.startswith(f"{INSIDE}/")
                   or "__pycache__" in n for n in names)
    assert not any(n.startswith(f"grader/{other}/") for other in lesson_names() for n in names)
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in setup
    assert gradescope.build(out=tmp_path, lesson=toy).read_bytes() == built.read_bytes(), "the zip must be reproducible"


def test_scripts_are_valid_bash():
    for text in (gradescope.SETUP_SH, gradescope.RUN_AUTOGRADER):
        subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("layout", ["loose", "one_folder", "zip"])
def test_stage_submission_layouts(tmp_path, layout):
    submission = tmp_path / "submission"
    inner = submission / "my-homework" if layout == "one_folder" else submission
    inner.mkdir(parents=True)
    (inner / "activations.py").write_text("x = 1\n")
    (inner / "README.md").write_text("hello\n")
    (submission / ".DS_Store").write_text("junk")
    if layout == "zip":
        with zipfile.ZipFile(tmp_path / "up.zip", "w") as archive:
            archive.write(inner / "activations.py", "activations.py")
        for path in list(submission.iterdir()):
            path.unlink()
        shutil.copyfile(tmp_path / "up.zip", submission / "homework.zip")
    staged = gradescope.stage_submission(submission, tmp_path / "subs")
    if layout == "zip":
        assert staged.name == "submission.zip" and zipfile.is_zipfile(staged)
    else:
        assert staged.name == "submission"
        assert {"README.md", "activations.py"} <= set(_files(staged))


def _fake_tree(tmp_path: Path, built: Path) -> Path:
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    with zipfile.ZipFile(built) as archive:
        archive.extractall(root / "source")
    (root / "submission").mkdir()
    return root


def test_run_autograder_writes_gradescope_results(built, tmp_path):
    root = _fake_tree(tmp_path, built)
    for name in CODE:
        shutil.copyfile(REFERENCE / name, root / "submission" / name)
    # Change one test's points in the unzipped rubric: the results must follow the zip's own copy.
    rubric = root / "source" / INSIDE / "rubric.toml"
    text = rubric.read_text(encoding="utf-8")
    edited = re.sub(r"(\[activations\.reference\]\npoints = )(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 1),
                    text, count=1)
    assert edited != text
    rubric.write_text(edited, encoding="utf-8")
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
    run = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == pytest.approx(11)  # the toy's 10 points, and the one added
    assert sum(t["max_score"] for t in results["tests"]) == pytest.approx(11)
    for test in results["tests"]:
        assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(test)
        assert test["status"] == "passed" and test["score"] == test["max_score"]
    assert isinstance(results["execution_time"], (int, float))
    if os.geteuid() == 0:
        # Student code ran as another, unprivileged uid (the container here allows it).
        assert results["extra_data"]["isolation"]["uid"] is True


def test_engine_failure_writes_no_results(tmp_path, capsys):
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "submission" / "classifier.py").write_text("x = 1\n")
    assert gradescope.run_autograder(root=root, python="/bin/false") == 1
    assert not (root / "results" / "results.json").exists()
    assert "autograder error" in capsys.readouterr().err


def test_missing_submission_folder(tmp_path):
    assert gradescope.run_autograder(root=tmp_path / "nowhere") == 2


def test_stage_submission_grades_the_notebook_over_untouched_stubs(tmp_path, toy):
    from grader.release import student_release as release

    submission = tmp_path / "submission"
    submission.mkdir()
    stubs = release.stub_texts(lesson=toy)
    for name, text in stubs.items():
        (submission / name).write_text(text, encoding="utf-8")
    (submission / toy.notebook).write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n')
    staged = gradescope.stage_submission(submission, tmp_path / "subs")
    assert len(list(submission.glob("*.py"))) == len(stubs) == len(toy.modules), "Gradescope's own copy is left as it was"
    # The intake decides what is the student's work (grader/intake/submissions.py): here the notebook.
    got = intake.materialise(intake.discover(staged.parent)[0], tmp_path / "scratch", lesson=toy)
    assert got.notebook == toy.notebook and any("untouched stubs" in n for n in got.notes), got.notes


# ---------------------------------------------------------------- the kit is private to root

PROBE = '''
import os as _os

# A student who has read the grader: try every secret of the autograder image before anything else.
for _path in {secrets!r}:
    try:
        if _os.path.isdir(_path):
            _os.listdir(_path)
        else:
            with open(_path, "rb") as _f:
                _f.read(1)
    except OSError:
        continue
    raise ImportError("read a secret: " + _path)
'''
WITHOUT_LANDLOCK = '''
import sys
import grader
from grader.running import grade as run
from grader.lesson import load_lesson
from grader.sandbox import DEFAULT_CONFIG, SandboxConfig

print("engine:", grader.__file__)
layers = tuple(layer for layer in DEFAULT_CONFIG.layers if layer != "landlock")
config = SandboxConfig(layers=layers, uid_base=int(sys.argv[3]))
sys.exit(run.main(submissions=sys.argv[1], out=sys.argv[2], jobs=1, config=config, lesson=load_lesson(sys.argv[4])))
'''


def _secrets(source: Path) -> list[Path]:
    hidden = source / INSIDE
    return [hidden, hidden / "rubric.toml", hidden / "catalogue.py", sorted((hidden / "tests").glob("test_*.py"))[0],
            hidden / "solutions" / CODE[0], source / "grader" / "judging" / "score.py"]


def _readable_by(uid: int, path: Path) -> bool:
    probe = ("import os, sys; p = sys.argv[1]\n"
             "os.listdir(p) if os.path.isdir(p) else open(p, 'rb').read(1)")
    # in_kit_view: that uid runs this environment's Python even from a checkout it may not enter.
    done = subprocess.run(in_kit_view(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                                       sys.executable, "-c", probe, str(path)]),
                          capture_output=True, text=True, timeout=120)
    return done.returncode == 0


def _grade_without_landlock(root: Path, tag: str, probe: str, uid_base: int) -> dict:
    subs, out = root / f"subs-{tag}", root / f"out-{tag}"
    make_submission(subs / "aaa_honest", solutions=REFERENCE)
    make_submission(subs / "probe", {CODE[0]: probe + (REFERENCE / CODE[0]).read_text()}, solutions=REFERENCE)
    # The packaged engine grades the packaged lesson (the toy's folder inside the unzipped kit).
    done = subprocess.run([sys.executable, "-c", WITHOUT_LANDLOCK, str(subs), str(out), str(uid_base),
                           str(root / "source" / INSIDE)],
                          cwd=root / "source", capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"engine: {root / 'source' / 'grader'}" in done.stdout, "the packaged engine graded, not the kit's"
    return {name: json.loads((out / name / "record.json").read_text()) for name in ("aaa_honest", "probe")}


def _code_points(record: dict) -> float:
    return sum(t["score"] for t in record["tests"] if t["component"] != "deliverables")


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root grader runs student code as another uid")
def test_without_landlock_the_student_uid_cannot_read_the_hidden_graders_or_the_reference(built, toy):
    uid_base = uid_base_for_tests(3) + 2  # test_names.py uses the two below
    # Laid out as in Gradescope's image, under a folder everyone may enter (pytest's own is 0700, which
    # would hide the tree whatever the kit's modes are).
    code_points = sum(toy.points[part] for part in toy.modules)
    root = Path(tempfile.mkdtemp(prefix="autograder-", dir=run.scratch_base()))
    try:
        os.chmod(root, 0o755)
        (root / "source").mkdir()
        with zipfile.ZipFile(built) as archive:
            archive.extractall(root / "source")
        secrets = _secrets(root / "source")
        probe = PROBE.format(secrets=[str(p) for p in secrets])

        # Before: the files are world-readable, as unzipped, so the probe can see them (it is no blind test).
        assert all(_readable_by(uid_base, p) for p in secrets)
        before = _grade_without_landlock(root, "before", probe, uid_base)
        assert before["probe"]["isolation"]["uid"] is True and not before["probe"]["isolation"]["landlock"]
        assert "read a secret" in json.dumps(before["probe"]["notes"] + [t["output"] for t in before["probe"]["tests"]])
        assert _code_points(before["aaa_honest"]) == code_points > 0

        # Gradescope's run: run_autograder makes the kit root's alone, then grades (with Landlock if any).
        (root / "submission").mkdir()
        for name in CODE:
            shutil.copyfile(REFERENCE / name, root / "submission" / name)
        (root / "submission" / CODE[0]).write_text(probe + (REFERENCE / CODE[0]).read_text())
        env = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
        done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        results = json.loads((root / "results" / "results.json").read_text())
        code = [t for t in results["tests"] if "deliverables" not in t["tags"]]
        assert code and all(t["status"] == "passed" for t in code), results["output"]
        for path in [root / "source", *(root / "source").rglob("*")]:
            info = path.lstat()
            assert info.st_uid == 0 and info.st_gid == 0 and info.st_mode & 0o077 == 0, (path, oct(info.st_mode))
        assert not any(_readable_by(uid_base, p) for p in secrets)

        # After: the same probe, Landlock still off, finds nothing, and grading works as before.
        after = _grade_without_landlock(root, "after", probe, uid_base)
        assert not after["probe"]["isolation"]["landlock"]
        assert "read a secret" not in json.dumps(after["probe"])
        assert _code_points(after["probe"]) == _code_points(after["aaa_honest"]) == code_points
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_both_scripts_make_the_kit_private_to_root():
    for script, kit in ((gradescope.SETUP_SH, "KIT=/autograder/source"), (gradescope.RUN_AUTOGRADER, 'KIT="$ROOT/source"')):
        assert 'chown -R -P 0:0 "$KIT"' in script and 'chmod -R go-rwx "$KIT"' in script
        # Named by path, never by where the script runs: Gradescope runs copies from /autograder too.
        assert script.index(kit) < script.index('chown -R -P 0:0 "$KIT"') and "pwd" not in script
    assert "go+rX /autograder/source" not in gradescope.SETUP_SH
    # setup.sh opens the venv to everyone (torch) only before it closes the kit.
    setup = gradescope.SETUP_SH
    assert setup.index("chmod -R go+rX /autograder/venv") < setup.index("chmod -R go-rwx")


def test_a_deep_or_long_upload_is_staged_bounded_and_noted(tmp_path, toy):
    submission = tmp_path / "submission"
    submission.mkdir()
    for name in CODE:
        shutil.copyfile(REFERENCE / name, submission / name)
    fd = os.open(submission, os.O_RDONLY)
    for _ in range(300):  # deeper than copytree's recursion or the intake's cap would allow
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    (submission / ("n" * 250 + ".py")).write_text("x = 1\n")
    notes: list[str] = []
    staged = gradescope.stage_submission(submission, tmp_path / "subs", notes)
    deepest = max(len(p.relative_to(staged).parts) for p in staged.rglob("*"))
    assert deepest == intake.DEFAULT_LIMITS.max_depth + 1
    assert len(notes) == 1 and "too long" in notes[0]
    taken = intake.materialise(intake.discover(tmp_path / "subs")[0], tmp_path / "scratch", lesson=toy)
    assert any("levels deep" in n for n in taken.notes)
    assert sorted(p.name for p in (tmp_path / "scratch").glob("*.py")) == sorted(CODE)


def test_a_lesson_outside_the_kit_is_a_usage_error_saying_what_to_do(tmp_path, capsys):
    from grader.lesson import load_lesson

    outside = tmp_path / "toy"
    shutil.copytree(TOY, outside)
    assert gradescope.main(out=str(tmp_path / "dist"), lesson=load_lesson(str(outside))) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradescope: ") and "outside the kit" in err and "move the lesson" in err
    assert "Traceback" not in err

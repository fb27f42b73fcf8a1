"""grader/gradescope.py: the autograder zip, and run_autograder on a fake /autograder tree."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader import gradescope

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "day13"
DELIVERABLES = ("README.md", "analysis.md", "attention_heatmap.png", "attention_weights.npy", "transformer_block.png")
CODE = ("self_attention.py", "multihead.py", "positional.py", "block.py")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    assert gradescope.main(out=str(out)) == 0
    return out / "gradescope.zip"


def test_zip_holds_scripts_engine_hidden_graders_and_reference(built, tmp_path):
    with zipfile.ZipFile(built) as archive:
        infos = {i.filename: i for i in archive.infolist()}
        setup = archive.read("setup.sh").decode()
    for script in ("setup.sh", "run_autograder"):
        assert infos[script].external_attr >> 16 & 0o111, f"{script} must be executable"
    names = set(infos)
    for needed in ("grader/run.py", "grader/score.py", "grader/sandbox.py", "grader/report.py",
                   "grader/day13/rubric.toml", "pyproject.toml", *(f"solutions/day13/{m}" for m in CODE)):
        assert needed in names, f"{needed} missing from the autograder zip"
    hidden = {p.relative_to(ROOT).as_posix() for p in (ROOT / "grader" / "day13").rglob("*.py")
              if "__pycache__" not in p.parts}
    assert hidden and hidden <= names
    assert not any(n.startswith(("tests/", "assignments/", "dist/", "demo/")) or "__pycache__" in n for n in names)
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in setup
    assert gradescope.build(out=tmp_path).read_bytes() == built.read_bytes(), "the zip must be reproducible"


def test_scripts_are_valid_bash():
    for text in (gradescope.SETUP_SH, gradescope.RUN_AUTOGRADER):
        subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("layout", ["loose", "one_folder", "zip"])
def test_stage_submission_layouts(tmp_path, layout):
    submission = tmp_path / "submission"
    inner = submission / "my-day13" if layout == "one_folder" else submission
    inner.mkdir(parents=True)
    (inner / "self_attention.py").write_text("x = 1\n")
    (inner / "README.md").write_text("hello\n")
    (submission / ".DS_Store").write_text("junk")
    if layout == "zip":
        with zipfile.ZipFile(tmp_path / "up.zip", "w") as archive:
            archive.write(inner / "self_attention.py", "self_attention.py")
        for path in list(submission.iterdir()):
            path.unlink()
        shutil.copyfile(tmp_path / "up.zip", submission / "day13.zip")
    staged = gradescope.stage_submission(submission, tmp_path / "subs")
    if layout == "zip":
        assert staged.name == "submission.zip" and zipfile.is_zipfile(staged)
    else:
        assert staged.name == "submission"
        assert {"README.md", "self_attention.py"} <= set(_files(staged))


def _fake_tree(tmp_path: Path, built: Path) -> Path:
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    with zipfile.ZipFile(built) as archive:
        archive.extractall(root / "source")
    (root / "submission").mkdir()
    return root


def test_run_autograder_writes_gradescope_results(built, tmp_path):
    root = _fake_tree(tmp_path, built)
    for name in CODE + DELIVERABLES:
        shutil.copyfile(REFERENCE / name, root / "submission" / name)
    # Change one test's points in the unzipped rubric: the results must follow the zip's own copy.
    rubric = root / "source" / "grader" / "day13" / "rubric.toml"
    text = rubric.read_text(encoding="utf-8")
    edited = re.sub(r"(\[self_attention\.causal_mask\]\npoints = )(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 1),
                    text, count=1)
    assert edited != text
    rubric.write_text(edited, encoding="utf-8")
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
    run = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == pytest.approx(101)
    assert sum(t["max_score"] for t in results["tests"]) == pytest.approx(101)
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
    (root / "submission" / "block.py").write_text("x = 1\n")
    assert gradescope.run_autograder(root=root, python="/bin/false") == 1
    assert not (root / "results" / "results.json").exists()
    assert "autograder error" in capsys.readouterr().err


def test_missing_submission_folder(tmp_path):
    assert gradescope.run_autograder(root=tmp_path / "nowhere") == 2


def test_stage_submission_grades_the_notebook_over_untouched_stubs(tmp_path):
    from grader import release

    submission = tmp_path / "submission"
    submission.mkdir()
    for name, text in release.stub_texts().items():
        (submission / name).write_text(text, encoding="utf-8")
    (submission / "day13.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n')
    staged = gradescope.stage_submission(submission, tmp_path / "subs")
    assert _files(staged) == ["day13.ipynb"]
    assert len(list(submission.glob("*.py"))) == 4, "Gradescope's own copy is left as it was"

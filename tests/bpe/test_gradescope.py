"""The BPE lesson's Gradescope autograder zip, built by the command and run locally on a fake /autograder
tree, as Gradescope runs it: the reference gets every point, a student with a catalogued mistake gets
that part's points taken and the mistake named."""
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

from .helpers import FILES, REFERENCE, ROOT

DEMO = ROOT / "demo" / "bpe" / "class"
TOKENIZER_TESTS = ("worked_example", "reference", "round_trip", "decode_split", "invalid_bytes", "repeated_calls")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("bpe-gradescope")
    done = subprocess.run([sys.executable, "-m", "grader", "gradescope", "--lesson", "bpe", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out / "gradescope.zip"


def test_the_zip_holds_this_lesson_and_not_day13(built):
    with zipfile.ZipFile(built) as archive:
        names = archive.namelist()
    assert "grader/bpe/tests/test_tokenizer.py" in names and "solutions/bpe/training.py" in names
    assert not [n for n in names if "day13" in n], "another lesson's hidden tests or reference in the zip"


def run_autograder(tmp_path, built, submission) -> dict:
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    with zipfile.ZipFile(built) as archive:
        archive.extractall(root / "source")
    (root / "submission").mkdir()
    for name in FILES:
        shutil.copyfile(submission / name, root / "submission" / name)
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
    run = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))


def test_the_reference_gets_every_point(built, tmp_path):
    results = run_autograder(tmp_path, built, REFERENCE)
    assert results["score"] == pytest.approx(100)
    rubric = tomllib.loads((ROOT / "grader" / "bpe" / "rubric.toml").read_text(encoding="utf-8"))
    graded = sum(len(rubric[part]) for part in ("training", "tokenizer"))  # every hidden test with points
    assert all(t["status"] == "passed" for t in results["tests"]) and len(results["tests"]) == graded


def test_a_catalogued_mistake_costs_its_part_and_is_named(built, tmp_path):
    results = run_autograder(tmp_path, built, DEMO / "dmitri_decode_per_token")
    failed = [t for t in results["tests"] if t["status"] != "passed"]
    assert failed and all(t["name"].endswith(tuple(f"(tokenizer.{n})" for n in TOKENIZER_TESTS)) for t in failed), failed
    assert any("Join all the tokens' bytes first" in t["output"] for t in failed)
    assert results["score"] == pytest.approx(69)

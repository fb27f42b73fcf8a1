"""assignments/day13/tools/heatmap.py and check.py, run the way a student runs them: `make heatmap`
and `make check` in a copy of the student folder holding the reference solution. Each make call is a
fresh Python that imports torch (about 2 s), so the folder set-ups are shared per module."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grader.judging import deliverables
from grader.day13 import deliverable_checks

ROOT = Path(__file__).resolve().parents[2]
STUDENT = ROOT / "assignments" / "day13"
REFERENCE = ROOT / "solutions" / "day13"
MODULES = ("self_attention.py", "multihead.py", "positional.py", "block.py")


def student_folder(where: Path, code_from: Path) -> Path:
    """A student folder as released: code, Makefile, tools/ with the standalone checker beside them."""
    where.mkdir(parents=True)
    for name in MODULES:
        shutil.copy(code_from / name, where / name)
    shutil.copy(STUDENT / "Makefile", where / "Makefile")
    shutil.copytree(STUDENT / "tools", where / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "grader" / "judging" / "deliverables.py", where / "tools" / "deliverables.py")
    shutil.copy(deliverable_checks.__file__, where / "tools" / deliverables.RELEASED_CHECKS)
    shutil.copy(deliverable_checks.FINGERPRINTS, where / "tools" / deliverable_checks.FINGERPRINTS.name)
    return where


def run_checks(folder: Path) -> list:
    return deliverables.run_checks(folder, deliverable_checks.CHECKS)


def make(folder: Path, target: str, **variables) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SENTENCE", "MODE")}
    args = ["make", "-s", target, f"PYTHON={sys.executable}"] + [f"{k}={v}" for k, v in variables.items()]
    return subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=120, env=env)


def load_tool(name: str):
    spec = importlib.util.spec_from_file_location(f"day13_tools_{name}", STUDENT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """`make heatmap MODE=trained` on the reference, default sentence."""
    folder = student_folder(tmp_path_factory.mktemp("trained") / "day13", REFERENCE)
    return folder, make(folder, "heatmap", MODE="trained")


def test_make_heatmap_on_the_reference_writes_files_that_pass_the_checker(trained):
    folder, done = trained
    assert done.returncode == 0, done.stderr
    results = {r.id: r for r in run_checks(folder)}
    assert results["heatmap_png"].passed, results["heatmap_png"].message
    assert results["heatmap_weights"].passed, results["heatmap_weights"].message
    assert "The | cat | sat | on | the | mat" in done.stdout


def test_trained_mode_learns_the_previous_token_pattern(trained):
    folder, _ = trained
    weights = np.load(folder / "attention_weights.npy")  # (T, T)
    T = weights.shape[0]
    assert weights.shape == (6, 6)
    assert list(weights.argmax(axis=1)) == [0] + list(range(T - 1))
    assert weights[np.arange(1, T), np.arange(T - 1)].min() > 0.9


def test_reference_deliverables_were_made_by_this_tool(trained):
    folder, _ = trained
    np.testing.assert_allclose(np.load(folder / "attention_weights.npy"),
                               np.load(REFERENCE / "attention_weights.npy"), atol=1e-3)


def test_make_check_gives_a_clean_checklist_for_a_complete_folder(trained):
    folder, _ = trained
    for name in ("analysis.md", "transformer_block.png", "README.md"):
        shutil.copy(REFERENCE / name, folder / name)
    done = make(folder, "check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("✓") == 5 and "All deliverables are in place." in done.stdout
    (folder / "README.md").unlink()
    done = make(folder, "check")
    assert done.returncode != 0 and "✗ README" in done.stdout and "Missing: no README.md" in done.stdout


def test_handset_mode_links_repeated_words(tmp_path):
    folder = student_folder(tmp_path / "day13", REFERENCE)
    done = make(folder, "heatmap", MODE="handset", SENTENCE='the dog saw "the" cat')
    assert done.returncode == 0, done.stderr
    weights = np.load(folder / "attention_weights.npy")  # tokens: the dog saw " the " cat
    assert weights.shape == (7, 7)
    the, quote = [0, 4], [3, 5]
    for row in the + quote:
        partners = the if row in the else quote
        others = [c for c in range(7) if c not in partners]
        assert weights[row, partners].min() > 5 * weights[row, others].max()
    assert all(r.passed for r in run_checks(folder) if r.id.startswith("heatmap"))


def test_random_mode_says_the_pattern_is_arbitrary(tmp_path):
    folder = student_folder(tmp_path / "day13", REFERENCE)
    done = make(folder, "heatmap", SENTENCE="A small example sentence here")
    assert done.returncode == 0, done.stderr
    assert "ARBITRARY" in done.stdout
    assert np.load(folder / "attention_weights.npy").shape == (5, 5)


def test_against_the_stubs_it_says_what_to_implement_without_a_traceback(tmp_path):
    folder = student_folder(tmp_path / "day13", STUDENT)
    done = make(folder, "heatmap")
    assert done.returncode != 0
    assert "not implemented yet" in done.stderr and "Task 1" in done.stderr and "Task 3" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (folder / "attention_heatmap.png").exists()


def test_a_crashing_forward_is_reported_with_its_line(tmp_path):
    folder = student_folder(tmp_path / "day13", REFERENCE)
    source = (folder / "self_attention.py").read_text(encoding="utf-8")
    broken = source.replace("Q @ K.transpose(-2, -1)", "Q @ K", 1)
    assert broken != source
    (folder / "self_attention.py").write_text(broken, encoding="utf-8")
    done = make(folder, "heatmap", SENTENCE="one two three four five")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "RuntimeError" in done.stderr and "self_attention.py, line" in done.stderr


def test_check_tool_finds_the_kit_checker_when_not_released():
    done = subprocess.run([sys.executable, str(STUDENT / "tools" / "check.py"), str(REFERENCE)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "All deliverables are in place." in done.stdout, done.stdout + done.stderr


def test_tokenize_and_strongest_links():
    heatmap = load_tool("heatmap")
    assert heatmap.tokenize("The animal didn't cross, it was tired.") == \
        ["The", "animal", "didn't", "cross", ",", "it", "was", "tired", "."]
    weights = np.array([[0.7, 0.3, 0.0], [0.1, 0.1, 0.8], [0.5, 0.25, 0.25]])
    assert heatmap.strongest_links(weights, ["a", "b", "c"], count=2) == [
        "'b' (row 1) -> 'c' (column 2): 0.80", "'c' (row 2) -> 'a' (column 0): 0.50"]

"""Probes a student cannot recognise: the "does the work" gates of the property tests.

Reproductions of two cheats on the gates (tests/fixtures/gate_cheats/), written before the fix and
kept as strict expected failures until it lands: the attention probe uses fixed seeds, a shape no value
test uses, (2, 4, 3), and a fixed call order, so uniform attention that computes attention only on that
shape passes the tests it gates; and multi-head's properties test is passed by a class with no
attention at all. When the gates are fixed these tests pass, and strict=True makes that a failure
until the marks are removed."""
import shutil
from pathlib import Path

import pytest

from grader.admin import killrate

ROOT = Path(__file__).resolve().parents[2]
CHEATS = ROOT / "tests" / "fixtures" / "gate_cheats"
SOLUTIONS = ROOT / "solutions" / "day13"


def _grade(tmp_path, file: str, cheat: str) -> dict:
    folder = tmp_path / "sub"
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / file).write_text((CHEATS / cheat).read_text())
    return killrate.grade(folder, cheat).component_scores()


def _never_reacting(tmp_path) -> float:
    text = (CHEATS / "self_attention_gate_shape.py").read_text()
    text = text.replace("if tuple(Q.shape) == (2, 4, 3) and tuple(K.shape) == (2, 4, 3):", "if False:")
    folder = tmp_path / "never"
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "self_attention.py").write_text(text)
    return killrate.grade(folder, "never").component_scores()["self_attention"]


@pytest.mark.xfail(strict=True, reason="the attention probe's shape (2, 4, 3) and seeds are fixed: recognisable "
                                       "(18/30 against 3/30 for the same uniform attention everywhere)")
def test_attention_that_reacts_only_on_the_probes_shape_scores_like_uniform_attention(tmp_path):
    assert _grade(tmp_path, "self_attention.py", "self_attention_gate_shape.py")["self_attention"] \
        == _never_reacting(tmp_path)


@pytest.mark.xfail(strict=True, reason="multihead.properties passes a class with no attention (8/25, structure cap 5)")
def test_a_multihead_class_without_attention_gets_no_more_than_the_structure_points(tmp_path):
    assert _grade(tmp_path, "multihead.py", "multihead_without_attention.py")["multihead"] <= 5

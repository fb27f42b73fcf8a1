"""grader/running/deliverables_process.py: the deliverables checks in a limited helper answer like run_checks, and a
submission whose files pass the helper's memory or time limit gets that reason; the next one is
checked by a fresh helper."""
import os
import shutil
from pathlib import Path

import pytest
from PIL import Image

from grader.judging import deliverables
from grader.running.deliverables_process import LimitedChecker
from grader.lesson import load_lesson

REFERENCE = Path(__file__).resolve().parents[2] / "solutions" / "day13"
DELIVERABLES = ("attention_heatmap.png", "attention_weights.npy", "analysis.md", "transformer_block.png", "README.md")
DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage
CHECKS = DAY13.deliverable_checks()
CHECK_IDS = [check_id for check_id, _ in CHECKS]


def run_checks(folder):
    return deliverables.run_checks(folder, CHECKS)


@pytest.fixture
def folders(tmp_path):
    honest = tmp_path / "honest"
    honest.mkdir()
    for f in DELIVERABLES:
        shutil.copy(REFERENCE / f, honest / f)
    bomb = tmp_path / "bomb"
    shutil.copytree(honest, bomb)
    # 49 megapixels (under the checker's cap), one colour: decoded whole, 196 MB as RGBA.
    Image.new("RGBA", (7000, 7000), "white").save(bomb / "attention_heatmap.png")
    return honest, bomb


def test_the_helper_answers_exactly_like_run_checks(folders):
    honest, bomb = folders
    with LimitedChecker(lesson=DAY13, memory_bytes=1 << 30, seconds=120) as checker:
        for folder in (honest, bomb, honest):
            assert checker.run_checks(folder) == run_checks(folder)


def test_a_file_that_needs_more_memory_than_the_helper_may_use_fails_with_that_reason(folders):
    honest, bomb = folders
    with LimitedChecker(lesson=DAY13, memory_bytes=300 << 20, seconds=120) as checker:
        checks = {c.id: c for c in checker.run_checks(bomb)}
        assert not checks["heatmap_png"].passed
        assert "memory" in checks["heatmap_png"].message and "checker bug" not in checks["heatmap_png"].message
        assert [c.passed for c in checker.run_checks(honest)] == [True] * len(CHECK_IDS)


def test_checks_that_overrun_their_time_are_stopped_and_the_next_folder_gets_a_fresh_helper(folders):
    honest, bomb = folders
    with LimitedChecker(lesson=DAY13, memory_bytes=1 << 30, seconds=0.05) as checker:
        checks = checker.run_checks(bomb)  # decoding 49 megapixels takes far more than 50 ms
        assert [c.id for c in checks] == list(CHECK_IDS)
        assert all(not c.passed and "took more than 0.05 s" in c.message for c in checks)
        assert checker._proc is None  # killed, not left running
    with LimitedChecker(lesson=DAY13, memory_bytes=1 << 30, seconds=120) as checker:
        first = checker._helper().pid
        checker.run_checks(honest)
        assert checker._helper().pid == first  # one helper serves many submissions
    assert not os.path.exists(f"/proc/{first}") or Path(f"/proc/{first}/stat").read_text().split()[2] == "Z"


def test_a_lesson_without_deliverable_checks_gets_no_checks_and_no_helper(folders):
    from types import SimpleNamespace

    without = SimpleNamespace(deliverables_module=None)  # the lesson value, as far as the checker reads it
    with LimitedChecker(memory_bytes=1 << 30, seconds=120, lesson=without) as checker:
        assert checker.run_checks(folders[0]) == [] and checker._proc is None


def test_an_answer_nobody_collected_is_never_handed_to_the_next_folder(folders):
    honest, bomb = folders
    with LimitedChecker(lesson=DAY13, memory_bytes=1 << 30, seconds=120) as checker:
        checker.start(bomb)  # the grading of that submission failed before it asked for the answer
        checker.start(honest)
        assert checker.finish() == run_checks(honest)

"""grader/running/deliverables_process.py: the deliverables checks in a limited helper answer like run_checks, and a
submission whose files pass the helper's memory or time limit gets that reason; the next one is
checked by a fresh helper. Through the toy lesson with its deliverables (a lesson found by path, whose
package the helper must find again)."""
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from grader.judging import deliverables
from grader.running.deliverables_process import LimitedChecker

WORDS = ("Softmax subtracts the largest logit of each row before exponentiating, which changes nothing in the "
         "result but keeps every exponential at most one, so large logits never overflow to infinity.\n")


@pytest.fixture
def lesson(toy_with_deliverables):
    return toy_with_deliverables


def run_checks(folder, lesson):
    return deliverables.run_checks(folder, lesson.deliverable_checks())


@pytest.fixture(scope="module")
def bomb_png(tmp_path_factory) -> bytes:
    """49 megapixels (under the checker's cap), one colour: decoded whole, 196 MB as RGBA. Drawn once (a second
    of work), written into each test's folders."""
    path = tmp_path_factory.mktemp("bomb") / "softmax_plot.png"
    Image.new("RGBA", (7000, 7000), "white").save(path)
    return path.read_bytes()


@pytest.fixture
def folders(tmp_path, bomb_png):
    honest = tmp_path / "honest"
    honest.mkdir()
    rows = np.linspace(0, 255, 240, dtype=np.uint8)[:, None].repeat(320, axis=1)  # a gradient: many colours
    Image.fromarray(np.stack([rows, rows[::-1], np.full_like(rows, 90)], axis=-1), "RGB").save(honest / "softmax_plot.png")
    for name in ("notes.md", "README.md"):
        (honest / name).write_text(WORDS)
    bomb = tmp_path / "bomb"
    shutil.copytree(honest, bomb)
    (bomb / "softmax_plot.png").write_bytes(bomb_png)
    return honest, bomb


def test_the_helper_answers_exactly_like_run_checks(folders, lesson):
    honest, bomb = folders
    assert [c.passed for c in run_checks(honest, lesson)] == [True] * len(lesson.deliverable_checks())
    with LimitedChecker(lesson=lesson, memory_bytes=1 << 30, seconds=120) as checker:
        for folder in (honest, bomb, honest):
            assert checker.run_checks(folder) == run_checks(folder, lesson)


def test_a_file_that_needs_more_memory_than_the_helper_may_use_fails_with_that_reason(folders, lesson):
    honest, bomb = folders
    with LimitedChecker(lesson=lesson, memory_bytes=300 << 20, seconds=120) as checker:
        checks = {c.id: c for c in checker.run_checks(bomb)}
        assert not checks["plot"].passed
        assert "memory" in checks["plot"].message and "checker bug" not in checks["plot"].message
        assert [c.passed for c in checker.run_checks(honest)] == [True] * len(lesson.deliverable_checks())


def test_checks_that_overrun_their_time_are_stopped_and_the_next_folder_gets_a_fresh_helper(folders, lesson):
    honest, bomb = folders
    with LimitedChecker(lesson=lesson, memory_bytes=1 << 30, seconds=0.05) as checker:
        checks = checker.run_checks(bomb)  # decoding 49 megapixels takes far more than 50 ms
        assert [c.id for c in checks] == [check_id for check_id, _ in lesson.deliverable_checks()]
        assert all(not c.passed and "took more than 0.05 s" in c.message for c in checks)
        assert checker._proc is None  # killed, not left running
    with LimitedChecker(lesson=lesson, memory_bytes=1 << 30, seconds=120) as checker:
        first = checker._helper().pid
        checker.run_checks(honest)
        assert checker._helper().pid == first  # one helper serves many submissions
    assert not os.path.exists(f"/proc/{first}") or Path(f"/proc/{first}/stat").read_text().split()[2] == "Z"


def test_a_checker_starved_by_a_busy_machine_still_checks_and_costs_no_point(folders, lesson):
    """The checker's limit is CPU time: paused past its allowance in wall time (as other work on the machine
    starves it), it still answers, and the honest folder's deliverables pass."""
    import signal
    import threading

    honest, _ = folders
    with LimitedChecker(lesson=lesson, memory_bytes=1 << 30, seconds=2) as checker:
        checker.run_checks(honest)  # the helper is up (its start-up is not what is measured here)
        checker.start(honest)
        os.kill(checker._proc.pid, signal.SIGSTOP)
        threading.Timer(3.0, os.kill, (checker._proc.pid, signal.SIGCONT)).start()  # 1.5 times its allowance
        assert checker.finish() == run_checks(honest, lesson)
        assert [c.passed for c in run_checks(honest, lesson)] == [True] * len(lesson.deliverable_checks())


def test_a_lesson_without_deliverable_checks_gets_no_checks_and_no_helper(folders):
    from types import SimpleNamespace

    without = SimpleNamespace(deliverables_module=None)  # the lesson value, as far as the checker reads it
    with LimitedChecker(memory_bytes=1 << 30, seconds=120, lesson=without) as checker:
        assert checker.run_checks(folders[0]) == [] and checker._proc is None


def test_an_answer_nobody_collected_is_never_handed_to_the_next_folder(folders, lesson):
    honest, bomb = folders
    with LimitedChecker(lesson=lesson, memory_bytes=1 << 30, seconds=120) as checker:
        checker.start(bomb)  # the grading of that submission failed before it asked for the answer
        checker.start(honest)
        assert checker.finish() == run_checks(honest, lesson)

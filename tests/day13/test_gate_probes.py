"""Probes a student cannot recognise: the "does the work" gates of the property tests.

Cheats on the gates (tests/fixtures/gate_cheats/), written before the fix (they failed then: 18/30
against 3/30, and 8/25 against a structure cap of 5): the attention probe used fixed seeds, a shape no
value test uses, (2, 4, 3), and a fixed call order, so uniform attention that computed attention only on
that shape passed the tests it gates; and multi-head's properties test was passed by a class with no
attention at all. The gates now probe each test's own calls, with numbers from the run's seed, in the
run's order, and ask each probed call again with its tokens reordered."""
import shutil
from collections import Counter
from pathlib import Path

import pytest

from grader.admin import killrate
from grader.judging import score
from grader.lesson import load_lesson
from grader.running.calls import InProcessTransport

ROOT = Path(__file__).resolve().parents[2]
CHEATS = ROOT / "tests" / "fixtures" / "gate_cheats"
SOLUTIONS = ROOT / "solutions" / "day13"
LESSON = load_lesson("day13")


def _grade(tmp_path, file: str, cheat: str) -> dict:
    folder = tmp_path / "sub"
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / file).write_text((CHEATS / cheat).read_text())
    return killrate.grade(folder, cheat, lesson=LESSON).component_scores(LESSON.components)


def _never_reacting(tmp_path) -> float:
    text = (CHEATS / "self_attention_gate_shape.py").read_text()
    text = text.replace("if tuple(Q.shape) == (2, 4, 3) and tuple(K.shape) == (2, 4, 3):", "if False:")
    folder = tmp_path / "never"
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "self_attention.py").write_text(text)
    return killrate.grade(folder, "never", lesson=LESSON).component_scores(LESSON.components)["self_attention"]


def test_attention_that_reacts_only_on_the_probes_shape_scores_like_uniform_attention(tmp_path):
    assert _grade(tmp_path, "self_attention.py", "self_attention_gate_shape.py")["self_attention"] \
        == _never_reacting(tmp_path)


def test_a_multihead_class_without_attention_gets_no_more_than_the_structure_points(tmp_path):
    assert _grade(tmp_path, "multihead.py", "multihead_without_attention.py")["multihead"] <= 5


def _grade_seeded(tmp_path, file: str, cheat: str, seed: int):
    folder = tmp_path / f"seed{seed}"
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / file).write_text((CHEATS / cheat).read_text())
    return score.grade_submission(name=cheat, directory=folder, transport=InProcessTransport(folder, lesson=LESSON),
                                  lesson=LESSON, check_deliverables=lambda _: [], seed=seed)


@pytest.mark.parametrize("seed", [1, 2])
def test_attention_that_answers_a_call_by_what_it_saw_before_fails_the_consistency_re_ask(tmp_path, seed):
    # Uniform the first time it sees a set of values, real attention when they come back, as they do in a
    # probe that changes only Q or K: the probes then see attention, the test's own calls do not. Asked
    # again with its tokens reordered, the call gets uniform weights again, not the reordered answer.
    result = _grade_seeded(tmp_path, "self_attention.py", "self_attention_first_sight.py", seed)
    tests = {t.name: t for t in result.tests}
    assert "did not follow the tokens when the same tokens came in another order" in tests["self_attention.sdpa_properties"].output
    assert tests["self_attention.sdpa_masks"].status == "failed"
    assert result.component_scores(LESSON.components)["self_attention"] <= 7  # never reacting: 3; + 4 for answers equal to the reference's


def test_the_seed_changes_the_probes_not_the_grade_of_correct_code(tmp_path):
    transport = InProcessTransport(SOLUTIONS, lesson=LESSON)
    asked = {}
    for seed in (3, 4):
        student_calls = []
        original = transport.call

        def call(header, arrays, original=original):
            student_calls.append(tuple(sorted((k, v.tobytes()) for k, v in arrays.items())))
            return original(header, arrays)

        transport.call = call
        result = score.grade_submission(name="reference", directory=SOLUTIONS, transport=transport, lesson=LESSON,
                                        check_deliverables=lambda _: [], seed=seed)
        transport.call = original
        assert all(t.status == "passed" for t in result.tests), [t.name for t in result.tests if t.status != "passed"]
        asked[seed] = student_calls
    # The same calls of the value tests; other probe inputs, and another order.
    assert asked[3] != asked[4] and len(asked[3]) == len(asked[4])
    same = sum((Counter(asked[3]) & Counter(asked[4])).values())
    assert len(asked[3]) // 2 < same < len(asked[3])


@pytest.mark.parametrize("seed", [1, 2])
def test_a_block_that_hands_back_its_earlier_answer_for_the_same_tokens_in_another_order_fails_the_gate(tmp_path, seed):
    # Before the mask pass-through's probe was asked again with its tokens reordered, this block kept 20/20.
    result = _grade_seeded(tmp_path, "block.py", "block_remembers_tokens.py", seed)
    tests = {t.name: t for t in result.tests}
    assert "its outputs did not follow the tokens when the same tokens came in another order" in tests["block.mask_passthrough"].output
    assert tests["block.post_ln"].status == tests["block.pre_ln"].status == "passed"  # it is a right block otherwise

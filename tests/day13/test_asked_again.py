"""Every hidden test that passes is judged again on its own calls asked once more, in another order of the
run's seed (grader/judging/score.py, Adapter.ask_again): an answer that depends on when, how often or beside
what a call was asked is judged as it was given the second time too.

Written before the change: a multi-head class that answers a call right the first time it sees it, and
with no attention when the same call comes back, kept full marks on the value-only tests (reference, masks,
gradients), which asked each call once. Beside it, honest code whose answers are never bit for bit alike
(a random wobble of rounding size, dropout that eval mode turns off) keeps full marks."""
import shutil
from pathlib import Path

import pytest

from grader.judging import score
from grader.lesson import load_lesson
from grader.running import calls
from grader.running.calls import InProcessTransport

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions" / "day13"
FIXTURES = ROOT / "tests" / "fixtures"
LESSON = load_lesson("day13")


def _grade(tmp_path, files: dict[str, Path], seed: int, tests=None):
    folder = tmp_path / f"seed{seed}"
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name, source in files.items():
        (folder / name).write_text(source.read_text())
    return score.grade_submission(name=folder.name, directory=folder, transport=InProcessTransport(folder, lesson=LESSON),
                                  lesson=LESSON, check_deliverables=lambda _: [], seed=seed, tests=tests)


@pytest.mark.parametrize("seed", [1, 2])
def test_right_only_the_first_time_loses_every_test_whose_answer_changed(tmp_path, seed):
    result = _grade(tmp_path, {"multihead.py": FIXTURES / "gate_cheats" / "multihead_first_time.py"}, seed)
    tests = {t.name: t for t in result.tests}
    # One call of each passed test comes back, drawn from the seed. Every call of these two tests is compared
    # with the reference and shows a change, so whichever comes back, its second answer fails the test.
    for name in ("multihead.masks", "multihead.gradients"):
        assert tests[name].status == "failed", name
        assert "your code answered differently" in tests[name].output
    # Tests whose calls it answers the same way each time keep their points.
    assert tests["multihead.attributes"].status == "passed" and tests["multihead.rejects_bad_heads"].status == "passed"
    # The reference and properties tests fail when the call drawn is one whose second answer changes their
    # verdict (the reference test's T=1 call is answered rightly either way: one token attends only to itself).
    assert result.component_scores(LESSON.components)["multihead"] <= 13
    assert any("asked again" in f and "multihead.masks" in f for f in result.flags)  # for the staff


@pytest.mark.parametrize("seed", [5, 6])
def test_honest_answers_that_are_never_bit_for_bit_alike_keep_full_marks(tmp_path, seed):
    noisy = FIXTURES / "honest_noise"
    result = _grade(tmp_path, {"self_attention.py": noisy / "self_attention.py", "multihead.py": noisy / "multihead.py"},
                    seed, tests={f"{c}.{t}" for c, t, _ in LESSON.hidden_tests if c in ("self_attention", "multihead")})
    assert result.tests and all(t.status == "passed" for t in result.tests), \
        [(t.name, t.output[:300]) for t in result.tests if t.status != "passed"]
    assert not result.flags


class _AskedAgainNeverAnswered(InProcessTransport):
    """The reference in this process, except that a call asked again (Adapter.queue_again) gets the fault a
    sandbox gives a call it could not run: what a passed test's call asked again meets when it rides in a batch
    beside another test's calls that loop (the module condemned after two time-outs, the time budget used up)."""

    def __init__(self, directory, *, lesson, fault):
        super().__init__(directory, lesson=lesson)
        self.again, self.fault, self.faulted = [], fault, 0

    def call(self, header, arrays):
        if any(header is h and arrays is a for h, a in self.again):
            self.again = [(h, a) for h, a in self.again if not (header is h and arrays is a)]
            self.faulted += 1
            return {"error": {"type": self.fault, "message": "no answer within 5 s; the process was stopped",
                              "traceback": ""}, "forbidden": []}, {}
        return super().call(header, arrays)


@pytest.mark.parametrize("fault", ["Timeout", "Crashed"])
def test_a_call_asked_again_that_another_tests_fault_left_unanswered_costs_nothing(tmp_path, fault, monkeypatch):
    """Found on the demo class's infinite loop (mia): multihead.attributes passed, its inspect call asked again
    rode with multihead.reference's batch, whose forward calls timed out until multihead.py was condemned, and
    the unanswered second asking failed the attributes test; 3 points gone or kept by the seed's draw."""
    folder = tmp_path / "work"
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    transport = _AskedAgainNeverAnswered(folder, lesson=LESSON, fault=fault)
    queue_again = calls.Adapter.queue_again

    def marking(self, recorded, count):
        before = len(self._pending)
        asked = queue_again(self, recorded, count)
        transport.again += [(call.header, call.arrays) for call in self._pending[before:]]
        return asked

    monkeypatch.setattr(calls.Adapter, "queue_again", marking)
    result = score.grade_submission(name="work", directory=folder, transport=transport, lesson=LESSON,
                                    check_deliverables=lambda _: [], seed=3)
    assert transport.faulted > 10  # the asked-again calls did meet the fault
    failed = [(t.name, t.output[:200]) for t in result.tests if t.status != "passed"]
    assert not failed and not result.flags

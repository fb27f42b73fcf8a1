"""grader/running/run_seed.py and its use: the run's seed is made once per output folder, kept there for
this user only, reused by a regrade, pinned by --seed; it orders each test's calls and draws its probes."""
import stat

import numpy as np
import pytest

from grader.running import run_seed
from grader.running.calls import Adapter


def test_a_new_folder_gets_a_seed_kept_for_this_user_only_and_reused(tmp_path):
    out = tmp_path / "out"
    seed, reseeded = run_seed.choose(out)
    assert not reseeded and run_seed.read(out) is None  # choosing writes nothing
    run_seed.keep(out, seed)
    assert run_seed.read(out) == seed
    assert stat.S_IMODE((out / run_seed.FILE).stat().st_mode) == 0o600
    assert run_seed.choose(out) == (seed, False)  # a regrade of the folder reuses it
    assert run_seed.choose(tmp_path / "other")[0] != seed  # another run, another seed (2**-63 odds)


def test_seed_pins_it_and_a_different_one_says_the_folder_must_be_graded_again(tmp_path):
    out = tmp_path / "out"
    assert run_seed.choose(out, "42") == (42, False)
    run_seed.keep(out, 42)
    assert run_seed.choose(out, 42) == (42, False)
    assert run_seed.choose(out, "7") == (7, True)


@pytest.mark.parametrize("bad", ["-1", "x", str(1 << 63), ""])
def test_a_bad_seed_says_where_it_came_from(tmp_path, bad):
    with pytest.raises(run_seed.SeedError, match="--seed"):
        run_seed.choose(tmp_path, bad)
    (tmp_path / run_seed.FILE).write_text(bad)
    with pytest.raises(run_seed.SeedError, match=run_seed.FILE):
        run_seed.read(tmp_path)


class Recording:
    def __init__(self):
        self.sent = []

    def call_many(self, calls):
        self.sent.append([int(h["name"]) for h, _ in calls])
        return [({"outputs": [], "n": h["name"]}, {}) for h, _ in calls]


def _batch(seed: int, test: str = "part.test") -> tuple[list, list]:
    transport = Recording()
    student = Adapter(transport, batch=True, seed=seed)
    student.current_test = test
    results = [student.call({"op": "function", "name": str(i)}, {}) for i in range(12)]
    student.send()
    return transport.sent[0], [r.header["n"] for r in results]


def test_each_batch_is_sent_in_an_order_of_the_seed_and_answered_in_place():
    order, answered = _batch(1)
    assert answered == [str(i) for i in range(12)]  # each answer reaches the call that asked it
    assert sorted(order) == list(range(12)) and order != list(range(12))
    assert _batch(1)[0] == order  # the same run: the same order
    assert _batch(2)[0] != order and _batch(1, "part.other")[0] != order


def test_probe_numbers_come_from_the_seed_and_the_test():
    a, b = Adapter(None, seed=5), Adapter(None, seed=6)
    a.current_test = b.current_test = "part.test"
    x = a.rng("probe").standard_normal(4)
    assert np.array_equal(x, Adapter(None, seed=5, current_test="part.test").rng("probe").standard_normal(4))
    assert not np.array_equal(x, b.rng("probe").standard_normal(4))
    assert not np.array_equal(x, a.rng("other").standard_normal(4))


class Counting:
    """A function that answers each call with how many calls it has had: never the same answer twice."""

    def __init__(self):
        self.sent = []

    def call_many(self, calls):
        self.sent.append([h["name"] for h, _ in calls])
        return [({"outputs": [], "n": sum(map(len, self.sent)) - len(calls) + i}, {"x": np.zeros(1)})
                for i, _ in enumerate(calls)]


def _asked_again(seed: int, count: int, transport=None):
    transport = transport or Counting()
    student = Adapter(transport, record=True, batch=True, seed=seed, current_test="part.test")
    first = [student.call({"op": "function", "name": str(i)}, {}) for i in range(12)]
    student.send()
    answers, changed = student.ask_again(student.calls, count)
    return transport, first, answers, changed


def test_calls_asked_again_are_drawn_from_the_seed_and_judged_on_their_second_answers():
    transport, first, answers, changed = _asked_again(1, 3)
    again = transport.sent[1]
    assert len(again) == 3 and changed
    assert _asked_again(1, 3)[0].sent[1] == again and _asked_again(2, 3)[0].sent[1] != again
    # Set as the replay, the calls get their second answers where they were asked again, the first elsewhere,
    # and nothing more is sent.
    student = Adapter(transport, record=True, batch=True, seed=1, current_test="part.test", replay=answers)
    second = [student.call({"op": "function", "name": str(i)}, {}).header["n"] for i in range(12)]
    assert [i for i in range(12) if second[i] != first[i].header["n"]] == sorted(map(int, again))
    assert len(transport.sent) == 2


def test_answers_alike_bit_for_bit_need_no_second_judgement():
    class Same(Counting):
        def call_many(self, calls):
            return [({"outputs": [], "n": h["name"]}, {"x": np.zeros(1)}) for h, _ in calls]

    assert _asked_again(1, 12, Same())[3] is False

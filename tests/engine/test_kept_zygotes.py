"""grader/sandbox/zygote.py, KeptZygotes: which kept zygote a run may take. A zygote is shared only where it is
the same zygote: the limits it sets on each child it forks (rlimits, uids, layers, quota) and the lesson it was
started for. What the grader alone enforces (a call's time, a part's budget, the answer caps) is the run's own,
whichever zygote forks its children. A zygote of more slots serves a run of fewer; the kept ones are bounded.

The zygote class is replaced by a stand-in holding a real process (a `sleep`), so these rules are checked without
paying a torch import per case; tests/engine/test_run.py checks a real kept zygote under a run's own time limit."""
import dataclasses
import subprocess
from types import SimpleNamespace

import pytest

from grader.sandbox import DEFAULT_CONFIG, SandboxConfig, zygote as zygote_module
from grader.sandbox.zygote import KeptZygotes


def fake_lesson(name: str):
    """What KeptZygotes uses of a lesson: its spec as JSON."""
    return SimpleNamespace(spec=lambda: SimpleNamespace(to_json=lambda: {"name": name}))


class FakeZygote:
    """What KeptZygotes uses of a Zygote: its process, its slots and config, close()."""

    def __init__(self, *, slots, config, lesson):
        self.slots, self.config, self.lesson = slots, config, lesson
        self.process = subprocess.Popen(["sleep", "60"])
        self.closed = False

    def close(self):
        self.closed = True
        self.process.kill()
        self.process.wait()


@pytest.fixture
def kept(monkeypatch):
    monkeypatch.setattr(zygote_module, "Zygote", FakeZygote)
    kept = KeptZygotes(limit=2)
    yield kept
    kept.close()


TOY, DAY = fake_lesson("toy"), fake_lesson("day")


def test_what_only_the_grader_enforces_does_not_start_another_zygote(kept):
    first = kept.take(slots=1, config=DEFAULT_CONFIG, lesson=TOY)
    for field, value in (("call_timeout", 0.5), ("module_budget", 7.0), ("spawn_timeout", 2.0),
                         ("start_timeout", 30.0), ("output_tail_bytes", 10), ("reply_bytes", 1 << 20),
                         ("replies_bytes", 4 << 20), ("fatal_faults_per_module", 5)):
        assert kept.take(slots=1, config=dataclasses.replace(DEFAULT_CONFIG, **{field: value}), lesson=TOY) is first, field
    assert kept.started == 1


def test_what_the_zygote_sets_on_its_children_starts_another(kept):
    # Every other field is the zygote's (a field added to SandboxConfig later is too, until someone says otherwise).
    shared = set(zygote_module.GRADER_SIDE_FIELDS)
    for field in (f.name for f in dataclasses.fields(SandboxConfig)):
        if field in shared:
            continue
        value = getattr(DEFAULT_CONFIG, field)
        changed = value[:-1] if isinstance(value, tuple) else value + 1
        base = kept.take(slots=1, config=DEFAULT_CONFIG, lesson=TOY)
        other = kept.take(slots=1, config=dataclasses.replace(DEFAULT_CONFIG, **{field: changed}), lesson=TOY)
        assert other is not base and other.config == dataclasses.replace(DEFAULT_CONFIG, **{field: changed}), field
    assert kept.take(slots=1, config=DEFAULT_CONFIG, lesson=DAY) is not kept.take(slots=1, config=DEFAULT_CONFIG,
                                                                                  lesson=TOY)


def test_a_zygote_of_more_slots_serves_a_run_of_fewer_and_never_of_more(kept):
    two = kept.take(slots=2, config=DEFAULT_CONFIG, lesson=TOY)
    assert kept.take(slots=1, config=DEFAULT_CONFIG, lesson=TOY) is two
    three = kept.take(slots=3, config=DEFAULT_CONFIG, lesson=TOY)
    assert three is not two and three.slots == 3
    assert kept.take(slots=2, config=DEFAULT_CONFIG, lesson=TOY) is three  # the smaller one is closed, not kept beside
    assert two.closed and kept.pids() == {three.process.pid}


def test_the_kept_zygotes_are_bounded_and_the_least_recently_used_goes(kept):
    a = kept.take(slots=1, config=DEFAULT_CONFIG, lesson=TOY)
    b = kept.take(slots=1, config=DEFAULT_CONFIG, lesson=DAY)
    assert kept.take(slots=1, config=DEFAULT_CONFIG, lesson=TOY) is a  # a is now the more recently used
    c = kept.take(slots=1, config=dataclasses.replace(DEFAULT_CONFIG, cpu_seconds=3), lesson=TOY)
    assert b.closed and not a.closed and not c.closed
    assert kept.pids() == {a.process.pid, c.process.pid}


def test_a_dead_or_faulted_zygote_is_replaced(kept):
    a = kept.take(slots=1, config=DEFAULT_CONFIG, lesson=TOY)
    a.process.kill()
    a.process.wait()
    b = kept.take(slots=1, config=DEFAULT_CONFIG, lesson=TOY)
    assert b is not a and kept.started == 2
    kept.give_back(b, healthy=False)
    assert b.closed and kept.pids() == set()
    assert kept.take(slots=1, config=DEFAULT_CONFIG, lesson=TOY) is not b

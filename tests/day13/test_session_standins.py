"""A session (one instance, its methods called in order) stopped by a crash in another graded name of its module is
asked again over that name's stand-in (grader/judging/score.py, OverStandIns), as a single call is; and what the
retry lends outlives it no more than a single call's does (tests/day13/test_standin_isolation.py).

Through the sandboxed child, on Day 13's self_attention (SelfAttention calls scaled_dot_product_attention). The
hostile submission's SelfAttention keeps the function it calls, which during the retry is the grader's stand-in,
where a later call of its own scaled_dot_product_attention, in the same interpreter, would find it.
"""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import REFERENCE, descendants, make_submission, processes_of, settled, uid_base_for_tests  # noqa: E402

from grader.judging import assertions as checks  # noqa: E402
from grader.judging.score import OverStandIns  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402
from grader.running.calls import Adapter, Method  # noqa: E402
from grader.sandbox import SandboxConfig  # noqa: E402
from grader.sandbox.confinement import prepare_scratch, slot_uid  # noqa: E402
from grader.sandbox.transport import SandboxTransport  # noqa: E402
from grader.sandbox.zygote import Zygote  # noqa: E402

DAY13 = load_lesson("day13")
CONFIG = SandboxConfig(call_timeout=10.0, spawn_timeout=20, cpu_seconds=20, uid_base=uid_base_for_tests(15))
# The student's scaled_dot_product_attention raises unless it finds a working one kept by an earlier call; the
# student's SelfAttention keeps whatever scaled_dot_product_attention it calls (@@KEEP@@: the control keeps nothing).
KEEPER = '''
import builtins

import torch
import torch.nn as nn


def scaled_dot_product_attention(Q, K, V, mask=None):
    kept = getattr(builtins, "_kept_attention", None)
    if kept is not None and kept is not scaled_dot_product_attention:
        return kept(Q, K, V, mask)  # the grader's, kept from the retry
    raise RuntimeError("scaled_dot_product_attention is not written yet")


def causal_mask(T, device=None):
    return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        if @@KEEP@@:
            builtins._kept_attention = scaled_dot_product_attention  # during the retry: the stand-in
        return scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)
'''
NAMES = ("honest", "keeper", "control")


@pytest.fixture(scope="module")
def adapters():
    work = Path(tempfile.mkdtemp(prefix="day13-session-standins-"))
    os.chmod(work, 0o711)
    zygote = Zygote(slots=len(NAMES), config=CONFIG, lesson=DAY13)
    zygote.wait_ready()
    made = {}
    try:
        for slot, name in enumerate(NAMES):
            files = {} if name == "honest" else {"self_attention.py": KEEPER.replace("@@KEEP@@", str(name == "keeper"))}
            scratch = make_submission(work / name, files, solutions=REFERENCE)
            prepare_scratch(scratch, slot_uid(CONFIG, slot))
            transport = SandboxTransport(zygote=zygote, slot=slot, scratch=scratch, config=CONFIG)
            made[name] = Adapter(OverStandIns(transport, DAY13.standin_names))
        yield made
    finally:
        for adapter in made.values():
            adapter.transport.close()
        zygote.close()
        shutil.rmtree(work, ignore_errors=True)
        uids = [slot_uid(CONFIG, slot) for slot in range(len(NAMES))]
        assert settled(lambda: processes_of(uids)) == []
        assert settled(lambda: descendants(os.getpid())) == []


def _session(adapter):
    x = np.random.default_rng(0).standard_normal((1, 3, 8)).astype("float32")
    return adapter.session("self_attention", "SelfAttention", init=(8, 4), steps=[Method("forward", x)], seed=0)


def _own_function(adapter):
    q, k, v = (np.random.default_rng(s).standard_normal((1, 3, 4)).astype("float32") for s in (1, 2, 3))
    return adapter.run("self_attention", "scaled_dot_product_attention", args=(q, k, v))


def test_a_session_stopped_in_the_student_s_function_is_judged_over_the_grader_s(adapters):
    honest = _session(adapters["honest"])
    out, weights = checks.step(honest, 0, "forward")
    assert out.shape == (1, 3, 4) and np.allclose(weights.sum(-1), 1) and "over_standins" not in honest.header
    for name in ("keeper", "control"):
        res = _session(adapters[name])
        got, _ = checks.step(res, 0, f"{name}: forward over the stand-in")
        assert res.header["over_standins"] == ["scaled_dot_product_attention"], name
        assert np.allclose(got, out, atol=1e-6), name  # the same seeded weights, the grader's attention


def test_what_the_retry_lent_is_gone_when_the_student_s_own_function_is_called(adapters):
    # Each asked right after its session (and the retry): the keeper's child held the grader's attention then.
    answers = {}
    for name in NAMES:
        _session(adapters[name])
        answers[name] = _own_function(adapters[name])
    assert answers["honest"].error is None
    for name in ("keeper", "control"):
        error = answers[name].error
        assert error and "not written yet" in error["message"], (name, answers[name].header)

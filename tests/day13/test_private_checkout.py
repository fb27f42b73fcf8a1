"""Day 13's correct variants graded from a kit checked out in a folder other users cannot enter: head_loop
calls torch.broadcast_shapes, which imports torch.fx's symbolic shapes (and sympy) at call time, the
first thing a child that cannot read the environment fails on (the engine's side of a private checkout
is tested in tests/engine/test_checkout.py)."""
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import KIT, descendants, settled, private_kit_copy, run_kit, uid_base_for_tests  # noqa: E402

FULL = {"self_attention": 30, "multihead": 25, "positional": 15, "block": 20}
@pytest.fixture(scope="module")
def private_kit():
    with private_kit_copy("day13-private-") as kit:
        yield kit


# The engine as `python -m grader grade` runs it, with this module's own sandbox uids and a call time
# limit generous enough for a loaded machine (a child's first broadcast_shapes imports sympy).
GRADE = """
import sys
from grader.lesson import load_lesson
from grader.running import grade as run
from grader.sandbox import SandboxConfig
config = SandboxConfig(call_timeout=30.0, uid_base={uid_base})
sys.exit(run.main(submissions=sys.argv[1], out=sys.argv[2], jobs=2, config=config, lesson=load_lesson("day13")))
""".format(uid_base=uid_base_for_tests(3))


def code_scores(record):
    scores = {c: 0.0 for c in FULL}
    for t in record["tests"]:
        if t["component"] in scores:
            scores[t["component"]] += t["score"]
    return scores


def test_a_correct_variant_gets_full_code_marks_from_a_kit_in_a_private_folder(private_kit, tmp_path):
    # head_loop calls torch.broadcast_shapes, which imports torch.fx's symbolic shapes (and sympy) at
    # call time: the first thing a child that cannot read the environment fails on.
    subs = tmp_path / "subs"
    for name in ("head_loop", "einsum"):
        shutil.copytree(KIT / "tests" / "fixtures" / "correct" / name, subs / name)
    out = tmp_path / "out"
    done = run_kit(private_kit, "-c", GRADE, str(subs), str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("head_loop", "einsum"):
        record = json.loads((out / name / "record.json").read_text())
        assert code_scores(record) == FULL, (name, [t["output"][:300] for t in record["tests"] if t["score"] == 0])
        if os.geteuid() == 0:
            assert record["isolation"]["uid"] is True and record["isolation"]["landlock_hides_kit"] is True
    assert settled(lambda: descendants(os.getpid())) == []

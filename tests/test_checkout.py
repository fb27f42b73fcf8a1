"""Where the kit is checked out never changes a grade.

An instructor clones the kit into a folder other users cannot enter (`mktemp -d`, a 0700 or 0750
home). The sandboxed child runs as an unprivileged uid, so whatever torch imports lazily at call time
would be unreadable to it, and a correct submission would lose points to "No module named ...". These
tests grade from a copy of the kit (its virtual environment included) inside such a folder.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
from engine_helpers import KIT, descendants, settled  # noqa: E402

FULL = {"self_attention": 30, "multihead": 25, "positional": 15, "block": 20}
# Ignored when copying the kit: outputs, caches, and the virtual environment (linked in separately).
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "out", "dist", "__pycache__", ".pytest_cache", "*.egg-info")


def _link_or_copy(src, dst):
    # Hard links make a copy of a 1 GB environment in seconds. The copy never changes a file's mode or
    # content in place (Python replaces a .pyc by renaming), so the original is never touched.
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


@pytest.fixture(scope="module")
def private_kit():
    """A copy of the kit and of the environment running these tests, at <0700 folder>/kit/.venv."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests run outside a virtual environment: there is none to copy")
    folder = Path(tempfile.mkdtemp(prefix="day13-private-"))  # mode 0700, like any mkdtemp
    kit = folder / "kit"
    shutil.copytree(KIT, kit, ignore=NOT_COPIED, symlinks=True)
    shutil.copytree(sys.prefix, kit / ".venv", symlinks=True, copy_function=_link_or_copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    yield kit
    shutil.rmtree(folder, ignore_errors=True)


def run_kit(kit, *args, timeout=600):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(kit / ".venv" / "bin" / "python"), *args], cwd=kit, env=env,
                          capture_output=True, text=True, timeout=timeout)


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
    done = run_kit(private_kit, "-m", "grader", "grade", str(subs), "--out", str(out), "--jobs", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("head_loop", "einsum"):
        record = json.loads((out / name / "record.json").read_text())
        assert code_scores(record) == FULL, (name, [t["output"][:300] for t in record["tests"] if t["score"] == 0])
        if os.geteuid() == 0:
            assert record["isolation"]["uid"] is True and record["isolation"]["landlock_hides_kit"] is True
    assert settled(lambda: descendants(os.getpid())) == []

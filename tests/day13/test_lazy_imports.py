"""Day 13's lazily imported modules (grader/day13/lazy_imports.txt: torch.fx's symbolic shapes and sympy,
which torch.broadcast_shapes pulls in at call time) are proved importable by the sandbox's start-up
check, then held by the zygote, so a correct call never pays their import within its time limit."""
import os
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import descendants, processes_of, settled, uid_base_for_tests  # noqa: E402

from grader.lesson import load_lesson  # noqa: E402
from grader.sandbox import SandboxConfig  # noqa: E402
from grader.sandbox.confinement import prepare_scratch, slot_uid  # noqa: E402
from grader.sandbox.transport import SandboxTransport  # noqa: E402
from grader.sandbox.zygote import Zygote  # noqa: E402

CONFIG = SandboxConfig(call_timeout=1.5, spawn_timeout=10, cpu_seconds=4, max_file_bytes=4 << 20,
                       uid_base=uid_base_for_tests(0))
SANDBOX_UIDS = range(CONFIG.uid_base, CONFIG.uid_base + 1)


@pytest.fixture(scope="module")
def zygote():
    z = Zygote(slots=1, config=CONFIG, lesson=load_lesson("day13"))
    z.wait_ready()
    yield z
    z.close()
    assert settled(lambda: descendants(os.getpid())) == []


@pytest.fixture
def transport(zygote):
    opened = []
    # Like run.py's scratch root: traversable by the sandbox uids (pytest's tmp_path is not).
    work = Path(tempfile.mkdtemp(prefix="kit-test-lazy-"))
    os.chmod(work, 0o711)

    def make(files, *, reference=False):
        assert not reference
        scratch = work / f"sub{len(opened)}"
        scratch.mkdir()
        for name, text in files.items():
            (scratch / name).write_text(textwrap.dedent(text).lstrip())
        prepare_scratch(scratch, slot_uid(CONFIG, 0))
        t = SandboxTransport(zygote=zygote, slot=0, scratch=scratch, config=CONFIG)
        opened.append(t)
        return t

    yield make
    for t in opened:
        t.close()
    shutil.rmtree(work)
    assert settled(lambda: processes_of(SANDBOX_UIDS)) == []


def fn(name, module="hostile", args=()):
    return {"op": "function", "module": module, "name": name, "args": list(args)}


def test_the_lazily_imported_modules_are_proved_importable_then_held_by_the_zygote(zygote, transport):
    # The start-up check imports the lesson's lazily loaded modules as the sandbox uid; the zygote then
    # imports them itself, so a correct torch.broadcast_shapes never pays sympy's import within its
    # call's time limit (on a loaded machine that import alone took seconds).
    from grader.lesson import load_lesson

    lazy = list(load_lesson("day13").lazy_imports)
    assert "sympy" in lazy and "torch.fx.experimental.symbolic_shapes" in lazy
    assert zygote.view["probe"]["imported"] == lazy and zygote.view["probe"]["failed_imports"] == {}
    t = transport({"held.py": """
        import sys

        def held(x):
            names = ("sympy", "torch.fx.experimental.symbolic_shapes")
            return x * 0 + float(all(name in sys.modules for name in names))
    """}, reference=False)
    header, arrays = t.call(fn("held", module="held", args=[{"array": "x"}]), {"x": np.ones((2, 2), np.float32)})
    assert header["error"] is None, header["error"]
    np.testing.assert_array_equal(arrays["out0"], np.ones((2, 2), np.float32))

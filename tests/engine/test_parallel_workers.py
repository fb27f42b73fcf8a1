"""`make test` runs the suite's files in several pytest processes at once (pytest-xdist). Sandbox uids are
the one thing those processes could share by accident (each leftover check looks for processes of its
uids): uid_base_for_tests gives every process its own 64, by pid. Proven here as arithmetic, and with two
processes that grade through the sandbox at the same moment."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import KIT, UID_OFFSETS, uid_base_for_tests  # noqa: E402

from grader.sandbox.confinement import is_root  # noqa: E402

SLOTS = 4  # uids a module offset may use: uid_base + slot


def uids_of(pid: int) -> set[int]:
    return {uid_base_for_tests(offset, pid) + slot for offset in range(UID_OFFSETS) for slot in range(SLOTS)}


def test_processes_never_share_a_uid_whatever_their_pids():
    # Workers started one after the other get neighbouring pids: the old stride (16 uids a pid for
    # offsets up to 8) gave pid p's offset 4 the uids of pid p + 1's offset 0.
    for pid in (2, 300, 4095, 32767, 4194303):
        mine = uids_of(pid)
        assert len(mine) == UID_OFFSETS * SLOTS
        for other in (pid - 1, pid + 1, pid + 2, pid + 10000, pid + 60000):
            assert not mine & uids_of(other), (pid, other)
        assert min(mine) > 65000  # above a real grading run's slots (64000 + slot)
    with pytest.raises(ValueError, match=f"module_offset {UID_OFFSETS} must be 0-{UID_OFFSETS - 1}"):
        uid_base_for_tests(UID_OFFSETS)


_GRADE_ONE_CALL = textwrap.dedent("""
    import json, os, shutil, sys, tempfile, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1] + "/tests/fixtures")
    from engine_helpers import TOY, uid_base_for_tests
    from grader.lesson import load_lesson
    from grader.sandbox import SandboxConfig
    from grader.sandbox.confinement import prepare_scratch, slot_uid
    from grader.sandbox.transport import SandboxTransport
    from grader.sandbox.zygote import Zygote

    config = SandboxConfig(call_timeout=20, uid_base=uid_base_for_tests(0))
    work = Path(tempfile.mkdtemp(prefix="kit-test-workers-"))
    os.chmod(work, 0o711)
    (work / "who.py").write_text("import os, torch\\ndef uid():\\n    return torch.tensor(os.getuid())\\n")
    prepare_scratch(work, slot_uid(config, 0))
    with Zygote(slots=1, config=config, lesson=load_lesson(str(TOY))) as zygote:
        zygote.wait_ready(0)  # two zygotes start at once: the config's start bound is for a busy machine

        def meet(step):  # wait for the other process to reach the same step
            Path(sys.argv[2] + step).touch()
            while not Path(sys.argv[3] + step).exists():
                time.sleep(0.05)

        with SandboxTransport(zygote=zygote, slot=0, scratch=work, config=config) as transport:
            meet("ready")
            header, arrays = transport.call({"op": "function", "module": "who", "name": "uid", "args": []}, {})
            meet("answered")  # both children are alive now, each in its own process's slot
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"base": config.uid_base, "error": header.get("error"),
                      "child_uid": int(next(iter(arrays.values()))) if arrays else None}))
""")


@pytest.mark.skipif(not is_root(), reason="the sandbox drops to a slot's uid only as root")
def test_two_pytest_processes_grade_at_once_each_under_its_own_uids(tmp_path):
    marks = [str(tmp_path / "process0-"), str(tmp_path / "process1-")]
    procs = [subprocess.Popen([sys.executable, "-c", _GRADE_ONE_CALL, str(KIT), marks[i], marks[1 - i]],
                              cwd=KIT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        answers.append(json.loads(out.strip().splitlines()[-1]))
    for proc, answer in zip(procs, answers):
        assert answer["error"] is None, answer
        # Each process's child ran under that process's own slot uid, computed from its own pid.
        assert answer["base"] == uid_base_for_tests(0, proc.pid)
        assert answer["child_uid"] == answer["base"]
    assert not uids_of(procs[0].pid) & uids_of(procs[1].pid)

"""grader/sandbox/: the child answers like the in-process executor, and every fault becomes a
stated error while the next call is served by a fresh child, with no process left behind."""
import contextlib
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import engine_helpers  # noqa: E402
from engine_helpers import KIT, TOY, descendants, processes_of, settled, uid_base_for_tests  # noqa: E402

from grader.lesson import lesson_names, load_lesson  # noqa: E402
from grader.running.executor import ModuleLoader, execute  # noqa: E402
from grader.sandbox import SandboxConfig  # noqa: E402
from grader.sandbox.confinement import closed_ancestor, is_root, prepare_scratch, slot_uid  # noqa: E402
from grader.sandbox.transport import SandboxTransport  # noqa: E402
from grader.sandbox.zygote import SandboxUnavailable, Zygote  # noqa: E402

# Its own uids, so a grading run elsewhere on the machine cannot look like a leftover of ours.
CONFIG = SandboxConfig(call_timeout=1.5, spawn_timeout=10, cpu_seconds=4, max_file_bytes=4 << 20,
                       uid_base=uid_base_for_tests(0))
SLOTS = 2
SANDBOX_UIDS = range(CONFIG.uid_base, CONFIG.uid_base + SLOTS)
# The lesson the zygote is built for and whose reference a `reference=True` submission holds: the toy's
# (`activations.softmax`, and a `classifier` graded over the grader's softmax).
LESSON = load_lesson(str(TOY))


def make_submission(folder: Path, files: dict[str, str] | None = None, *, reference: bool = True) -> Path:
    return engine_helpers.make_submission(folder, files, reference=reference, solutions=LESSON.solutions)


@pytest.fixture(scope="module")
def zygote():
    z = Zygote(slots=SLOTS, config=CONFIG, lesson=LESSON)
    z.wait_ready()
    yield z
    z.close()
    assert settled(lambda: descendants(os.getpid())) == []


@pytest.fixture
def transport(zygote):
    opened = []
    # Like run.py's scratch root: traversable by the sandbox uids (pytest's tmp_path is not).
    work = Path(tempfile.mkdtemp(prefix="kit-test-sandbox-"))
    os.chmod(work, 0o711)

    def make(files, *, reference=False, slot=0, config=CONFIG):
        scratch = make_submission(work / f"sub{len(opened)}", files, reference=reference)
        prepare_scratch(scratch, slot_uid(CONFIG, slot))
        t = SandboxTransport(zygote=zygote, slot=slot, scratch=scratch, config=config)
        opened.append(t)
        return t

    yield make
    for t in opened:
        t.close()
    shutil.rmtree(work)
    assert settled(lambda: processes_of(SANDBOX_UIDS)) == []
    assert settled(lambda: descendants(zygote.process.pid)) == []


def gone(pid, wait=2.0):
    """The process has exited and been reaped (a zombie is only waiting for that)."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.02)
    return False


def fn(name, module="hostile", args=()):
    return {"op": "function", "module": module, "name": name, "args": list(args)}


def test_child_answers_exactly_like_the_in_process_executor(transport):
    t = transport({}, reference=True)
    rng = np.random.default_rng(1)
    arrays = {"x": (100 * rng.standard_normal((2, 4, 8))).astype(np.float32)}
    header = {"op": "function", "module": "activations", "name": "softmax", "args": [{"array": "x"}], "kwargs": {"dim": 1}}
    got_h, got = t.call(header, arrays)
    want_h, want = execute(header, arrays, loader=ModuleLoader(LESSON.solutions, isolated=True, lesson=LESSON))
    assert got_h == want_h
    assert set(got) == set(want) == {"out0"}
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    assert t.faults == []
    if is_root():
        assert t.isolation == {"pidns": True, "netns": True, "ipcns": True, "rlimits": True, "uid": True,
                               "landlock": t.isolation["landlock"], "landlock_hides_kit": True, "seccomp": True}
        assert t.isolation["landlock"] >= 1
    else:
        assert t.isolation["rlimits"] is True


def test_identity_and_confinement_of_the_child(transport):
    t = transport({"hostile.py": """
        import os, torch
        def uid():
            return torch.tensor([os.getuid(), os.getpid()])
        def read_kit():
            return open(os.environ.get("KIT", "/") + "/grader/results/records.py").read()
        def write_outside():
            open("/tmp/kit-sandbox-escape", "w").write("x")
        def write_inside():
            open("scratch_file.txt", "w").write("x")
            return torch.tensor([len(open("scratch_file.txt").read())])
        def tcp():
            import socket
            socket.create_connection(("127.0.0.1", 9), timeout=1)
    """.replace('os.environ.get("KIT", "/")', repr(str(KIT)))})
    h, a = t.call(fn("uid"), {})
    if is_root():
        assert a["out0"].tolist() == [CONFIG.uid_base, 1]  # PID 1 of its own namespace
    # From a checkout in a folder others may not enter, the kit is not in the child's view at all.
    kit_hidden = is_root() and closed_ancestor(str(KIT)) is not None
    for name, kind in [("read_kit", "FileNotFoundError" if kit_hidden else "PermissionError"),
                       ("write_outside", "PermissionError"), ("tcp", "PermissionError")]:
        h, _ = t.call(fn(name), {})
        assert h["error"]["type"] == kind, (name, h["error"])
    assert not Path("/tmp/kit-sandbox-escape").exists()
    h, a = t.call(fn("write_inside"), {})
    assert h["error"] is None and a["out0"].tolist() == [1]
    assert t.faults == []  # plain exceptions are the student's errors, not sandbox faults


def test_timeout_kills_and_the_next_call_gets_a_fresh_child(transport):
    t = transport({"hostile.py": """
        import torch
        def spin():
            while True:
                pass
        def ok():
            return torch.ones(2)
    """})
    start = time.monotonic()
    h, a = t.call(fn("spin"), {})
    assert h["error"]["type"] == "Timeout" and "1.5 s" in h["error"]["message"] and a == {}
    assert time.monotonic() - start < CONFIG.call_timeout + 3
    h, a = t.call(fn("ok"), {})
    assert h["error"] is None and a["out0"].tolist() == [1.0, 1.0]
    assert t.fault_types == ["Timeout"]


@pytest.mark.parametrize("body, kind, reason", [
    ("os._exit(3)", "Crashed", "exit status 3"),
    ("np.lib.stride_tricks.as_strided(np.zeros(1), shape=(1 << 30,), strides=(1 << 24,)).sum()", "Crashed", "SIGSEGV"),
    ("torch.empty(2 ** 31)", "OutOfMemory", "ran out of memory"),
    ("bytearray(3 << 30)", "OutOfMemory", "ran out of memory"),
    ("while True: print('y' * (1 << 20), end='', flush=True)",
     "Crashed", "wrote more than 4 MB"),
])
def test_fatal_faults_are_stated_and_recovered_from(transport, body, kind, reason):
    t = transport({"hostile.py": f"""
        import os, numpy as np, torch
        def bad():
            {body}
        def ok():
            return torch.zeros(1)
    """})
    h, _ = t.call(fn("bad"), {})
    assert h["error"]["type"] == kind and reason in h["error"]["message"], h
    h, a = t.call(fn("ok"), {})
    assert h["error"] is None and a["out0"].tolist() == [0.0]
    assert len(t.faults) == 1 and reason in t.faults[0]


def test_garbage_on_the_socket_is_a_protocol_error(transport):
    t = transport({"hostile.py": """
        import os, stat, time
        def forge():
            for fd in range(3, 64):
                try:
                    if stat.S_ISSOCK(os.fstat(fd).st_mode):
                        os.write(fd, b"\\xff" * 64)
                except OSError:
                    pass
            time.sleep(30)
    """})
    h, _ = t.call(fn("forge"), {})
    # 0xffffffff read as a header length: over the cap, refused before anything is allocated.
    assert h["error"]["type"] == "OversizedReply" and "cap" in h["error"]["message"]


FORGER = """
    import json, os, stat, struct, torch

    def _socket():
        return next(fd for fd in range(3, 64) if _is_socket(fd))

    def _is_socket(fd):
        try:
            return stat.S_ISSOCK(os.fstat(fd).st_mode)
        except OSError:
            return False

    def _seq():
        # The number of the call being answered, from the executor's frame below: a forger that reads it can
        # pass its frame off as this call's answer.
        import sys
        frame = sys._getframe()
        while frame is not None and not (isinstance(frame.f_locals.get("header"), dict)
                                         and "seq" in frame.f_locals["header"]):
            frame = frame.f_back
        return None if frame is None else frame.f_locals["header"]["seq"]

    def forge(text, numbered=True):
        # A well-framed answer, written before the real one: the grader reads it as this call's.
        header = json.loads(text)
        if numbered:
            header["seq"] = _seq()
        body = json.dumps({"header": header, "arrays": []}).encode()
        os.write(_socket(), struct.pack(">I", len(body)) + body)
        return torch.ones(1)

    def claim(nbytes):
        # A frame that declares a big float64 array (and never sends it).
        spec = {"name": "a", "dtype": "float64", "shape": [nbytes // 8], "nbytes": nbytes // 8 * 8}
        body = json.dumps({"header": {"error": None}, "arrays": [spec]}).encode()
        os.write(_socket(), struct.pack(">I", len(body)) + body)
        return torch.ones(1)

    def big(n):
        return torch.zeros(n, dtype=torch.float64)

    def ok():
        return torch.ones(1)
"""


@pytest.mark.parametrize("forged, problem", [
    ({"error": "no record", "outputs": []}, "'error' is not an error record"),
    ({"error": None, "outputs": 5}, "'outputs' is not a list"),
    ({"error": None, "outputs": [{"kind": "tensor", "array": "missing"}]}, "output 0 names no array"),
    ({"error": None, "forbidden_call": 7}, "'forbidden_call' is not a list of names"),
    ({"error": None, "grads": {"x": 3}}, "'grads' does not name arrays"),
    ({"error": None, "inspect": {"parameters": []}}, "'inspect' is not an inspection record"),
])
def test_a_forged_answer_is_the_submissions_protocol_error_and_costs_only_its_call(transport, forged, problem):
    t = transport({"hostile.py": FORGER})
    h, _ = t.call(fn("forge", args=[json.dumps(forged)]), {})
    assert h["error"]["type"] == "ProtocolError" and problem in h["error"]["message"], h
    assert t.fault_types == ["ProtocolError"]
    h, a = t.call(fn("ok"), {})  # a fresh child: the stream the forger spoiled is gone
    assert h["error"] is None and a["out0"].tolist() == [1.0]


def test_a_stray_answer_cannot_shift_the_answers_of_later_calls(transport):
    # Red team s42r wrote one extra, well-formed answer to its socket: paired with calls by order alone, every later
    # answer of the child arrived one call late, in every part (27 of 100). Each answer now carries its call's number.
    t = transport({"hostile.py": FORGER, "other.py": "import torch\ndef ok():\n    return torch.full((1,), 7.0)\n"})
    h, _ = t.call(fn("forge", args=[json.dumps({"error": None, "outputs": []}), False]), {})
    assert h["error"]["type"] == "ProtocolError" and "another call" in h["error"]["message"], h
    h, a = t.call(fn("ok", module="other"), {})
    assert h["error"] is None and a["out0"].tolist() == [7.0]


def test_an_answer_over_the_call_cap_is_refused_before_it_is_read(transport):
    t = transport({"hostile.py": FORGER, "other.py": FORGER},
                  config=dataclasses.replace(CONFIG, reply_bytes=1 << 20, replies_bytes=8 << 20))
    h, _ = t.call(fn("claim", args=[200 << 20]), {})  # 200 MB declared: nothing is allocated for it
    assert h["error"]["type"] == "OversizedReply" and "over the 1 MB a call may send back" in h["error"]["message"]
    h, _ = t.call(fn("big", args=[(2 << 20) // 8]), {})  # a real 2 MB answer, from the executor
    assert h["error"]["type"] == "OversizedReply"
    # (two faults on first use condemn a module: a small answer comes from another one)
    h, a = t.call(fn("big", module="other", args=[1000]), {})  # a small one is fine
    assert h["error"] is None and a["out0"].shape == (1000,)
    assert t.fault_types == ["OversizedReply", "OversizedReply"]


def test_the_answers_of_one_submission_are_capped_in_all(transport):
    t = transport({"hostile.py": FORGER}, config=dataclasses.replace(CONFIG, reply_bytes=1 << 20, replies_bytes=3 << 20))
    answers = [t.call(fn("big", args=[(900 << 10) // 8]), {})[0] for _ in range(6)]  # 900 KB each
    assert [a["error"] is None for a in answers] == [True, True, True, False, False, False]
    assert "passed the 3 MB the grader keeps for one submission" in answers[3]["error"]["message"]
    assert "remaining calls were not run" in answers[4]["error"]["message"]
    assert t.fault_types == ["OversizedReply"]  # said once
    h, _ = t.call(fn("ok"), {})
    assert h["error"]["type"] == "OversizedReply"


def test_a_file_that_floods_the_answers_uses_up_its_own_share_not_another_files(transport):
    # Red team s42r: one file's answers ("debug" tensors) used up the whole submission's cap, and every call of the
    # part graded next was refused. Each file now has its share of the cap, so a flood costs only its own part.
    config = dataclasses.replace(CONFIG, reply_bytes=1 << 20, replies_bytes=4 << 20, file_replies_bytes=2 << 20)
    t = transport({"hostile.py": FORGER, "other.py": "import torch\ndef ok():\n    return torch.ones(1)\n"},
                  config=config)
    answers = [t.call(fn("big", args=[(900 << 10) // 8]), {})[0] for _ in range(4)]  # 900 KB each
    assert [a["error"] is None for a in answers] == [True, True, False, False]
    assert "the answers of hostile.py passed the 2 MB the grader keeps for one file" in answers[2]["error"]["message"]
    assert "remaining calls into hostile.py were not run" in answers[3]["error"]["message"]
    assert t.fault_types == ["OversizedReply"]  # said once
    for _ in range(3):  # the other file's calls are answered, as many as its own share allows
        h, a = t.call(fn("ok", module="other"), {})
        assert h["error"] is None and a["out0"].tolist() == [1.0]


def _forged_error(message, traceback=""):
    return json.dumps({"error": {"type": "ValueError", "message": message, "traceback": traceback, "stage": "call"},
                       "outputs": []})


def test_the_childs_words_in_an_answer_are_bounded_as_the_executor_bounds_them(transport):
    # Red team s42r: a process that writes its own frames sent a 6 KB error message, and all of it went into its
    # feedback. The executor never writes more than 600 characters of message and 1500 of traceback.
    t = transport({"hostile.py": FORGER})
    h, _ = t.call(fn("forge", args=[_forged_error("m" * 5000, "t" * 9000)]), {})
    assert h["error"]["message"] == "m" * 600 and h["error"]["traceback"] == "t" * 1500
    assert not t.quoted_grader_code


def test_the_machines_own_folders_in_an_error_are_named_not_shown(transport):
    # Red team s56r: a failing call raised an error holding the kit's folder (torch's file, the executor's), the
    # Python in use and the run's scratch folders (its own and another slot's, from the mounts), and all of it went
    # into the student's feedback. The student reads what each is instead, their own copy as their folder.
    hostile = ("import os, sys\n"
               "def leak():\n"
               "    here, frame, kit = os.getcwd(), sys._getframe(), ''\n"
               "    while frame is not None:\n"
               "        kit = frame.f_code.co_filename if '/grader/sandbox/' in frame.f_code.co_filename else kit\n"
               "        frame = frame.f_back\n"
               "    slots = os.path.dirname(here)\n"
               "    raise ValueError(' | '.join([here + '/x.py', sys.prefix, os.path.dirname(kit),\n"
               "                                 slots + '/slot9', os.path.basename(slots)]))\n")
    t = transport({"hostile.py": hostile})
    h, _ = t.call(fn("leak"), {})
    said = h["error"]["message"]
    assert said.split(" | ") == ["<your folder>/x.py", "<python>", "<grader>/grader/sandbox", "<scratch>/slot9",
                                 "<scratch>"], said
    assert str(t.scratch) not in said and sys.prefix not in said


def test_an_answer_that_quotes_the_lent_stand_ins_is_not_shown_and_is_told_to_the_staff(transport):
    # Red team s42r read the stand-ins' source off the child's socket (lent for a later call) and sent it back as
    # an error message: the grader's working code in the student's own feedback. Such words are replaced.
    from grader.sandbox import lending

    source = lending.of_lesson(LESSON).units["softmax"]
    t = transport({"hostile.py": FORGER})
    h, _ = t.call(fn("forge", args=[_forged_error("see: " + source)]), {})
    assert "softmax(x" not in h["error"]["message"] and "grader's own code" in h["error"]["message"]
    assert t.quoted_grader_code
    # A student's own line that is also one of the stand-in's (a traceback shows one line a frame) is shown.
    t = transport({"hostile.py": FORGER})
    line = "    return torch.softmax(x, dim=dim)"
    h, _ = t.call(fn("forge", args=[_forged_error("boom", f'  File "hostile.py", line 3, in f\n{line}')]), {})
    assert line in h["error"]["traceback"] and not t.quoted_grader_code


@pytest.mark.parametrize("how", ["an output's type name", "zero-width spaces", "spaced out", "a value tree"])
def test_a_quote_of_the_lent_stand_ins_is_caught_in_any_words_of_an_answer(transport, how):
    # Red team s43r: the same quote, sent as the type name of a non-tensor output, or with a zero-width space after
    # each line's first character, passed the check that read error records only, and exactly.
    from grader.sandbox import lending

    source = lending.of_lesson(LESSON).units["softmax"]
    spoiled = {"zero-width spaces": "\n".join(line[:1] + "\u200b" + line[1:] for line in source.splitlines()),
               "spaced out": source.replace(" ", "   ").replace("(", " ( ")}.get(how, source)
    if how == "an output's type name":
        answer = {"error": None, "outputs": [{"kind": "other", "type": spoiled}]}
    elif how == "a value tree":
        answer = {"error": None, "outputs": [], "value": ["see", spoiled]}
    else:
        answer = {"error": {"type": "ValueError", "message": spoiled, "traceback": "", "stage": "call"}, "outputs": []}
    t = transport({"hostile.py": FORGER})
    h, _ = t.call(fn("forge", args=[json.dumps(answer)]), {})
    assert "softmax(x" not in json.dumps(h) and "softmax(\\u200b" not in json.dumps(h), h
    assert t.quoted_grader_code


def test_a_quote_cut_into_one_line_an_answer_is_caught_once_it_adds_up(transport):
    from grader.sandbox import lending

    lines = [line for line in lending.of_lesson(LESSON).units["softmax"].splitlines() if "softmax" in line]
    t = transport({"hostile.py": FORGER})
    said = []
    for line in lines:
        said.append(t.call(fn("forge", args=[_forged_error(line)]), {})[0]["error"]["message"])
        t.call(fn("ok"), {})  # meets the forged call's own answer, left on the stream: the child goes
    assert lines[0] in said[0] and lines[1] not in said[1] and t.quoted_grader_code, said
    # The same line of the student's own in every traceback is no quote, however often it is shown.
    t = transport({"hostile.py": FORGER})
    for _ in range(3):
        t.call(fn("forge", args=[_forged_error("boom", f"  File \"hostile.py\", line 3, in f\n{lines[1]}")]), {})
        t.call(fn("ok"), {})
    assert not t.quoted_grader_code


def test_a_child_whose_channel_to_the_grader_is_swapped_answers_nothing_more(transport):
    # Red team s42r and s43r put a socket pair of their own where the child's channel was (dup2 over its number,
    # or close it and open pairs until one gets the number), to rewrite answers on their way out. The serve loop
    # checks its channel is still the one it was given before it answers: the swap ends the child.
    t = transport({"hostile.py": FORGER + """
    import socket as _s
    def swap():
        fd = _socket()
        mine, theirs = _s.socketpair()
        os.dup2(mine.fileno(), fd)
        _keep.extend([mine, theirs])
        return torch.ones(1)
    _keep = []
    """, "other.py": "import torch\ndef ok():\n    return torch.full((1,), 7.0)\n"})
    h, _ = t.call(fn("swap"), {})
    assert h["error"]["type"] == "Crashed" and "channel to the grader" in h["error"]["message"], h
    assert t.channel_replaced
    h, a = t.call(fn("ok", module="other"), {})  # a fresh child
    assert h["error"] is None and a["out0"].tolist() == [7.0]


def test_a_module_that_keeps_killing_its_child_at_import_fails_fast(transport):
    t = transport({"hostile.py": "import os\nos._exit(9)\ndef f():\n    pass\n",
                   "fine.py": "import torch\ndef f():\n    return torch.ones(1)\n"})
    for _ in range(2):
        h, _ = t.call(fn("f"), {})
        assert h["error"]["type"] == "Crashed" and "exit status 9" in h["error"]["message"]
    start = time.monotonic()
    h, _ = t.call(fn("f"), {})
    assert time.monotonic() - start < 0.05  # no new child was started
    assert "not retried" in h["error"]["message"]
    assert len(t.faults) == 2
    h, a = t.call(fn("f", module="fine"), {})  # other modules still work
    assert h["error"] is None and a["out0"].tolist() == [1.0]


def test_a_modules_time_budget_stops_its_slow_calls_and_no_other_modules(transport):
    """Found by a held-out submission whose attention looped on every masked call: twelve time-outs used up a
    budget the whole submission shared, and the parts graded over stand-ins (never calling the loop) lost
    every point. The budget is each file's: a loop costs its own file's calls only."""
    t = transport({"hostile.py": "import time, torch\ndef quick():\n    return torch.ones(1)\n"
                                 "def nap():\n    time.sleep(5)\n",
                   "fine.py": "import torch\ndef f():\n    return torch.ones(1)\n"},
                  config=dataclasses.replace(CONFIG, call_timeout=0.5, module_budget=1.2))
    messages: list[str] = []
    for _ in range(4):  # a quick call first in each child: the time-outs are not the import's (no condemning)
        messages += [(t.call(fn(name), {})[0]["error"] or {}).get("message", "") for name in ("quick", "nap")]
    assert "no answer within 0.5 s" in messages[1] and "repeatedly" not in " ".join(messages)
    h, _ = t.call(fn("quick"), {})  # its time-outs have used up the 1.2 s budget of hostile.py
    assert "time budget for hostile.py" in h["error"]["message"]
    assert t.fault_types[-1] == "Budget" and t.fault_types.count("Budget") == 1  # the status says so
    for _ in range(2):  # another file's calls run as usual
        h, a = t.call(fn("f", module="fine"), {})
        assert h["error"] is None and a["out0"].tolist() == [1.0]


# -- batches: calls sent ahead of the answers (SandboxTransport.call_many) ------------------------
BATCH_MODULE = {"hostile.py": """
    import os, time, torch
    def ok(x):
        return x * 2
    def spin(x):
        while True:
            pass
    def die(x):
        os._exit(4)
    def nap(x):
        time.sleep(5)
"""}


def batch_call(name, x, module="hostile"):
    return {"op": "function", "module": module, "name": name, "args": [{"array": "x"}]}, {"x": x}


def test_a_batch_is_answered_in_order_as_single_calls_would_be(transport):
    t = transport(BATCH_MODULE)
    # ~40 KB per call: only a few fit in flight at once, so sending and reading interleave.
    xs = [np.full((100, 100), i, dtype=np.float32) for i in range(12)]
    answers = t.call_many([batch_call("ok", x) for x in xs])
    assert [a["out0"][0, 0] for _, a in answers] == [2.0 * i for i in range(12)]
    assert all(h["error"] is None for h, _ in answers) and t.faults == []


def test_a_large_answer_ahead_of_many_small_calls_never_deadlocks_the_pipeline(transport):
    # The child writes a 1.6 MB answer (far more than a socket buffer) while the grader is still sending the
    # calls behind it. Those are tiny, but the kernel charges each queued message for its buffers too, not only
    # its bytes: ~300 of them filled the grader's send buffer under a 64 KB cap of bytes in flight. Each side then
    # waited for the other to read, the calls timed out, and a module that answers correctly was condemned.
    t = transport({"hostile.py": """
        import torch
        def big(x):
            return torch.zeros(400_000)
        def ok(x):
            return x * 2
    """})
    tiny = np.ones(1, dtype=np.float32)
    calls = [batch_call("big", tiny)] + [batch_call("ok", tiny)] * 300
    answers = t.call_many(calls)
    assert t.faults == [] and all(h["error"] is None for h, _ in answers)  # no call waited out its time limit
    assert answers[0][1]["out0"].shape == (400_000,) and all(a["out0"].tolist() == [2.0] for _, a in answers[1:])


@pytest.mark.parametrize("size", [20, 300, 2_000, 5_000, 17_000, 70_000])
def test_queued_cost_is_at_least_what_this_kernel_charges_a_queued_message(size):
    # The transport's bound on calls sent ahead rests on this: messages queue (unread) until the kernel refuses
    # one, and the buffer they filled, shared among them, is never more than queued_cost counts for them.
    from grader.sandbox.transport import queued_cost

    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with mine, theirs:
        buffer = mine.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        queued = 0
        with contextlib.suppress(BlockingIOError):
            while mine.send(b"x" * size, socket.MSG_DONTWAIT) == size:  # until one is refused or cut short
                queued += 1
        assert queued > 0 and buffer / queued <= queued_cost(size)


def _classifier_call(d: int, seed: int):
    """A call of the toy's Classifier (graded over the grader's softmax, lent with the first call that needs it),
    its weights bound by rules that also go to a child once."""
    rng = np.random.default_rng(seed)
    params = [{"name": name, "bind": {"names": [name], "contract": f"Classifier needs {name}"}, "array": f"p{i}"}
              for i, name in enumerate(("linear.bias", "linear.weight"))]
    header = {"op": "module", "module": "classifier", "cls": "Classifier", "init": [d, d], "init_kwargs": {},
              "dtype": "float32", "params": params, "args": [{"array": "x"}]}
    arrays = {"x": rng.standard_normal((d, d)).astype(np.float32), "p0": rng.standard_normal(d).astype(np.float32),
              "p1": rng.standard_normal((d, d)).astype(np.float32)}
    return header, arrays


def test_a_call_held_back_by_a_full_pipeline_lends_its_stand_ins_and_rules_when_it_goes(transport):
    t = transport({}, reference=True)
    # ~40 KB calls, then classifier calls of ~80 KB: each of those waits until nothing is in flight, and is
    # the first to need the softmax stand-in and the binding rules, which must go with it when it goes.
    softmax = {"op": "function", "module": "activations", "name": "softmax", "args": [{"array": "x"}]}
    calls = [(softmax, {"x": np.full((100, 100), i, dtype=np.float32)}) for i in range(3)]
    calls += [_classifier_call(100, seed) for seed in range(3)]
    answers = t.call_many(calls)
    loader = ModuleLoader(LESSON.solutions, isolated=True, lesson=LESSON)
    for (header, arrays), (got_h, got) in zip(calls, answers):
        want_h, want = execute(header, arrays, loader=loader)
        assert got_h == want_h and want_h["error"] is None
        np.testing.assert_array_equal(got["out0"], want["out0"])
    assert t.faults == []
    assert t._child.rules_sent == 2  # each rule went to the child once


@pytest.mark.parametrize("bad, kind", [("spin", "Timeout"), ("die", "Crashed")])
def test_a_fault_in_a_batch_costs_only_the_call_that_met_it(transport, bad, kind):
    t = transport(BATCH_MODULE)
    x = np.ones(3, dtype=np.float32)
    answers = t.call_many([batch_call("ok", x), batch_call(bad, x), batch_call("ok", x), batch_call("ok", x)])
    kinds = [h["error"]["type"] if h["error"] else None for h, _ in answers]
    assert kinds == [None, kind, None, None]
    assert [a["out0"].tolist() for _, a in answers if a] == [[2.0] * 3] * 3
    assert t.fault_types == [kind]  # the calls after it were answered by a fresh child, not failed


def test_a_module_that_kills_its_child_at_import_is_condemned_within_a_batch(transport):
    t = transport({"hostile.py": "import os\nos._exit(9)\ndef f(x):\n    pass\n",
                   "fine.py": "def f(x):\n    return x + 1\n"})
    x = np.zeros(2, dtype=np.float32)
    answers = t.call_many([batch_call("f", x)] * 3 + [batch_call("f", x, module="fine")])
    messages = [h["error"]["message"] if h["error"] else None for h, _ in answers]
    assert all("exit status 9" in m for m in messages[:3]) and "not retried" in messages[2]
    assert messages[3] is None and answers[3][1]["out0"].tolist() == [1.0, 1.0]
    assert len(t.faults) == 2


def test_a_modules_time_budget_holds_for_a_batch_and_spares_the_other_modules_calls(transport):
    t = transport({**BATCH_MODULE, "other.py": "def ok(x):\n    return x + 1\n"},
                  config=dataclasses.replace(CONFIG, call_timeout=0.5, module_budget=1.2))
    x = np.ones(1, dtype=np.float32)
    start = time.monotonic()
    # A quick call first in each child: the time-outs are not the import's (no condemning).
    answers = t.call_many([batch_call("ok", x), batch_call("nap", x)] * 4 + [batch_call("ok", x, module="other")])
    assert time.monotonic() - start < 3 * 0.5 + 3
    kinds = [h["error"]["type"] if h["error"] else None for h, _ in answers]
    assert kinds[:2] == [None, "Timeout"] and kinds[-1] is None
    assert "time budget for hostile.py" in answers[-2][0]["error"]["message"]  # its time-outs used it up
    assert answers[-1][1]["out0"].tolist() == [2.0]


def test_temporary_files_go_to_the_childs_own_folder(transport):
    # The sandbox points TMPDIR at the child's copy, but tempfile caches its folder once asked: the zygote had asked
    # before the fork, so a held-out tokenizer caching pre-tokens in tempfile.gettempdir() was refused /tmp and lost
    # every training point, while its visible tests passed.
    t = transport({"hostile.py": """
        import os, tempfile, torch
        def f():
            with open(os.path.join(tempfile.gettempdir(), "cache.bin"), "wb") as out:
                out.write(b"kept")
            with tempfile.NamedTemporaryFile() as scratch:
                scratch.write(b"x")
            return torch.ones(1) * len(tempfile.gettempdir())
    """})
    header, arrays = t.call(fn("f"), {})
    assert header["error"] is None, header["error"]


@pytest.mark.parametrize("start", ["multiprocessing.Pool(2)", "os.fork()", "subprocess.run(['true'])"])
def test_starting_a_process_is_refused_in_the_contracts_words(transport, start):
    # The sandbox never let student code start a process; a held-out student's Pool got only "Permission denied".
    t = transport({"hostile.py": f"""
        import multiprocessing, os, subprocess, torch
        def f():
            {start}
            return torch.ones(1)
    """})
    error = t.call(fn("f"), {})[0]["error"]
    assert error is not None and "runs your code in one process" in error["message"], error


def test_output_is_captured_and_bounded(transport):
    t = transport({"hostile.py": """
        import torch
        print("hello from the student")
        def f():
            print("inside f")
            return torch.ones(1)
    """})
    assert t.call(fn("f"), {})[0]["error"] is None
    assert t.output_tail() == "hello from the student\ninside f\n"


def test_close_leaves_no_process(transport, zygote):
    t = transport({"hostile.py": """
        import threading, time, torch
        def threads():
            for _ in range(4):
                threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
            return torch.ones(1)
    """})
    assert t.call(fn("threads"), {})[0]["error"] is None
    child = t._child
    assert os.path.exists(f"/proc/{child.pid}")
    t.close()
    assert gone(child.pid)
    assert settled(lambda: descendants(zygote.process.pid)) == []


def test_no_network_even_to_loopback(transport):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    t = transport({"hostile.py": f"""
        import socket
        def call_home():
            socket.create_connection(("127.0.0.1", {port}), timeout=1).sendall(b"answers?")
    """})
    h, _ = t.call(fn("call_home"), {})
    assert h["error"]["type"] == "PermissionError"
    with pytest.raises(socket.timeout):
        listener.accept()
    listener.close()


def test_a_setup_failure_is_reported_with_its_cause(zygote):
    t = SandboxTransport(zygote=zygote, slot=0, scratch=Path("/nonexistent/kit"), config=CONFIG)
    with t:
        h, _ = t.call(fn("f"), {})
    assert h["error"]["type"] == "Crashed" and "could not set up" in h["error"]["message"]
    assert "FileNotFoundError" in h["error"]["message"]


def test_a_dead_zygote_is_an_engine_fault_not_the_submissions(tmp_path):
    z = Zygote(slots=1, config=CONFIG, lesson=LESSON)
    z.wait_ready()
    z.process.kill()
    z.process.wait()
    t = SandboxTransport(zygote=z, slot=0, scratch=tmp_path, config=CONFIG)
    with pytest.raises(SandboxUnavailable, match="zygote"):
        t.call(fn("f"), {})
    assert t.faults == []
    t.close()
    z.close()


def test_without_root_layers_the_child_still_grades_and_says_which_layers_were_off():
    # A laptop: no namespaces and no uid drop; Landlock, seccomp and rlimits work unprivileged.
    laptop = dataclasses.replace(CONFIG, layers=("rlimits", "landlock", "seccomp"))
    work = Path(tempfile.mkdtemp(prefix="kit-test-laptop-"))
    scratch = make_submission(work / "s", {}, reference=True)
    with Zygote(slots=1, config=laptop, lesson=LESSON) as z, SandboxTransport(zygote=z, slot=0, scratch=scratch) as t:
        h, a = t.call({"op": "function", "module": "activations", "name": "softmax", "args": [{"array": "x"}]},
                      {"x": np.zeros((2, 2), np.float32)})
        assert h["error"] is None and a["out0"].tolist() == [[0.5, 0.5], [0.5, 0.5]]
        assert t.isolation["pidns"] is False and t.isolation["netns"] is False and t.isolation["uid"] is False
        assert t.isolation["rlimits"] is True and t.isolation["seccomp"] is True
    shutil.rmtree(work)


def test_a_child_that_stops_reading_cannot_block_a_large_call(transport):
    # The student's code replaces the child's receive loop by a sleep, then the grader sends 16 MB.
    t = transport({"hostile.py": """
        import time
        import __main__  # the sandbox's start command (the kit's packages cannot be imported)
        def stop_reading():
            __main__.zygote.protocol.recv_message = lambda *a, **k: time.sleep(600)
    """})
    assert t.call(fn("stop_reading"), {})[0]["error"] is None
    big = {"x": np.zeros((4, 1024, 1024), dtype=np.float32)}  # far more than a socket buffer holds
    start = time.monotonic()
    h, _ = t.call(fn("stop_reading") | {"args": [{"array": "x"}]}, big)
    assert h["error"]["type"] == "Timeout"
    assert time.monotonic() - start < 2 * CONFIG.call_timeout + 2


def test_seeding_is_unchanged_when_absent_device_stacks_are_skipped():
    import subprocess
    code = ("import torch, traceback\n"
            "from grader.sandbox.startup import skip_absent_device_seed_stacks\n"
            "torch.manual_seed(3); a = torch.rand(3)\n"
            "skip_absent_device_seed_stacks(torch)\n"
            "torch.manual_seed(3); b = torch.rand(3)\n"
            "print(torch.equal(a, b), torch.cuda.is_available() or torch.cuda.traceback is not traceback)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=KIT, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "True"], out.stderr


def test_seccomp_refuses_processes_exec_inet_sockets_and_signals_but_not_threads(transport):
    t = transport({"hostile.py": """
        import os, socket, threading
        def probe():
            out = []
            for name, attempt in [("fork", os.fork), ("inet", lambda: socket.socket(socket.AF_INET)),
                                  ("kill", lambda: os.kill(2, 9)), ("exec", lambda: os.execv("/bin/true", ["true"]))]:
                try:
                    attempt()
                    out.append(name + " allowed")
                except OSError as e:
                    out.append(f"{name} errno {e.errno}")
            t = threading.Thread(target=out.append, args=("thread ran",))
            t.start()
            t.join()
            raise RuntimeError("; ".join(out))
    """})
    h, _ = t.call(fn("probe"), {})
    if t.isolation.get("seccomp"):
        assert h["error"]["message"] == "fork errno 1; inet errno 1; kill errno 1; exec errno 1; thread ran"
    else:
        pytest.skip("seccomp is not available here")


def test_without_pidfds_the_child_is_still_killed_by_pid(transport, monkeypatch):
    receive = socket.recv_fds

    def without_pidfd(sock, bufsize, maxfds, flags=0):  # an old kernel: the zygote has no pidfd to pass
        msg, fds, msg_flags, address = receive(sock, bufsize, maxfds, flags)
        for fd in fds:
            os.close(fd)
        return msg, [], msg_flags, address

    monkeypatch.setattr(socket, "recv_fds", without_pidfd)
    t = transport({"hostile.py": "import torch\ndef ok():\n    return torch.ones(1)\n"
                                 "def spin():\n    while True:\n        pass\n"})
    assert t.call(fn("ok"), {})[0]["error"] is None
    pid = t._child.pid
    assert t._child.pidfd == -1 and t._child.starts[pid] is not None
    h, _ = t.call(fn("spin"), {})
    assert h["error"]["type"] == "Timeout"
    assert gone(pid)


def test_an_inspect_and_the_forward_after_it_are_answered_by_one_child_as_built(transport):
    # The table is cached across instances: the inspect builds it as the forward does (on CPU), so the child that
    # answered the inspect answers the forward with the same table.
    t = transport({"encoding.py": '''
        import functools, torch, torch.nn as nn
        @functools.lru_cache(maxsize=None)
        def table(d):
            return torch.empty(4, d).fill_(0.5)
        class Encoding(nn.Module):
            def __init__(self, d_model, max_len=5000):
                super().__init__()
                self.register_buffer("pe", table(d_model))
            def forward(self, x):
                return x + self.pe[: x.size(1)]
        '''}, reference=True)
    spawns, spawn = [], t._spawn
    t._spawn = lambda: spawns.append(1) or spawn()
    inspect = {"op": "inspect", "module": "encoding", "cls": "Encoding", "init": [8], "attrs": []}
    h, _ = t.call(inspect, {})
    assert h["error"] is None and h["inspect"]["buffers"] == {"pe": [4, 8]}
    forward = {"op": "module", "module": "encoding", "cls": "Encoding", "init": [8], "dtype": "float32",
               "params": [], "args": [{"array": "x"}]}
    h, a = t.call(forward, {"x": np.zeros((1, 3, 8), np.float32)})
    assert h["error"] is None
    np.testing.assert_array_equal(a["out0"], np.full((1, 3, 8), 0.5, np.float32))
    h, _ = t.call(inspect, {})
    assert h["inspect"]["buffers"] == {"pe": [4, 8]} and len(spawns) == 1  # one child answered all three
    assert t.faults == [] and t.fault_types == []


@pytest.mark.parametrize("ref", [*lesson_names(), str(TOY)], ids=lambda ref: Path(ref).name)
def test_the_zygote_warm_up_loads_nothing_a_child_would_not_use(ref):
    # Every module the zygote holds is copied (page tables) into each child and torn down after it.
    # backward(gradient) on a tensor, for one, pulls in torch.fx's symbolic shapes and sympy (~34 MB).
    probe = ("import sys, torch\n"
             "from grader.running import executor as execute\n"
             "from grader.sandbox import startup\n"
             "from grader.lesson import LessonSpec, load_lesson\n"
             f"spec = LessonSpec.from_json(load_lesson({ref!r}).spec().to_json())  # as the zygote gets it\n"
             "before = set(sys.modules)\n"
             "startup.warm_up(torch)\n"
             "startup.warm_up_executor(execute, lesson=spec)\n"
             "print(sorted(m for m in set(sys.modules) - before if not m.startswith(('zygote_warmup', 'grader'))))\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=KIT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _anon_huge_kb(pid: int) -> int:
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return int(next(line for line in rollup.splitlines() if line.startswith("AnonHugePages:")).split()[1])


def test_the_zygote_pays_for_huge_pages_only_once_its_forks_have_cost_as_much(tmp_path):
    # Huge pages make each later fork cheaper (grader/sandbox/zygote.py, _huge_pages) but cost ~1 s of copying:
    # a zygote that grades a few submissions never pays it; one that forked `huge_pages_after` children does.
    enabled = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    release = tuple(int(x) for x in os.uname().release.split(".")[:2] if x.isdigit())
    if not enabled.exists() or "[madvise]" not in enabled.read_text() or release < (6, 1):
        pytest.skip("transparent huge pages only where asked for (madvise) and MADV_COLLAPSE (Linux 6.1) needed here")
    config = dataclasses.replace(CONFIG, huge_pages_after=2)
    work = Path(tempfile.mkdtemp(prefix="kit-test-huge-"))
    os.chmod(work, 0o711)
    softmax = {"op": "function", "module": "activations", "name": "softmax", "args": [{"array": "x"}]}
    try:
        with Zygote(slots=1, config=config, lesson=LESSON) as z:
            z.wait_ready()

            def one_child(i: int) -> None:
                scratch = make_submission(work / f"s{i}", {}, reference=True)
                prepare_scratch(scratch, slot_uid(config, 0))
                with SandboxTransport(zygote=z, slot=0, scratch=scratch, config=config) as t:
                    assert t.call(softmax, {"x": np.zeros((2, 2), np.float32)})[0]["error"] is None

            one_child(0)
            time.sleep(2)  # idle: where the zygote would have collapsed its memory (~0.5 s of a quiet machine's)
            assert _anon_huge_kb(z.process.pid) < 2 * 1024, "huge pages made for a zygote that forked one child"
            one_child(1)
            deadline = time.monotonic() + 60
            while _anon_huge_kb(z.process.pid) < 32 * 1024 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _anon_huge_kb(z.process.pid) >= 32 * 1024, "no huge pages after the zygote's second fork"
    finally:
        shutil.rmtree(work)


def test_a_zygote_slower_than_its_start_bound_says_so_and_a_slow_start_is_not_a_broken_one():
    # No zygote imports torch in a millisecond: the bound is what ends the wait, with what to run next.
    config = dataclasses.replace(CONFIG, start_timeout=0.001)
    with Zygote(slots=1, config=config, lesson=LESSON) as z:
        with pytest.raises(SandboxUnavailable, match=r"did not start .*python -m grader.sandbox --check"):
            z.wait_ready()
        # The zygote was only slow: waited for with the default bound (minutes, for a busy machine), it starts.
        assert SandboxConfig().start_timeout >= 300
        z.wait_ready(timeout=SandboxConfig().start_timeout)
        assert not z.view["refused"]


def test_compiled_code_is_not_in_the_childs_copy_whatever_the_submission_does_to_its_imports(transport, tmp_path):
    # The child's import path reads .py source only (executor._source_only), but that is a hook in sys.path_hooks,
    # which the submission's own code can take out again (red team s38r: two lines, then its .pyc imported). What
    # the scan cannot read (.pyc, .so) is not in the child's copy of the submission at all.
    import py_compile

    source = tmp_path / "_hidden.py"
    source.write_text("def answer():\n    return 42\n")
    t = transport({"hostile.py": """
        import sys

        sys.path_hooks[:] = [h for h in sys.path_hooks if not hasattr(h, "source_only_root")]
        sys.path_importer_cache.clear()


        def hidden():
            from _hidden import answer
            return answer()

        def present():
            import os
            return sorted(f for f in os.listdir(".") if not f.startswith("."))
        """})
    folder = Path(t.scratch)
    py_compile.compile(str(source), cfile=str(folder / "_hidden.pyc"))
    (folder / "_native.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    prepare_scratch(folder, slot_uid(CONFIG, 0))
    h, _ = t.call(fn("hidden"), {})
    assert h["error"] is not None and h["error"]["type"] in ("ModuleNotFoundError", "ImportError"), h
    h, _ = t.call({"op": "call", "module": "hostile", "name": "present", "args": []}, {})
    assert h["error"] is None, h["error"]
    assert "hostile.py" in h["value"] and not any(f.endswith((".pyc", ".so")) for f in h["value"]), h["value"]


# Student code both archive tests run: import `name` with `entry` first on sys.path, leaving sys.path and sys.modules
# as they were; what the module answered, or None where the import failed.
TRY_IMPORT = """
def try_import(entry, name):
    sys.path.insert(0, entry)
    try:
        return importlib.import_module(name).answer()
    except ImportError:
        return None
    finally:
        sys.path.remove(entry)
        sys.modules.pop(name, None)
"""


def test_the_submissions_folder_by_another_name_still_gives_source_only(transport, tmp_path):
    # The source-only hook compared sys.path entries with the folder as text, and `//folder` (POSIX keeps two leading
    # slashes; Linux reads them as one) or /proc/self/cwd is the same folder under another name: red team s40r put
    # "//<folder>/lib.zip" on sys.path, and zipimport ran a classmate's code from a zip no scan or similarity reads.
    # A .pyc written at run time (none is in the copy) came in by `//<folder>` the same way.
    import io
    import py_compile
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("_zipped.py", "def answer():\n    return 42\n")
    source = tmp_path / "_written.py"
    source.write_text("def answer():\n    return 43\n")
    py_compile.compile(str(source), cfile=str(tmp_path / "_written.pyc"))
    t = transport({"hostile.py": f"""
        import importlib
        import os
        import sys

        HERE = os.path.dirname(os.path.abspath(__file__))
        PYC = {(tmp_path / "_written.pyc").read_bytes()!r}
        {textwrap.indent(TRY_IMPORT, " " * 8).strip()}


        def tried():
            with open(os.path.join(HERE, "_written.pyc"), "wb") as f:
                f.write(PYC)
            found = []
            for entry, name in (("/" + HERE + "/lib.zip", "_zipped"), ("/proc/self/cwd/lib.zip", "_zipped"),
                                (HERE + "/./lib.zip", "_zipped"), ("/" + HERE, "_written")):
                if (answer := try_import(entry, name)) is not None:
                    found.append(f"{{entry}}: {{answer}}")
            try:  # a zip in memory: no folder at all
                fd = os.memfd_create("lib")
                with open(os.path.join(HERE, "lib.zip"), "rb") as f:
                    os.write(fd, f.read())
                entry = f"/proc/self/fd/{{fd}}"
                sys.path.insert(0, entry)
                try:
                    found.append(f"memfd: {{importlib.import_module('_zipped').answer()}}")
                finally:
                    sys.path.remove(entry)
                    sys.modules.pop("_zipped", None)
            except (ImportError, OSError):
                pass
            return found
        """})
    (Path(t.scratch) / "lib.zip").write_bytes(buf.getvalue())
    prepare_scratch(Path(t.scratch), slot_uid(CONFIG, 0))
    h, _ = t.call({"op": "call", "module": "hostile", "name": "tried", "args": []}, {})
    assert h["error"] is None, h["error"]
    assert h["value"] == [], h["value"]


def test_a_path_inside_an_archive_outside_the_folder_holds_no_module(transport):
    # In the child a sys.path entry that is a file holds no module (s40r's zip in a memfd, /proc/self/fd/N): red team
    # s41r named a place inside the archive instead, "/proc/self/fd/N/" or "/proc/self/fd/N/pkg", which is no file
    # (os.path.exists says False), so the hook let zipimport take it, and the zip's code ran unread by any scan.
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("_zipped.py", "def answer():\n    return 42\n")
        z.writestr("pkg/_zipped.py", "def answer():\n    return 44\n")
    t = transport({"hostile.py": f"""
        import importlib
        import os
        import sys

        ZIP = {buf.getvalue()!r}
        {textwrap.indent(TRY_IMPORT, " " * 8).strip()}


        def tried():
            found = []
            fd = os.memfd_create("lib")
            os.write(fd, ZIP)
            for entry in (f"/proc/self/fd/{{fd}}/", f"/proc/self/fd/{{fd}}/pkg", f"/proc/self/fd/{{fd}}/pkg/",
                          f"/proc/self/fd/{{fd}}//pkg", f"/dev/fd/{{fd}}/pkg"):
                if (answer := try_import(entry, "_zipped")) is not None:
                    found.append(f"{{entry}}: {{answer}}")
            return found
        """})
    h, _ = t.call({"op": "call", "module": "hostile", "name": "tried", "args": []}, {})
    assert h["error"] is None, h["error"]
    assert h["value"] == [], h["value"]


def test_a_module_written_or_rewritten_while_graded_is_no_module(transport, tmp_path):
    # The scan and similarity read the files handed in. Red team s41r ran other code under a name handed in, or under
    # a new one: (1) a .pyc written at run time into __pycache__ for a handed-in helper, stamped with the helper's
    # mtime and size (SourceFileLoader takes such a cache instead of the source); (2) a .py written beside the files
    # (a classmate's, kept as base64) and imported inside `try: ... except ImportError`, which the scan lets pass as
    # an optional library; (3) a handed-in helper rewritten before its first import.
    import py_compile

    source = tmp_path / "_other.py"
    source.write_text("def answer():\n    return 43\n")
    py_compile.compile(str(source), cfile=str(tmp_path / "_other.pyc"))
    t = transport({
        "decoy.py": "def answer():\n    return 1\n",
        "decoy2.py": "def answer():\n    return 2\n",
        "hostile.py": f"""
        import importlib
        import os
        import struct
        import sys

        HERE = os.path.dirname(os.path.abspath(__file__))
        PYC = {(tmp_path / "_other.pyc").read_bytes()!r}
        TAG = {sys.implementation.cache_tag!r}


        def tried():
            found = []
            st = os.stat(os.path.join(HERE, "decoy.py"))
            os.makedirs(os.path.join(HERE, "__pycache__"), exist_ok=True)
            with open(os.path.join(HERE, "__pycache__", f"decoy.{{TAG}}.pyc"), "wb") as f:
                f.write(PYC[:8] + struct.pack("<II", int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF) + PYC[16:])
            with open(os.path.join(HERE, "_fresh.py"), "w") as f:
                f.write("def answer():\\n    return 44\\n")
            with open(os.path.join(HERE, "decoy2.py"), "w") as f:
                f.write("def answer():\\n    return 45\\n")
            importlib.invalidate_caches()
            for name in ("decoy", "_fresh", "decoy2"):
                try:
                    found.append(f"{{name}}: {{importlib.import_module(name).answer()}}")
                except ImportError:
                    pass
            return found
        """})
    h, _ = t.call({"op": "call", "module": "hostile", "name": "tried", "args": []}, {})
    assert h["error"] is None, h["error"]
    assert h["value"] == ["decoy: 1"], h["value"]  # the helper's source as handed in; nothing else imports


@pytest.fixture
def on_a_tmpfs(zygote):
    """Like `transport`, with the submission on a tmpfs of its own, as a root grader's slots are (grade.py)."""
    from grader.sandbox.confinement import mount_quota, unmount_quota

    work = Path(tempfile.mkdtemp(prefix="kit-test-tmpfs-"))
    os.chmod(work, 0o711)
    mounted = mount_quota(work, CONFIG)
    opened = []

    def make(files):
        scratch = make_submission(work / "sub", files, reference=False)
        prepare_scratch(scratch, slot_uid(CONFIG, 0))
        opened.append(SandboxTransport(zygote=zygote, slot=0, scratch=scratch, config=CONFIG, quota=mounted))
        return opened[-1]

    yield make, mounted
    for t in opened:
        t.close()
    if mounted:
        unmount_quota(work)
    shutil.rmtree(work)


def test_a_file_written_or_changed_while_graded_is_never_compiled_by_its_name(on_a_tmpfs):
    # Red team s44r ran code the scan never read: positional.py wrote it to _build/*.py at run time and had the release's
    # own tools/deliverables.py load it by path (spec_from_file_location), past the handed-in-only importer. Every
    # route that compiles a file by its name in the child's folder is held to the files handed in, as handed in.
    transport, mounted = on_a_tmpfs
    assert mounted or not is_root(), "a root grader mounts each slot's tmpfs: this test needs it too"
    t = transport({"helper.py": "def answer():\n    return 1\n", "notes.txt": "def answer():\n    return 2\n",
                   "hostile.py": """
        import importlib.machinery
        import importlib.util
        import os
        import runpy

        HERE = os.path.dirname(os.path.abspath(__file__))


        def by_path(path):
            loader = importlib.machinery.SourceFileLoader("loaded", path)  # any suffix, as tools/deliverables.py does
            spec = importlib.util.spec_from_file_location("loaded", path, loader=loader)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.answer()


        def memfd():
            fd = os.memfd_create("code")
            os.write(fd, b"def answer():\\n    return 4\\n")
            return f"/proc/self/fd/{fd}"


        def rewritten():
            path = os.path.join(HERE, "helper.py")
            st = os.stat(path)
            with open(path, "w") as f:
                f.write("def answer():\\n    return 5\\n")
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # its times put back (red team s45r)
            return by_path(path)


        def tried():
            found = []
            os.makedirs(os.path.join(HERE, "_build"), exist_ok=True)
            with open(os.path.join(HERE, "_build", "fresh.py"), "w") as f:
                f.write("def answer():\\n    return 3\\n")
            attempts = {
                "handed in, by path": lambda: by_path(os.path.join(HERE, "helper.py")),
                "written, by path": lambda: by_path(os.path.join(HERE, "_build", "fresh.py")),
                "written, by a relative path": lambda: by_path("_build/fresh.py"),
                "written, through /proc/self/cwd": lambda: by_path("/proc/self/cwd/_build/fresh.py"),
                "a data file, by path": lambda: by_path(os.path.join(HERE, "notes.txt")),
                "written, by runpy": lambda: runpy.run_path(os.path.join(HERE, "_build", "fresh.py"))["answer"](),
                "written, compiled by name": lambda: eval(compile("3", os.path.join(HERE, "_build", "fresh.py"), "eval")),
                "a data file, under a handed-in name": lambda: eval(compile("3", os.path.join(HERE, "helper.py"), "eval")),
                "a memfd, by its /proc name": lambda: by_path(memfd()),
                "a handed-in file rewritten": rewritten,
            }
            for name, attempt in attempts.items():
                try:
                    found.append(f"{name}: {attempt()}")
                except PermissionError as exc:
                    found.append(f"{name}: refused" if "handed in" in str(exc) else f"{name}: {exc}")
                except ImportError:
                    found.append(f"{name}: no module")  # runpy takes the path for a folder the child's importer owns
            return found
        """})
    h, _ = t.call({"op": "call", "module": "hostile", "name": "tried", "args": []}, {})
    assert h["error"] is None, h["error"]
    assert h["value"] == ["handed in, by path: 1", "written, by path: refused", "written, by a relative path: refused",
                          "written, through /proc/self/cwd: refused", "a data file, by path: refused",
                          "written, by runpy: no module", "written, compiled by name: refused",
                          "a data file, under a handed-in name: refused", "a memfd, by its /proc name: refused",
                          "a handed-in file rewritten: refused"], h["value"]


def test_the_kits_own_files_handed_back_are_never_run_in_the_child(tmp_path):
    # The release's tools/ and tests/ come back in a repository handed in; the scan reads none of them, so the
    # child runs none of them (forbidden._runnable): a shipped version is known by its digest, whatever its age.
    import hashlib

    from grader.running.forbidden import _runnable

    (tmp_path / "tools").mkdir()
    shipped = b"def load_checks(path):\n    pass\n"
    (tmp_path / "tools" / "deliverables.py").write_bytes(shipped.replace(b"\n", b"\r\n"))  # a Windows checkout
    (tmp_path / "tools" / "heatmap.py").write_bytes(b"print('changed by the student')\n")
    (tmp_path / "helper.py").write_bytes(shipped)  # the same bytes under a path the kit never shipped
    kit = {"tools/deliverables.py": frozenset({hashlib.sha256(shipped).hexdigest()}),
           "tools/heatmap.py": frozenset({hashlib.sha256(b"print('as shipped')\n").hexdigest()})}
    runnable = _runnable(str(tmp_path), kit)
    digest = {p.relative_to(tmp_path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.rglob("*.py")}
    assert sorted(name for name, key in digest.items() if key in runnable) == ["helper.py", "tools/heatmap.py"]
    # helper.py's bytes are the shipped tool's, handed in as the student's own: they run as such; under the tool's
    # path, with CRLF, they are the kit's and do not.
    assert hashlib.sha256(shipped.replace(b"\n", b"\r\n")).hexdigest() not in runnable


def test_a_modules_first_call_has_import_timeout_for_its_import_and_later_calls_call_timeout(transport):
    # Held-out s47r: a notebook's last cell slept 6 s; every part's module runs every cell when imported, so every
    # part's first call timed out at call_timeout and all four parts scored 0, while `make test` waited and passed.
    # A file's import gets import_timeout; a call after it, call_timeout; an import past import_timeout is stopped.
    config = dataclasses.replace(CONFIG, call_timeout=1.0, import_timeout=3.0)
    slow = "import time\ntime.sleep({})\n\n\ndef answer():\n    return 1\n\n\ndef stall():\n    time.sleep(2)\n"
    t = transport({"slow.py": slow.format(1.8)}, config=config)
    first, _ = t.call({"op": "call", "module": "slow", "name": "answer", "args": []}, {})
    assert first["error"] is None and first["value"] == 1, first["error"]
    later, _ = t.call({"op": "call", "module": "slow", "name": "stall", "args": []}, {})
    assert later["error"]["type"] == "Timeout" and "within 1 s" in later["error"]["message"], later["error"]
    t = transport({"slow.py": slow.format(30)}, config=config)
    hung, _ = t.call({"op": "call", "module": "slow", "name": "answer", "args": []}, {})
    assert hung["error"]["type"] == "Timeout" and "within 3 s" in hung["error"]["message"], hung["error"]


def test_a_first_call_whose_import_is_done_has_call_timeout_for_the_rest(transport):
    # Session 39: the demo class took 49 s where it took 19: mia's forward loops forever, and a module's first call,
    # which imports the file, had import_timeout as a whole (twice, on first use), not only for the import. The
    # child says when the import is done (a frame of the call's own), and the rest of the call has call_timeout.
    config = dataclasses.replace(CONFIG, call_timeout=1.0, import_timeout=6.0)
    t = transport({"loop.py": "import time\ntime.sleep(0.5)\n\n\ndef spin():\n    while True:\n        pass\n"},
                  config=config)
    start = time.monotonic()
    spun, _ = t.call({"op": "call", "module": "loop", "name": "spin", "args": []}, {})
    took = time.monotonic() - start
    assert spun["error"]["type"] == "Timeout" and "within 1 s" in spun["error"]["message"], spun["error"]
    assert took < 5.0, f"the first call's loop ran {took:.1f} s: it had the import's time, not call_timeout"


def test_a_helper_imported_during_a_call_has_the_imports_time(transport):
    # Held-out s49r: a helper whose import takes 7 s, imported inside TransformerBlock.__init__, timed out twice once
    # a first call's time after its file's import was call_timeout. A module of the submission starting to import
    # during any call gives that call import_timeout from then on (the child says so); an infinite loop still ends.
    config = dataclasses.replace(CONFIG, call_timeout=1.0, import_timeout=6.0)
    t = transport({"lazy.py": "def quick():\n    return 1\n\n\ndef late():\n    import slowhelper\n"
                              "    return slowhelper.VALUE\n\n\ndef spin():\n    while True:\n        pass\n",
                   "slowhelper.py": "import time\ntime.sleep(2)\nVALUE = 7\n"}, config=config)
    first, _ = t.call({"op": "call", "module": "lazy", "name": "quick", "args": []}, {})
    assert first["error"] is None and first["value"] == 1, first["error"]
    late, _ = t.call({"op": "call", "module": "lazy", "name": "late", "args": []}, {})
    assert late["error"] is None and late["value"] == 7, late["error"]
    spun, _ = t.call({"op": "call", "module": "lazy", "name": "spin", "args": []}, {})
    assert spun["error"]["type"] == "Timeout" and "within 1 s" in spun["error"]["message"], spun["error"]
    # Held-out s50r: importing the same helper again (popped from sys.modules first) is no first import, and gives
    # its call no more time: every call could have had the import's 30 s so.
    t = transport({"lazy.py": "import sys\n\n\ndef late():\n    import slowhelper\n    return slowhelper.VALUE\n\n\n"
                              "def again():\n    sys.modules.pop('slowhelper')\n    import slowhelper\n"
                              "    return slowhelper.VALUE\n",
                   "slowhelper.py": "import time\ntime.sleep(2)\nVALUE = 7\n"}, config=config)
    late, _ = t.call({"op": "call", "module": "lazy", "name": "late", "args": []}, {})
    assert late["error"] is None and late["value"] == 7, late["error"]
    again, _ = t.call({"op": "call", "module": "lazy", "name": "again", "args": []}, {})
    assert again["error"]["type"] == "Timeout" and "within 1 s" in again["error"]["message"], again["error"]
    # s50r again: a first import that takes no time, then slow work. The import's time covers the import alone.
    t = transport({"lazy.py": "import time\n\n\ndef work():\n    import quickhelper\n    time.sleep(2)\n"
                              "    return quickhelper.VALUE\n", "quickhelper.py": "VALUE = 7\n"}, config=config)
    worked, _ = t.call({"op": "call", "module": "lazy", "name": "work", "args": []}, {})
    assert worked["error"]["type"] == "Timeout" and "within 1 s" in worked["error"]["message"], worked["error"]
    # s51r: a fresh module imported in each call. The helpers of a file share one import's time (6 s here): three
    # imports of 1.5 s pass, a fourth of 3 s, past what is left, is stopped.
    fresh = {f"slow{i}.py": f"import time\ntime.sleep({1.5 if i < 3 else 3})\nVALUE = 7\n" for i in range(4)}
    body = "import importlib\n\n\ndef load(i):\n    return importlib.import_module(f'slow{i}').VALUE\n"
    t = transport({"lazy.py": body, **fresh}, config=config)
    answers = [t.call({"op": "call", "module": "lazy", "name": "load", "args": [i]}, {})[0] for i in range(4)]
    assert [a["error"] is None for a in answers] == [True, True, True, False], [a["error"] for a in answers]


def test_a_lesson_gives_imports_their_time_and_a_config_that_sets_one_keeps_it():
    from grader.running.grade import with_lesson_limits

    said = {**LESSON.limits, "calls": {"import_seconds": 30}}
    assert with_lesson_limits(SandboxConfig(), said).import_timeout == 30.0
    assert with_lesson_limits(SandboxConfig(import_timeout=2.0), said).import_timeout == 2.0
    assert with_lesson_limits(SandboxConfig(), LESSON.limits).import_timeout == 0.0  # none said: call_timeout


def test_a_data_file_beside_a_module_is_still_read_through_its_loader(transport):
    # A guard for the handed-in-only loader: it checks module source, not the data a module reads through it
    # (pkgutil.get_data, importlib.resources), nor a data file the module's own code wrote.
    t = transport({"helper.py": "def answer():\n    return 1\n", "notes.txt": "handed in\n", "reader.py": """
        import os
        import pkgutil


        def read():
            with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "later.txt"), "w") as f:
                f.write("written")
            return [pkgutil.get_data("helper", "notes.txt").decode(), pkgutil.get_data("helper", "later.txt").decode()]
        """})
    h, _ = t.call({"op": "call", "module": "reader", "name": "read", "args": []}, {})
    assert h["error"] is None, h["error"]
    assert h["value"] == ["handed in\n", "written"], h["value"]

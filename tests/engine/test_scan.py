"""The static scan (grader/judging/source_scan.py) is total and bounded: whatever a submission's files hold, each file
is scanned or named in a flag, the scan never raises, and its time and memory are limited.

The hostile files run through the limited helper a grading run uses (`LimitedScan`, 512 MB of address
space), beside honest files whose findings must not change. With the toy lesson's policy (the library's
softmax costs the part whose file reaches it) and its reference as the honest files."""
import json
import shutil
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.lesson import lesson_names, load_lesson
from grader.running import forbidden

from grader.judging import source_scan as scan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY, components, kept_zygotes, make_submission, shared_config  # noqa: E402

KIT = Path(__file__).resolve().parents[2]
SOLUTIONS = TOY / "solutions"
POLICY_PATH = TOY / "forbidden.toml"
POLICY = forbidden.load_policy(POLICY_PATH)
NOTEBOOK_MODULE = "_notebook"  # the module name a notebook's code would be read under
CAP = 512 << 20

# A never-imported helper holding one constant of 2000 terms: folding it used to recurse past Python's
# limit (engine-error, 0/100 for correct code, and the grader exited 1).
DEEP_CONSTANT = "import sys\nX = " + " + ".join(['"ab"'] * 2000) + "\n"


def _scanner(**limits):
    return scan.LimitedScan(policy=POLICY, contract={}, notebook_module=NOTEBOOK_MODULE,
                            memory_bytes=limits.pop("memory_bytes", CAP), **limits)


def _honest(folder: Path) -> None:
    for f in SOLUTIONS.glob("*.py"):
        (folder / f.name).write_bytes(f.read_bytes())


def test_a_2000_term_constant_is_folded_and_the_rest_of_its_file_is_still_read():
    source = DEEP_CONSTANT + "import torch.nn.functional as F\ny = F.softmax\n"
    found = scan.scan_sources([("helper.py", source, None)], POLICY)
    assert found.costs == {"helper.py": {"softmax"}}
    assert found.flags == []


def test_a_name_glued_from_many_pieces_is_still_worked_out():
    pieces = " + ".join(f'"{c}"' for c in "log_softmax")
    source = f"import torch.nn.functional as F\nf = getattr(F, {pieces})\n"
    assert scan.scan_sources([("a.py", source, None)], POLICY).costs == {"a.py": {"log_softmax"}}


def test_doubling_strings_stay_small():
    # 40 doublings of a 64-character string would be 70 TB if folded without a cap.
    lines = ["import sys", f"s0 = {'a' * 64!r}"] + [f"s{i + 1} = s{i} + s{i}" for i in range(40)]
    found = scan.scan_sources([("a.py", "\n".join(lines), None)], POLICY)
    assert found.costs == {} and found.flags == []


def test_a_long_chain_of_lookups_is_followed_and_a_deeper_one_is_named():
    source = "import torch\nx = torch" + ".softmax" * 500 + "\n"
    assert scan.scan_sources([("a.py", source, None)], POLICY).costs == {"a.py": {"softmax"}}
    source = "import torch\nx = torch" + ".softmax" * 20000 + "\n"  # deeper than Python's parser goes
    found = scan.scan_sources([("a.py", source, None)], POLICY)
    assert found.flags == ["a.py: not read by the grader's scan (too deeply nested for Python's parser)"]


def test_a_flood_of_flags_keeps_100_of_each_kind_and_counts_the_rest():
    source = "import torch\n" + "".join(f"a{i} = x{i}.__globals__\n" for i in range(3000))
    found = scan.scan_sources([("a.py", source, None), ("b.py", source, None)], POLICY)
    assert len(found.flags) == scan.MAX_FLAGS_PER_KIND
    assert found.shown()[-1] == "... and 5900 more flags like: __globals__ (reflective access)"


def test_a_file_that_imports_differently_than_utf8_is_read_as_python_reads_it():
    # A latin-1 file with its coding line imports fine; read as UTF-8 it did not parse, so the scan
    # skipped it in silence.
    source = ("# -*- coding: latin-1 -*-\nimport torch.nn.functional as F\ncaf\xe9 = 1\n"
              "y = F.softmax\n").encode("latin-1")
    found = scan.scan_sources([("a.py", source, None)], POLICY)
    assert found.costs == {"a.py": {"softmax"}}


def test_a_file_named_like_the_notebook_module_is_read_whole_unless_the_intake_wrote_it(tmp_path):
    # Red team s45r: the scan read only the CELLS list of any top-level file with the notebook module's name, so code
    # below the list ran unread and unflagged. Its cells alone are read only when the file is the intake's own text.
    from grader.intake.submissions import notebook_module_source

    _honest(tmp_path)
    written = notebook_module_source("mine.ipynb", ["import math\n"], [1])
    (tmp_path / f"{NOTEBOOK_MODULE}.py").write_text(written)
    assert not scan.scan_sources(scan.read_sources(tmp_path, NOTEBOOK_MODULE), POLICY).flags
    (tmp_path / f"{NOTEBOOK_MODULE}.py").write_text(written + "\nimport gc\nleak = gc.get_objects()\n")
    found = scan.scan_sources(scan.read_sources(tmp_path, NOTEBOOK_MODULE), POLICY)
    assert any("gc" in str(flag) for flag in found.flags), found.shown()


def test_setattr_with_a_run_time_name_on_an_object_passed_in_is_flagged_and_self_is_not():
    # Red team s46r: `_put(torch, "softmax", f)` with `def _put(owner, name, value): setattr(owner, name, value)`
    # replaced a library's function unflagged. A module's own attributes, set through self, stay unflagged.
    source = ("import torch\n\ndef _put(owner, name, value):\n    setattr(owner, name, value)\n\n"
              "class M(torch.nn.Module):\n    def __init__(self, names):\n        super().__init__()\n"
              "        for n in names:\n            setattr(self, n, torch.nn.Linear(2, 2))\n")
    found = scan.scan_sources([("a.py", source, None)], POLICY)
    assert [str(f) for f in found.flags if "setattr" in str(f)] and all("line 4" in str(f) for f in found.flags
                                                                         if "setattr" in str(f)), found.shown()


def test_a_file_in_a_package_is_read_and_its_costs_reach_the_file_that_imports_it(tmp_path):
    _honest(tmp_path)
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("from torch.nn.functional import softmax as s\n")
    text = (tmp_path / "classifier.py").read_text()
    (tmp_path / "classifier.py").write_text("import helpers\n" + text)
    sources = scan.read_sources(tmp_path, NOTEBOOK_MODULE)
    found = scan.scan_sources(sources, POLICY)
    assert found.reaching("classifier.py") == {"softmax"}
    assert found.reaching("activations.py") == set()


def test_a_file_over_the_size_limit_and_compiled_code_are_named_not_skipped(tmp_path):
    _honest(tmp_path)
    (tmp_path / "big.py").write_text("x = 1\n" * 240_000)  # 1.44 MB
    (tmp_path / "fast.pyc").write_bytes(b"\x00" * 64)
    found = _scanner().scan(tmp_path)
    assert found.flags == ["big.py: not read by the grader's scan (1.4 MB, over the scan's 1.0 MB)",
                           "fast.pyc: not read by the grader's scan (compiled code, which Python can import "
                           "but the scan cannot read)"]
    assert found.costs == {}


def test_sources_past_the_total_the_scan_reads_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr(scan, "MAX_TOTAL_BYTES", 250_000)
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text("import gc\n" + "x = 1\n" * 20_000)  # 120 KB each
    sources, found = scan.snapshot(tmp_path, NOTEBOOK_MODULE)
    assert [name for name, _, _ in sources] == ["a.py", "b.py"]
    assert found.flags == ["c.py: not read by the grader's scan (a submission's first 250 KB of source are read)"]


def _hostile_files(folder: Path) -> dict:
    """The hostile-file suite: name -> bytes."""
    def flood(var):  # 30,000 suspicious attribute reads, ~800 KB
        return "import torch\n" + "".join(f"{var}{i} = {var}.__globals__\n" for i in range(30_000))

    files = {
        "deep_constant.py": DEEP_CONSTANT,
        "deep_sum.py": "import sys\nx = " + "1 + " * 100_000 + "1\n",  # too deep for ast.parse, fine for import
        "deep_unary.py": "import sys\nx = " + "-" * 100_000 + "1\n",
        "deep_attribute.py": "import sys\nx = y" + ".a" * 150_000 + "\n",
        "huge_constant.py": "import sys\nX = " + repr("ab" * 450_000) + "\n",
        "lines_100k.py": "import sys\n" + "x = 1\n" * 100_000,
        "flood_a.py": flood("a"),
        "flood_b.py": flood("b"),
        "nested_fstrings.py": "import sys\nx = f\"{f'{sys.modules!r}'}\"\n" + 'y = f"{' * 300 + "1" + '}"' * 300 + "\n",
        "null_bytes.py": "import sys\nx = 1\x00\n",
        "not_utf8.py": b"import sys\nx = '\xff\xfe'\n",
    }
    for name, text in files.items():
        (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return files


def _limited_run(code: str, timeout: float) -> dict:
    """Run `code` (which prints one JSON line) in a fresh interpreter under the 512 MB cap."""
    script = "import resource\nresource.setrlimit(resource.RLIMIT_AS, (%d, %d))\n" % (CAP, CAP) + code
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          cwd=KIT, env={**os.environ, "PYTHONPATH": str(KIT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_hostile_file_suite_is_scanned_or_named_under_512_mb_beside_honest_files(tmp_path):
    _honest(tmp_path)
    (tmp_path / "activations.py").write_text((tmp_path / "activations.py").read_text()
                                             + "\nimport gc\n")  # the honest sibling's one flag
    files = _hostile_files(tmp_path)
    # The grader's side (snapshot, merge) runs under the cap too; the helper has its own.
    code = textwrap.dedent(f"""
        import json, time
        from grader.judging import source_scan as scan
        from grader.running.forbidden import load_policy
        start = time.monotonic()
        with scan.LimitedScan(policy=load_policy({str(POLICY_PATH)!r}), contract={{}}, notebook_module={NOTEBOOK_MODULE!r},
                              memory_bytes={CAP}, seconds=60, budget=600) as s:
            found = s.scan({str(tmp_path)!r})
        print(json.dumps({{"flags": found.shown(), "costs": {{f: sorted(n) for f, n in found.costs.items()}},
                          "imports": sorted(found.imports), "seconds": time.monotonic() - start}}))
    """)
    # Generous time bounds: a busy machine (or a slower parser) must not turn this into a test of the deadline.
    got = _limited_run(code, timeout=900)
    flags = got["flags"]
    assert got["costs"] == {}
    assert any(f.startswith("activations.py line") and f.endswith("imports gc") for f in flags)
    for honest in ("classifier.py",):
        assert not any(f.startswith(honest) for f in flags), honest
    # Each hostile file was read (its imports are known) or is named in a flag.
    for name in files:
        assert name in got["imports"] or any(f.startswith(f"{name}: not read") for f in flags), name
    # Python's parser cannot build these trees: named, never silence.
    for name in ("deep_sum.py", "deep_unary.py", "deep_attribute.py"):
        assert any(f.startswith(f"{name}: not read") for f in flags), name
    # The flood: 100 kept, the rest counted in one line.
    assert sum("__globals__" in f for f in flags) == scan.MAX_FLAGS_PER_KIND + 1
    assert "... and 59900 more flags like: __globals__ (reflective access)" in flags
    assert len("\n".join(flags)) < 100_000


def test_a_file_that_runs_the_helper_out_of_memory_is_named_and_the_others_are_scanned(tmp_path):
    (tmp_path / "a_first.py").write_text("import gc\n")
    (tmp_path / "b_big.py").write_text("import sys\n" + "x = [1, 2, 3]\n" * 70_000)
    (tmp_path / "c_last.py").write_text("from torch.nn.functional import softmax\n")
    # A cap the helper can start under but not parse 70,000 lists in.
    with _scanner(memory_bytes=100 << 20) as s:
        found = s.scan(tmp_path)
    assert found.flags[0] == "a_first.py line 1: imports gc"
    assert found.flags[1].startswith("b_big.py: not read by the grader's scan (parsing it needed more")
    assert found.costs == {"c_last.py": {"softmax"}}


def test_a_file_that_takes_the_helper_too_long_is_named_and_the_others_are_scanned(tmp_path):
    (tmp_path / "a_slow.py").write_text("import sys\n" + "x = 1\n" * 150_000)
    (tmp_path / "b_next.py").write_text("from torch.nn.functional import softmax\n")
    with _scanner(seconds=0.01) as s:
        found = s.scan(tmp_path)
    assert found.flags[0].startswith("a_slow.py: not read by the grader's scan (parsing it took more than")
    # b_next.py gets the same 0.01 s with a fresh helper (start-up included): named, or scanned.
    assert found.costs == {"b_next.py": {"softmax"}} or found.flags[1].startswith("b_next.py: not read")


def _paused(pid: int, seconds: float):
    """A helper paused for `seconds` of wall time, as a machine busy with other work starves it (SIGSTOP)."""
    import signal
    import threading

    os.kill(pid, signal.SIGSTOP)
    timer = threading.Timer(seconds, os.kill, (pid, signal.SIGCONT))
    timer.start()
    return timer


def test_a_starved_helper_still_reads_a_file_it_has_the_cpu_time_for(tmp_path):
    """The helper's allowance is CPU time: paused for twice its allowance in wall time (a busy machine), it
    reads the file and no flag is raised; paused past WALL_FACTOR times its allowance, it is stopped and the
    file is named, so a helper that never runs cannot hold the run."""
    from grader.running import helper_process

    (tmp_path / "a.py").write_text("from torch.nn.functional import softmax\n")
    with _scanner(seconds=1.0) as s:
        s.scan(tmp_path)  # the helper is up and has read once
        started = time.monotonic()  # before the pause begins: its 2 s all fall after this
        timer = _paused(s._proc.pid, 2.0)
        found = s.scan(tmp_path)
        timer.join()
        assert time.monotonic() - started >= 2.0  # it waited for the paused helper, past its 1 s allowance
        assert found.flags == [] and found.costs == {"a.py": {"softmax"}}, found.flags
    with _scanner(seconds=0.2) as s:
        s.scan(tmp_path)
        timer = _paused(s._proc.pid, 0.2 * helper_process.WALL_FACTOR + 3.0)
        try:
            found = s.scan(tmp_path)
        finally:
            timer.cancel()
        assert found.flags and found.flags[0].startswith("a.py: not read by the grader's scan (parsing it took "
                                                         "more than 0.2 s of CPU time")


def test_the_helper_finds_what_the_in_process_scan_finds(tmp_path):
    _honest(tmp_path)
    (tmp_path / "helpers.py").write_text("import torch.nn.functional as F\nimport inspect\n"
                                         "def normalise(x):\n    return F.softmax(x, dim=-1)\n")
    text = (tmp_path / "activations.py").read_text()
    (tmp_path / "activations.py").write_text("from helpers import normalise\n" + text)
    sources = scan.read_sources(tmp_path, NOTEBOOK_MODULE)
    here = scan.scan_sources(sources, POLICY)
    with _scanner() as s:
        there = s.scan(tmp_path)
    assert there.costs == here.costs == {"helpers.py": {"softmax"}}
    assert there.flags == here.flags == ["helpers.py line 2: imports inspect"]
    assert there.reaching("activations.py") == {"softmax"}


# -- in a grading run: the scan reads what was handed in, and nothing it meets stops the run ---------
# Imported, it rewrites its own file to clean text and adds another: a scan done after the hidden tests
# saw neither its reflective import nor its library attention's name, and read the added file.
REWRITES_ITSELF = '''
import gc  # reflective: flagged
import os
from torch.nn.functional import softmax as _s  # the library's softmax named, never used: costs the classifier
with open(__file__, "w") as _f:
    _f.write("# nothing to see\\n")
with open("late.py", "w") as _f:
    _f.write("import ctypes\\n")
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory, toy):
    from grader.running import grade as run

    root = tmp_path_factory.mktemp("scan-run")
    subs, out = root / "submissions", root / "out"
    make_submission(subs / "aaa_honest", solutions=toy.solutions)
    bomb = make_submission(subs / "scan_bomb", solutions=toy.solutions)
    (bomb / "never_imported.py").write_text(DEEP_CONSTANT)
    (bomb / "big.py").write_text("x = 1\n" * 240_000)
    for var in "ab":
        (bomb / f"flood_{var}.py").write_text("import torch\n" + "".join(f"{var}{i} = {var}.__globals__\n"
                                                                         for i in range(30_000)))
    rewriter = make_submission(subs / "rewrites_itself", solutions=toy.solutions)
    (rewriter / "classifier.py").write_text(REWRITES_ITSELF + (rewriter / "classifier.py").read_text())
    config = shared_config(call_timeout=5.0)
    code = run.main(submissions=subs, out=out, jobs=1, config=config, lesson=toy, zygotes=kept_zygotes())
    records = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/record.json")}
    return dict(code=code, records=records, out=out, parts=toy.modules)


def test_files_that_break_the_scan_cost_nothing_and_are_named(graded):
    assert graded["code"] == 0
    record = graded["records"]["scan_bomb"]
    assert record["status"] == "ok"
    assert all(got == top for got, top in components(record, graded["parts"]).values())
    assert "big.py: not read by the grader's scan (1.4 MB, over the scan's 1.0 MB)" in record["flags"]
    assert "... and 59900 more flags like: __globals__ (reflective access)" in record["flags"]
    assert len(record["flags"]) == scan.MAX_FLAGS_PER_KIND + 2
    assert len((graded["out"] / "scan_bomb" / "feedback.md").read_bytes()) < 200_000
    honest = graded["records"]["aaa_honest"]
    assert honest["flags"] == [] and all(got == top for got, top in components(honest, graded["parts"]).values())


def test_sources_rewritten_at_run_time_are_judged_as_handed_in(graded):
    record = graded["records"]["rewrites_itself"]
    assert "classifier.py line 2: imports gc" in record["flags"]
    assert not any("late.py" in f for f in record["flags"])  # written by the child: not handed in
    got = components(record, graded["parts"])
    assert got["classifier"][0] == 0 < got["classifier"][1]
    assert all(got[c][0] == got[c][1] > 0 for c in graded["parts"] if c != "classifier")


@pytest.mark.parametrize("lesson_name", [*lesson_names(), str(TOY)], ids=lambda name: Path(name).name)
def test_the_kits_own_released_files_handed_back_unchanged_raise_no_flag(tmp_path, lesson_name):
    # A student who pushes the whole released repository hands back tests/_feedback/, tools/ and the visible tests:
    # the kit's own files, which import the grader and use reflection. Each raised a staff-only integrity flag (51
    # on one lesson's repository), burying any real one. Unchanged, they are not the student's; changed, they are.
    from grader.judging import score
    from grader.release import student_release

    lesson = load_lesson(lesson_name)
    day = student_release.build(out=tmp_path / "dist", lesson=lesson)
    repo = tmp_path / "repo"
    shutil.copytree(day, repo)
    for module in lesson.modules:
        shutil.copyfile(lesson.solutions / f"{module}.py", repo / f"{module}.py")
    assert score.scan_submission(repo, lesson=lesson).flags == []
    conftest = repo / "tests" / "conftest.py"
    conftest.write_bytes(conftest.read_bytes().replace(b"\n", b"\r\n"))  # git's autocrlf on Windows: still the kit's
    assert score.scan_submission(repo, lesson=lesson).flags == []
    conftest.write_text(conftest.read_text() + "\nimport grader.judging.score  # reaching for the answers\n")
    flags = score.scan_submission(repo, lesson=lesson).flags
    assert flags and all(f.startswith("tests/conftest.py") for f in flags), flags


def test_every_lesson_shows_raw_memory_frame_walks_and_sub_interpreters_to_the_staff():
    """A red team undid the child's guards from pure Python: numpy's array protocol over raw addresses, a walk up
    the frames to the executor, getattr(frame, "f_globals"), a sub-interpreter. Each is flagged, whatever the
    lesson's own [flags] list."""
    source = textwrap.dedent("""
        import numpy as np
        import traceback
        import _xxsubinterpreters
        class Raw:
            __array_interface__ = {"shape": (8,), "typestr": "|u1", "data": (0, False), "version": 3}
        frames = list(traceback.walk_stack(None))
        g = getattr(frames[0][0], "f_globals")
    """)
    found = scan.scan_sources([("a.py", source, None)], {**POLICY, "flags": {"attributes": ["f_globals"]}})
    shown = "\n".join(found.flags)
    for what in ("imports _xxsubinterpreters", "__array_interface__ (reflective access)",
                 "walk_stack (reflective access)", "getattr(..., 'f_globals') (reflective access)"):
        assert what in shown, (what, shown)


def test_a_library_name_spelled_backwards_is_shown_to_the_staff():
    """A red team looked the library's function up by a name reversed at run time ("...xamtfos"[::-1]), which no
    plain reading of the strings matches; nobody writes a name backwards but to hide it."""
    hidden = 'import torch\nf = getattr(torch.nn.functional, "xamtfos"[::-1])\n'
    found = scan.scan_sources([("a.py", hidden, None)], POLICY)
    assert any("spells 'softmax' backwards" in f and f.startswith("a.py line 2") for f in found.flags), found.flags
    plain = 'import torch\nWORDS = ["maximum", "stats", "xam"]\n'
    assert scan.scan_sources([("b.py", plain, None)], POLICY).flags == []


def test_every_lesson_shows_code_run_from_a_data_file_and_a_library_replaced_at_import():
    """Red team s38r ran its code from a data file the scan does not read (`_run = exec`, then `_run(text)`: only a
    call of exec by its own name was flagged), which hid a raw-memory exploit's every flag, and replaced
    torch.Tensor.detach at import so that the grader read a float64 answer as float32. Each way to run unread code
    or to replace a library's attribute is shown to the staff, whatever the lesson's own [flags] list."""
    source = textwrap.dedent("""
        import json
        import pickle
        import socket
        import sys

        import numpy as np
        import torch
        from torch import Tensor

        _run = exec
        peek = getattr(__builtins__, "ev" + "al")
        builtin_module = print.__self__
        code = __loader__.source_to_code(b"", "x")
        sys.path_hooks.pop(0)
        torch.Tensor.detach = lambda self: self
        Tensor.cpu = None
        np.array = list
        setattr(socket.socket, "sendmsg", None)
        json.JSONEncoder.encode += None
        weights = torch.load("w.pt", weights_only=False)
        table = np.load("t.npy", allow_pickle=True)
        safe = torch.load("w.pt", weights_only=True), np.load("t.npy"), torch.load("w.pt")


        class Layer:
            def __init__(self):
                self.weight = None  # the submission's own object: nothing to show
    """)
    found = scan.scan_sources([("a.py", source, None)], POLICY)
    shown = "\n".join(found.flags)
    for what in ("line 3: imports pickle", "line 11: exec used as a value", "line 12: getattr(..., 'eval')",
                 "line 12: __builtins__ (reflective access)", "line 13: print.__self__ (reflective access)",
                 "line 14: __loader__ (reflective access)", "line 14: __loader__.source_to_code (reflective access)",
                 "line 15: sys.path_hooks (reflective access)", "line 16: replaces torch.Tensor.detach",
                 "line 17: replaces Tensor.cpu", "line 18: replaces np.array", "line 19: replaces socket.socket.sendmsg",
                 "line 20: replaces json.JSONEncoder.encode", "line 21: torch.load(..., weights_only=...)",
                 "line 22: np.load(..., allow_pickle=...)"):
        assert what in shown, (what, shown)
    assert "line 23" not in shown and "line 28" not in shown, shown
    honest = "import torch\n\nclass A(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
             "        self.w = torch.nn.Linear(2, 2)\n        self.w.weight.data = torch.zeros(2, 2)\n"
    assert scan.scan_sources([("b.py", honest, None)], POLICY).flags == []


def test_setting_an_attribute_of_the_submissions_own_module_is_not_shown():
    own = "import helpers\nfrom helpers import settings\nfrom . import other\nhelpers.EPS = 1e-9\nsettings.debug = True\n" \
          "other.x = 1\n"
    found = scan.scan_sources([("a.py", own, None), ("helpers.py", "EPS = 1e-6\nsettings = None\n", None)], POLICY)
    assert found.flags == []


def test_a_file_whose_only_trick_is_replacing_a_library_function_is_still_read():
    # The scan skips parsing a file with none of its trigger words; a monkeypatch needs none of them.
    source = "import torch\n\n_plain = torch.Tensor.detach\ntorch.Tensor.detach = lambda self: _plain(self).float()\n"
    found = scan.scan_sources([("a.py", source, None)], POLICY)
    assert any(f.startswith("a.py line 4: replaces torch.Tensor.detach") for f in found.flags), found.flags


def test_reproducibility_settings_of_torch_backends_are_not_shown():
    # Held-out s39: two honest files (one a notebook's first cell) set `torch.backends.cudnn.deterministic = True` and
    # `benchmark = False`, the lines PyTorch's reproducibility notes give, and each was shown as "replaces
    # torch.backends.cudnn.deterministic (a library's attribute, set by the submission)". A number or a bool stored
    # in torch.backends is a setting; anything else stored there, or a setting stored elsewhere, is still shown.
    honest = ("import torch\nimport torch as T\n\ntorch.backends.cudnn.deterministic = True\n"
              "torch.backends.cudnn.benchmark = False\nT.backends.cuda.matmul.allow_tf32 = False\n")
    assert scan.scan_sources([("a.py", honest, None)], POLICY).flags == []
    still = ("import torch\n\ntorch.backends.cudnn.enabled = lambda: True\ntorch.Tensor.requires_grad = False\n"
             "torch.backends.cudnn.deterministic += 1\n")
    shown = "\n".join(scan.scan_sources([("b.py", still, None)], POLICY).flags)
    for line in ("line 3: replaces torch.backends.cudnn.enabled", "line 4: replaces torch.Tensor.requires_grad",
                 "line 5: replaces torch.backends.cudnn.deterministic"):
        assert line in shown, (line, shown)


@pytest.mark.parametrize("source", [
    "import torch\nT = torch.Tensor\nT.detach = lambda s: s\n",
    "import torch\nsetattr(getattr(torch, 'Tensor'), 'detach', lambda s: s)\n",
    "import torch\ntype.__setattr__(torch.Tensor, 'detach', lambda s: s)\n",
    "import torch\nobject.__setattr__(torch, 'cat', None)\n",
    "import torch\nfor m in (torch.Tensor,):\n    m.detach = lambda s: s\n",
    "import torch\ndef put(f, c=torch.Tensor):\n    c.detach = f\n",
    "import torch\nclass H:\n    t = torch.Tensor\nH.t.detach = lambda s: s\n",
    "import json\nE = json.JSONEncoder\nE.encode = lambda s, o: '[]'\n",
    "from numpy import ndarray as A\nB = A\nB.tolist = lambda s: []\n",
    "import importlib\nimportlib.import_module('socket').socket.sendall = None\n",
    "import torch\nif (T := torch.Tensor):\n    T.detach = lambda s: s\n",
], ids=["alias", "setattr-getattr", "type-setattr", "object-setattr", "loop", "default", "class-attribute", "json-alias",
        "numpy-alias-of-alias", "import_module", "walrus"])
def test_a_library_replaced_through_another_name_is_still_shown(source):
    """Red team s40r: only an attribute set on a chain that starts at a name an import bound was shown, so `T =
    torch.Tensor; T.detach = f` (and setattr(getattr(torch, ...)), type.__setattr__, a loop variable, a default, a
    class attribute, a walrus) replaced the same function unseen. A name bound to a library's attribute is the
    library's too."""
    flags = scan.scan_sources([("a.py", source, None)], POLICY).flags
    assert any("replaces" in f and "a library's attribute" in f for f in flags), flags


def test_an_alias_of_torch_backends_still_takes_its_settings_unshown():
    source = ("import torch\ncudnn = torch.backends.cudnn\ncudnn.deterministic = True\ncudnn.benchmark = False\n"
              "x = torch.zeros(2)\nx.requires_grad = True\nlayer = torch.nn.Linear(2, 2)\nlayer.weight.data = x\n")
    assert scan.scan_sources([("a.py", source, None)], POLICY).flags == []


def test_a_module_neither_handed_in_nor_installed_is_shown_where_it_is_imported():
    """Red team s40r: a file that writes a classmate's code (kept as base64) beside itself at import and imports it
    by a plain `import`, or that imports it from a zip, ran code no scan or similarity reads, unflagged. The module it
    imports is in no file handed in and in no library installed for grading."""
    written = "import base64\nopen('_d.py', 'w').write(base64.b64decode('eD0x').decode())\nfrom _d import *\n"
    zipped = "import sys\nsys.path.append('//here/lib.zip')\nfrom vb.activations import *\n"
    honest = ("import math\nimport numpy as np\nimport torch\nimport matplotlib\nfrom helpers import f\n"
              "from activations import softmax\nfrom . import sibling\n")
    found = scan.scan_sources([("a.py", written, None), ("b.py", zipped, None), ("c.py", honest, None),
                               ("helpers.py", "def f():\n    return 1\n", None)], POLICY,
                              {"softmax": "activations.py"})
    shown = "\n".join(found.flags)
    assert "a.py line 3: imports _d" in shown and "b.py line 3: imports vb" in shown, shown
    assert "c.py" not in shown, shown
    # A module of the release's own tools (a folder the submission's script puts on sys.path) is the kit's, not unknown.
    tool = "import sys\n\ndef main():\n    sys.path.insert(0, '../tools')\n    import plotting\n"
    assert scan.scan_sources([("d.py", tool, None)], POLICY, kit=["tools/plotting.py"]).flags == []
    assert scan.scan_sources([("d.py", tool, None)], POLICY).flags != []


@pytest.mark.parametrize("source", [
    "x = 1; from _d import *\n",  # not at the start of its line: a file with nothing else to read was not parsed
    "if True: from _d import *\n",
    "\x0cimport _d\n",
    "try:\n    def f():\n        from _d import g\n        return g()\nexcept ImportError:\n    pass\n",
    "try:\n    from _d import *\nexcept ImportError:\n    raise\n",
], ids=["after_semicolon", "one_line_if", "form_feed", "def_inside_try", "handler_reraises"])
def test_an_import_of_an_unknown_module_is_shown_however_it_is_written(source):
    """Red team s41r: the not-found check read a file the scan need not otherwise parse only when a line began with
    `import` or `from`, and took every import inside a `try` that names ImportError for an optional library's, even
    one in a function defined there (run later, outside the try) or under a handler that raises the failure again."""
    found = scan.scan_sources([("a.py", source, None)], POLICY, {"softmax": "activations.py"})
    assert any("imports _d" in f for f in found.flags), found.flags


def test_an_optional_library_in_a_try_is_still_not_shown():
    source = ("try:\n    import _nowhere_lib\nexcept ImportError:\n    _nowhere_lib = None\n"
              "try:\n    from _nowhere_two import x\nexcept (ImportError, AttributeError):\n    x = None\n")
    assert scan.scan_sources([("a.py", source, None)], POLICY, {"softmax": "activations.py"}).flags == []

"""Hostile submissions, graded in one batch beside honest ones (tests/fixtures/hostile/), all of the toy
lesson (tests/fixtures/lessons/toy): its two parts, `activations` (a function) and `classifier` (a module over
`activations`, graded over the grader's softmax), carry every attack between them.

Each test asserts the score (a cheat scores exactly what the same bug scores without the cheat; a
fault costs only the component it hits), the stated reason, that the honest siblings graded in
the same batch are unaffected, and that no process is left over.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import (KIT, TOY, components, descendants, make_submission, processes_of, settled,  # noqa: E402
                            text_of, uid_base_for_tests)

from grader.running import grade as run  # noqa: E402
from grader.sandbox import SandboxConfig  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402

LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"
CODE = ("activations", "classifier")  # the toy's parts
# Like a CI token in the instructor's environment: it must not reach student code.
SECRET_VARIABLE = "KIT_TEST_SECRET_TOKEN"
# scratch_inodes: far above what an honest submission's scratch holds (~20), far below the default.
CONFIG = SandboxConfig(call_timeout=2.0, cpu_seconds=6, max_file_bytes=8 << 20, scratch_inodes=2000,
                       uid_base=uid_base_for_tests(1))
JOBS = 2
SANDBOX_UIDS = range(CONFIG.uid_base, CONFIG.uid_base + JOBS)
HONEST = ("aaa_reference", "zzz_reference")


def _render(text: str, values: dict) -> str:
    def include(m):
        return (HOSTILE / m.group(1)).resolve().read_text()
    text = re.sub(r"^# @@INCLUDE (\S+)$", include, text, flags=re.M)
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", str(value))
    return text


def lesson_values() -> dict:
    """Where the graded lesson's secrets are, for the attacks that go for them: its folder (reference, rubric,
    hidden tests) and the package its modules are imported as in the grader's process."""
    return {"LESSON": LESSON.folder, "PACKAGE": LESSON.package}


def build_class(root: Path, values: dict) -> Path:
    subs = root / "submissions"
    for name in HONEST:
        make_submission(subs / name, solutions=LESSON.solutions)
    for case in sorted(p for p in HOSTILE.iterdir() if p.is_dir()):
        folder = make_submission(subs / case.name, solutions=LESSON.solutions)
        for f in (f for f in case.iterdir() if f.is_file()):  # not a __pycache__ a stray import left
            if f.name == "symlinks.txt":
                for line in f.read_text().splitlines():
                    link, target = (s.strip() for s in _render(line, values).split("->"))
                    (folder / link).unlink(missing_ok=True)
                    (folder / link).symlink_to(target)
            else:
                (folder / f.name).write_text(_render(f.read_text(), values))
    return subs


class Listener:
    """A TCP listener on loopback that records whether anything connected."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                pass

    def close(self):
        self._stop = True
        self._thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def batch():
    root = Path(tempfile.mkdtemp(prefix="hostile-"))
    out = root / "out"
    listener = Listener()
    subs = build_class(root, {"PORT": listener.port, "KIT": KIT, "SUBMISSIONS": root / "submissions",
                              "OUT": out, "GRADER_PID": os.getpid(), **lesson_values()})
    originals = {p: p.read_bytes() for p in (subs / "aaa_reference").iterdir()}
    os.environ[SECRET_VARIABLE] = "ghp_not_for_students"
    try:
        code = run.main(submissions=subs, out=out, jobs=JOBS, config=CONFIG, lesson=LESSON)
    finally:
        del os.environ[SECRET_VARIABLE]
    listener.close()
    records = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/record.json")}
    yield dict(code=code, out=out, subs=subs, records=records, originals=originals, listener=listener, root=root)
    shutil.rmtree(root, ignore_errors=True)


def check(batch, name, *, hit, like=None, reason=None):
    """`hit` lost points (exactly as many as `like` when given), the other parts are full, the reason is stated."""
    record = batch["records"][name]
    comp = components(record, CODE)
    for c in CODE:
        if c != hit:
            assert comp[c][0] == comp[c][1], (name, c, comp[c])
    assert comp[hit][0] < comp[hit][1], (name, comp[hit])
    if like is not None:
        assert comp[hit][0] == components(batch["records"][like], CODE)[hit][0], (name, like)
    if reason is not None:
        said = text_of(record, lesson=LESSON)  # as the student reads it: the forbidden library's words are data
        assert re.search(reason, said), (name, reason, said[:1500])
    siblings_unaffected(batch)
    nothing_left()
    return record


def siblings_unaffected(batch):
    a, z = (batch["records"][n] for n in HONEST)
    for record in (a, z):
        assert all(got == top for got, top in components(record, CODE).values()), record["submission"]
        assert record["notes"] == [] and record["status"] == "ok"
    assert [t for t in a["tests"]] == [t for t in z["tests"]]
    for path, data in batch["originals"].items():
        assert path.read_bytes() == data, f"{path} was changed"


def nothing_left():
    assert settled(lambda: processes_of(SANDBOX_UIDS)) == []
    assert settled(lambda: descendants(os.getpid())) == []


def test_batch_completes_with_a_row_each(batch):
    expected = set(HONEST) | {p.name for p in HOSTILE.iterdir() if p.is_dir()}
    assert batch["code"] == 0
    assert set(batch["records"]) == expected
    rows = (batch["out"] / "grades.csv").read_text().splitlines()[1:]
    assert sorted(r.split(",")[0] for r in rows) == sorted(expected)
    nothing_left()


@pytest.mark.parametrize("name", ["cheat_pytest", "cheat_subclass", "cheat_conftest", "cheat_results_json"])
def test_cheats_score_exactly_like_the_same_bug_without_the_cheat(batch, name):
    check(batch, name, hit="activations", like="control_no_shift")


def test_monkeypatching_torch_and_numpy_never_gains_a_point(batch):
    # Patching Tensor.__eq__ could break the student's own code too (other parts may fail), but the
    # comparisons happen in the grader's process, so nothing can score above the honest bug.
    cheat, control = (batch["records"][n] for n in ("cheat_monkeypatch", "control_no_shift"))
    for c in CODE:
        assert components(cheat, CODE)[c][0] <= components(control, CODE)[c][0], c
    assert components(cheat, CODE)["activations"][0] < components(cheat, CODE)["activations"][1]
    siblings_unaffected(batch)
    nothing_left()


def test_printing_passed_changes_nothing(batch):
    record = check(batch, "cheat_print_passed", hit="classifier", like="control_returns_logits")
    assert record["total"] < record["max_total"]


def test_a_fake_results_json_is_never_picked_up(batch):
    record = batch["records"]["cheat_results_json"]
    results = json.loads((batch["out"] / "cheat_results_json" / "results.json").read_text())
    assert results["score"] == record["total"] < 100
    assert not Path("/tmp/results.json").exists()
    check(batch, "cheat_results_json", hit="activations", like="control_no_shift")


def test_os_exit_at_import(batch):
    check(batch, "cheat_os_exit", hit="classifier", reason=r"Crashed: the student's code ended the process \(exit status 0")


def test_sys_exit_at_import(batch):
    check(batch, "cheat_sys_exit", hit="activations", reason=r"SystemExit")


def test_fork_storm_is_refused(batch):
    check(batch, "fork_storm", hit="activations", reason=r"PermissionError|Operation not permitted")


def test_memory_grab_is_stopped(batch):
    check(batch, "memory_grab", hit="activations", reason=r"OutOfMemory: ran out of memory \(it may use \d+ MB beyond torch.s own")


def test_infinite_loop_costs_only_that_part(batch):
    record = check(batch, "infinite_loop", hit="classifier", reason=r"Timeout: no answer within 2 s")
    assert record["status"] == "timeout"


def test_sleep_at_import(batch):
    record = check(batch, "sleep_at_import", hit="classifier", reason=r"Timeout: no answer within 2 s")
    assert components(record, CODE)["classifier"][0] == 0


def test_no_connection_reaches_a_loopback_listener(batch):
    check(batch, "connect_loopback", hit="activations", reason=r"PermissionError|Operation not permitted")
    assert batch["listener"].connections == 0


def test_a_sibling_cannot_be_overwritten(batch):
    check(batch, "overwrite_sibling", hit="activations", reason=r"PermissionError|Permission denied")


def test_grader_and_solutions_cannot_be_read(batch):
    # Refused by Landlock, or before that by the child's audit hook (which costs the part as reaching the kit);
    # from a checkout in a folder others may not enter, the kit is not in the child's view at all.
    from grader.sandbox.confinement import closed_ancestor, is_root

    hidden = is_root() and closed_ancestor(str(KIT)) is not None
    reached = r"Your code opens the grader's own files"  # the audit hook's refusal, in the engine's words
    check(batch, "read_secrets", hit="activations",
          reason=rf"No such file or directory|{reached}" if hidden else rf"Permission denied|{reached}")


def test_the_grader_cannot_be_killed(batch):
    record = check(batch, "kill_parent", hit="classifier", reason=r"the grader is still alive")
    assert "sent" not in re.search(r"attempts: (.*)", text_of(record)).group(1).split("\n")[0]


def test_200_mb_of_output_is_cut_off(batch):
    check(batch, "big_output", hit="activations", reason=r"wrote more than 8 MB")


def test_filling_the_disk_stops_at_the_scratch_quota(batch):
    record = check(batch, "disk_filler", hit="activations", reason=r"No space left on device|File too large")
    if os.geteuid() == 0:
        assert record["isolation"]["scratch_quota_mb"] == CONFIG.scratch_quota_bytes >> 20
        assert re.search(r"filled the folder it runs in to its limit \(128 MB\)", text_of(record, lesson=LESSON))
        assert any("filled its scratch folder" in flag for flag in record["flags"]), record["flags"]


def test_filling_the_scratch_with_empty_folders_is_the_submissions_own_doing(batch):
    # Empty folders cost no bytes: only the cap on files and folders stops them, and removing them must not need one
    # more (it was an engine fault: 0/0, "not your code's fault", on every regrade). Its calls still answer, so it
    # keeps its points; the student reads what happened, the staff get a flag.
    record = batch["records"]["inode_flood"]
    assert all(got == top for got, top in components(record, CODE).values()), text_of(record)[:2000]
    assert record["status"] == "ok", record["status"]
    said = text_of(record, lesson=LESSON)
    assert "engine" not in said and "not your code's fault" not in said, said[:2000]
    assert re.search(r"filled the folder it runs in to its limit \(2,000 files and folders\)", said), said[:2000]
    assert any("filled its scratch folder" in flag for flag in record["flags"]), record["flags"]
    assert not any("filled" in flag for flag in batch["records"]["aaa_reference"]["flags"])
    if os.geteuid() == 0:
        assert record["isolation"]["scratch_quota_inodes"] == CONFIG.scratch_inodes
    siblings_unaffected(batch)
    nothing_left()


def test_a_symlink_out_of_the_submission_is_not_followed(batch):
    record = check(batch, "symlink_outside", hit="activations",
                   reason=r"skipped symlink activations.py -> .*lessons/toy/solutions/activations.py")
    assert "activations.py is missing" in text_of(record)


def test_cffi_is_refused(batch):
    # Native code runs below every guard in the child (the audit hook, the switched-off kernels): an FFI that
    # loads it is refused like ctypes, and the scan shows the staff its import.
    record = check(batch, "native_cffi", hit="activations",
                   reason=r"the grader's sandbox does not allow this to student code \(import cffi\)")
    assert any("cffi" in flag for flag in record["flags"]), record["flags"]


def test_a_sub_interpreter_is_refused(batch):
    # Python's audit hooks belong to one interpreter: a sub-interpreter would run without the child's.
    record = check(batch, "native_subinterpreter", hit="activations",
                   reason=r"the grader's sandbox does not allow this to student code \(import _xxsubinterpreters\)")
    assert any("_xxsubinterpreters" in flag for flag in record["flags"]), record["flags"]


def test_the_source_of_a_lent_stand_in_is_on_no_frame_student_code_can_walk_to(batch):
    record = batch["records"]["read_lent_source"]
    assert "READ THE LENT SOURCE" not in text_of(record), text_of(record)[:2000]
    assert all(got == top for got, top in components(record, CODE).values())


def test_each_child_leads_a_session_of_its_own(batch):
    # The scheduler's autogroups share the CPU by session: a child's 40 threads weigh as one busy process.
    record = batch["records"]["control_own_session"]
    assert all(got == top for got, top in components(record, CODE).values()), text_of(record)[:2000]


def test_a_compiled_module_written_into_the_submission_does_not_load(batch):
    # As root the scratch is a tmpfs mounted noexec: a shared object there cannot be mapped to run.
    if os.geteuid() != 0:
        pytest.skip("the scratch is a noexec tmpfs only as root")
    check(batch, "native_copy", hit="activations", reason=r"failed to map segment|Operation not permitted")


def test_the_child_finds_no_secret_in_its_heap_modules_files_or_environment(batch):
    record = batch["records"]["secret_scanner"]
    assert "FOUND SECRETS" not in text_of(record)
    assert all(got == top for got, top in components(record, CODE).values())


def test_the_secret_scanner_would_find_secrets_in_the_grader_process(tmp_path):
    # The scanner can fail: run in a process that has loaded the scorer, it finds the secrets.
    code = _render((HOSTILE / "secret_scanner" / "activations.py").read_text(), {"KIT": KIT, **lesson_values()})
    (tmp_path / "scanner.py").write_text(code)
    # What a grading process holds at some point: the scorer, the lesson's hidden tests, and the text of its
    # reference and rubric (read when mutants are built and hints are worded).
    probe = ("import sys; sys.path.insert(0, %r); import grader.judging.score; from grader.lesson import load_lesson;"
             "lesson = load_lesson(%r); lesson.hidden_tests;"
             "held = [p.read_text() for p in lesson.solutions.glob('*.py')] + [lesson.rubric_path.read_text()];"
             "sys.path.insert(0, %r); import scanner;"
             "print(sorted({f.split(':')[0] for f in scanner.FOUND}))" % (str(KIT), str(TOY), str(tmp_path)))
    env = dict(os.environ, **{SECRET_VARIABLE: "x"})
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=KIT, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "['environment', 'file', 'heap', 'module', 'proc']"

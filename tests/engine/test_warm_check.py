"""The warm checker (grader/student/warm.py, shipped as tests/_feedback/warm.py): a student's `make test` forked
from a server that has the libraries imported gives what plain `python -m pytest` gives, sees every edit, keeps
exit statuses and Ctrl-C, and leaves nothing running that outlives its reason to.

The folder here is neutral: a module, a test of it, and a stand-in "library" (warmlib) that the server preloads,
so a test can see whether a run was warm (warmlib already imported when the test module loads) and can change
the library on disk.
"""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import KIT, warm_servers  # noqa: E402

WARM = KIT / "grader" / "student" / "warm.py"
SETTLE = 20.0  # seconds a server gets to notice it should end (it looks once a second)


@pytest.fixture
def folder(tmp_path):
    """A student-like folder, its own socket home and library; every server started in it is ended after."""
    work, library = tmp_path / "work", tmp_path / "lib"
    home = Path(tempfile.mkdtemp(prefix="warm-", dir="/tmp"))  # short: a socket's path holds 107 bytes
    (work / "tests").mkdir(parents=True)
    library.mkdir()
    (library / "warmlib.py").write_text("VALUE = 1\n")
    (work / "pytest.ini").write_text("[pytest]\ntestpaths = tests\naddopts = -q -p no:cacheprovider\n")
    (work / "answer.py").write_text("def answer():\n    return 42\n")
    (work / "tests" / "conftest.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parents[1]))\n")
    (work / "tests" / "test_answer.py").write_text(
        "import json, os, sys\n"
        "WARM_ALREADY = 'warmlib' in sys.modules  # before this module imports it\n"
        "import warmlib\n"
        "from answer import answer\n"
        "with open(os.environ['REPORT'], 'a') as report:\n"
        "    report.write(json.dumps({'pid': os.getpid(), 'ppid': os.getppid(), 'warm': WARM_ALREADY}) + '\\n')\n"
        "def test_answer():\n"
        "    assert answer() == 42\n")
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "WARM", "PYTEST_ADDOPTS")}
    env.update(XDG_RUNTIME_DIR=str(home), PYTHONPATH=str(library), REPORT=str(tmp_path / "report.jsonl"),
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", WARM="1")
    yield Folder(work, library, home, tmp_path / "report.jsonl", env)
    for pid in warm_servers(home):
        with contextlib.suppress(ProcessLookupError):  # a run is in its server's group, gone with it
            os.killpg(pid, signal.SIGKILL)  # a server and its runs left here: the test has failed; end them anyway
    shutil.rmtree(home, ignore_errors=True)


class Folder:
    def __init__(self, work, library, home, report, env):
        self.work, self.library, self.home, self.report, self.env = work, library, home, report, env

    def run(self, *args, warm=True, **kwargs):
        """One `make test`-like run: the warm checker (preloading warmlib) or plain `python -m pytest`."""
        command = ([sys.executable, str(WARM), "--preload", "warmlib", "--", *args] if warm
                   else [sys.executable, "-m", "pytest", *args])
        return subprocess.run(command, cwd=self.work, env=kwargs.pop("env", self.env), capture_output=True,
                              text=True, timeout=300, **kwargs)

    def runs(self) -> list[dict]:
        return [json.loads(line) for line in self.report.read_text().splitlines()] if self.report.exists() else []


def wait_until(condition, seconds=SETTLE):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def summary(result) -> list[str]:
    """pytest's report lines without the run's duration and progress column."""
    return [line.split(" in ")[0].split("  ")[0] for line in result.stdout.splitlines() if line.strip()]


def test_runs_are_forked_warm_see_every_edit_and_say_what_plain_pytest_says(folder):
    plain = folder.run(warm=False)
    first, second = folder.run(), folder.run()
    assert plain.returncode == first.returncode == second.returncode == 0, first.stdout + first.stderr
    assert summary(first) == summary(second) == summary(plain) == [".", "1 passed"]
    (server,) = warm_servers(folder.home)
    runs = folder.runs()
    assert [run["warm"] for run in runs] == [False, True, True]  # plain, then both runs forked warm
    assert runs[1]["ppid"] == runs[2]["ppid"] == server and runs[1]["pid"] != runs[2]["pid"]

    (folder.work / "answer.py").write_text("def answer():\n    return 41\n")  # an edit: the next run sees it
    broken, broken_plain = folder.run(), folder.run(warm=False)
    assert broken.returncode == broken_plain.returncode == 1
    assert summary(broken) == summary(broken_plain)
    assert "assert 41 == 42" in broken.stdout
    (folder.work / "answer.py").write_text("def answer():\n    return 42\n")
    assert folder.run().returncode == 0
    assert warm_servers(folder.home) == [server]


def test_exit_statuses_and_a_killed_run_reach_the_caller_as_the_shell_reports_them(folder):
    (folder.work / "tests" / "test_exit.py").write_text(
        "import os, signal\n"
        "def test_exit():\n"
        "    if os.environ.get('HOW') == 'exit':\n"
        "        os._exit(3)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n")
    for how, plain_status, warm_status in (("exit", 3, 3), ("kill", -signal.SIGKILL, 128 + signal.SIGKILL)):
        env = dict(folder.env, HOW=how)
        assert folder.run(warm=False, env=env).returncode == plain_status
        assert folder.run(env=env).returncode == warm_status
    assert len(warm_servers(folder.home)) == 1  # the server outlived its runs' deaths


LOOP = ("import pathlib\n"
        "def test_forever():\n"
        "    pathlib.Path(__import__('os').environ['REPORT'] + '.looping').write_text('yes')\n"
        "    while True:\n"
        "        pass\n")


def _sigint(disposition):
    """A child's start as a terminal (SIG_DFL) or a background job (SIG_IGN) would give it, whatever this
    suite's own process was started with (a suite started by `cmd &` in a script has SIGINT ignored)."""
    return lambda: signal.signal(signal.SIGINT, disposition)


def _loop_and_interrupt(folder, started_with=signal.SIG_DFL, wait=60):
    """Start a warm run of a test that loops forever, press Ctrl-C once it loops; the client's output, or None if
    it was still running `wait` seconds later (then it is still running: the caller ends it)."""
    (folder.work / "tests" / "test_loop.py").write_text(LOOP)
    looping = Path(str(folder.report) + ".looping")
    client = subprocess.Popen([sys.executable, str(WARM), "--preload", "warmlib", "--"],
                              cwd=folder.work, env=folder.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, preexec_fn=_sigint(started_with))
    try:
        assert wait_until(looping.exists, 120), "the looping test never started"
    except AssertionError:
        client.kill()
        raise
    client.send_signal(signal.SIGINT)
    try:
        output, _ = client.communicate(timeout=wait)
    except subprocess.TimeoutExpired:
        return client, None
    return client, output


def _interrupted(folder, client, output) -> None:
    if output is None:
        states = _signal_states([client.pid, *warm_servers(folder.home)])
        client.kill()
        pytest.fail("Ctrl-C did not end the run within 60 s\n" + states)
    assert client.returncode == 2, output  # pytest's "interrupted"
    assert "KeyboardInterrupt" in output
    (server,) = warm_servers(folder.home)
    assert _runs(server) == []  # the interrupted run is gone, not spinning on


def test_ctrl_c_interrupts_the_forked_run_as_it_interrupts_pytest(folder):
    _interrupted(folder, *_loop_and_interrupt(folder))


def test_ctrl_c_interrupts_a_run_whose_server_a_client_ignoring_it_started(folder):
    # The first run came from a background job (SIGINT ignored): the server it started inherited that. A run for a
    # later client in a terminal must still stop at Ctrl-C (it did not: the run kept the server's SIG_IGN).
    assert folder.run(preexec_fn=_sigint(signal.SIG_IGN)).returncode == 0
    (server,) = warm_servers(folder.home)
    _interrupted(folder, *_loop_and_interrupt(folder))
    assert warm_servers(folder.home) == [server]


def test_a_client_that_ignores_sigint_keeps_its_run_going_as_plain_pytest_would(folder):
    client, output = _loop_and_interrupt(folder, started_with=signal.SIG_IGN, wait=2)
    try:
        assert output is None, output  # still running, as a `python -m pytest` that ignores SIGINT would be
        servers = warm_servers(folder.home)  # the server, and the run (a fork of it, with its command line)
        (server,) = [pid for pid in servers
                     if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) not in servers]
        assert len(_runs(server)) == 1  # the run loops on
    finally:
        client.kill()  # a client gone ends its run (and a failed check above leaves no client waiting)
        client.wait()
    assert wait_until(lambda: not _runs(server))


def _runs(server: int) -> list[str]:
    """The runs a warm server has forked and not yet reaped (the pids of its children)."""
    return Path(f"/proc/{server}/task/{server}/children").read_text().split()


def _signal_states(pids: list[int]) -> str:
    """Each process (and its children), with the /proc fields that say where a signal went."""
    lines, seen = [], set()
    while pids:
        pid = pids.pop()
        if pid in seen:
            continue
        seen.add(pid)
        proc = Path(f"/proc/{pid}")
        try:
            status = dict(line.split(":", 1) for line in (proc / "status").read_text().splitlines() if ":" in line)
            wchans = [(task / "wchan").read_text() for task in (proc / "task").iterdir()]
            pids += [int(child) for task in (proc / "task").iterdir() for child in (task / "children").read_text().split()]
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
        except OSError as gone:
            lines.append(f"{pid}: {gone}")
            continue
        fields = " ".join(f"{key}={status.get(key, '').strip()}"
                          for key in ("State", "Threads", "SigQ", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))
        lines.append(f"{pid} {cmd}\n    {fields} wchan={wchans}")
    return "\n".join(lines)


def test_a_library_changed_on_disk_gets_a_new_server(folder):
    folder.run()
    (old,) = warm_servers(folder.home)
    library = folder.library / "warmlib.py"
    library.write_text("VALUE = 2\n")  # an upgrade: the warm copy in the server is stale
    stamp = time.time() + 5
    os.utime(library, (stamp, stamp))
    result = folder.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert wait_until(lambda: old not in warm_servers(folder.home))
    (new,) = warm_servers(folder.home)
    assert new != old and folder.runs()[-1] == {**folder.runs()[-1], "ppid": new, "warm": True}


def test_stop_or_a_removed_folder_ends_the_server(folder, tmp_path):
    folder.run()
    assert len(warm_servers(folder.home)) == 1
    subprocess.run([sys.executable, str(WARM), "--preload", "warmlib", "--stop"], cwd=folder.work, env=folder.env,
                   check=True, timeout=60)
    assert wait_until(lambda: not warm_servers(folder.home))
    assert folder.run().returncode == 0  # a run after a stop starts a new one
    assert len(warm_servers(folder.home)) == 1
    moved = tmp_path / "moved"
    folder.work.rename(moved)  # the folder gone (deleted, or moved elsewhere)
    assert wait_until(lambda: not warm_servers(folder.home))


@pytest.mark.parametrize("setting", ["CI=true", "WARM=0", "shared socket folder"])
def test_ci_warm_0_or_an_unsafe_socket_folder_run_plain_pytest_and_start_nothing(folder, setting):
    env = dict(folder.env)
    if setting == "shared socket folder":
        folder.home.joinpath(f"kit-warm-{os.getuid()}").mkdir(mode=0o777)
        os.chmod(folder.home / f"kit-warm-{os.getuid()}", 0o777)  # anyone could plant a socket there
    else:
        name, value = setting.split("=")
        env[name] = value
    result = folder.run(env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = folder.runs()
    assert run["warm"] is False and run["ppid"] == os.getpid()  # pytest ran in the runner's own process
    assert warm_servers(folder.home) == []
    assert not list(folder.home.rglob("*.sock"))

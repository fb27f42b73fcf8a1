"""The zygote: a fresh interpreter that imports torch once and forks one child for each part of a submission.

One fork per child: the zygote unshares a PID namespace just for that fork and steps back into
its own right after, so the child is PID 1 of a fresh namespace without an intermediate process
(a second fork and exit of a torch-sized process cost ~10 ms of CPU per submission). The zygote
is the child's parent: it reaps it and tells the grader how it ended ({"sandbox_exit": ...} on the
call socket, whose other end it keeps until then).

The zygote hands the grader a pidfd for the child, so the grader can kill it with no pid-reuse
race and know when it is gone. Killing the child (PID 1 of its namespace) kills everything it
started, and it dies if the zygote dies.

Grader side: Zygote (spawns it, asks it for children) and Child (one live child). Zygote side:
main(), run by `python -m grader.sandbox -` (its request on stdin). What each child does before it serves calls is
grader/sandbox/confinement.py; what the zygote does once before its first child, grader/sandbox/startup.py.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable

from grader.lesson import LessonSpec
from grader.running import protocol
from grader.sandbox import DEFAULT_CONFIG, SandboxConfig, lending, startup, transport
from grader.sandbox.confinement import (KIT_ROOT, PR_SET_PDEATHSIG, ChildPaths, confine, is_root, own_ipc, own_network,
                                        seccomp_program, slot_uid, view_plan)

# Linux constants (include/uapi); same values on x86_64 and aarch64.
CLONE_NEWPID, PR_SET_CHILD_SUBREAPER = 0x20000000, 36


# --------------------------------------------------------------------------- grader side


class SandboxUnavailable(RuntimeError):
    """The zygote is not running: an engine fault, never blamed on a submission."""


class SandboxRefused(SandboxUnavailable):
    """The start-up check found that a sandboxed child could not read what it must import: grading
    would turn the machine's fault into students' lost points, so nothing is graded."""


class Zygote:
    """A fresh interpreter that imports torch once and forks one child per request.

    It is spawned, not forked from the grader, so it holds nothing the grader has loaded, whatever
    was imported before. Each worker slot gets its own control socket (no locking between slots).
    """

    def __init__(self, *, slots: int, config: SandboxConfig = DEFAULT_CONFIG,
                 entry: str = "grader.running.executor", install: str | None = "grader.running.forbidden",
                 preload: tuple[str, ...] = (), extra_path: tuple[str, ...] = (), lesson):
        self.config, self.slots = config, slots
        # The grader's stand-ins are never in the zygote (every child would hold them): a child is lent
        # each one alone, with the first call that needs it (SandboxTransport), and from then on
        # answers no call of a graded name it implements.
        self.standins = lending.of_lesson(lesson) if install else None
        self._ctrl, theirs = [], []
        for _ in range(slots):
            mine, other = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._ctrl.append(mine)
            theirs.append(other)
        # The lesson crosses as plain data (Lesson.spec()): names, the forbidden policy, lazy imports, limits.
        spec = {"entry": entry, "install": install, "preload": list(preload),
                "fds": [s.fileno() for s in theirs], "config": asdict(config), "lesson": lesson.spec().to_json()}
        # A minimal environment: the grader's (CI tokens, credentials) must never reach student code,
        # whose error messages end up in its feedback.
        env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TZ") if k in os.environ}
        # One intra-op thread: a forked child of a process whose thread pool started would hang.
        # MALLOC_ARENA_MAX: each thread's 64 MB malloc arena would count against RLIMIT_AS.
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", MALLOC_ARENA_MAX="2",
                   MPLBACKEND="Agg",
                   PYTHONPATH=os.pathsep.join([str(KIT_ROOT), *extra_path]))
        # The request goes through a pipe, not the command line: every child is a fork of the zygote, and a
        # student's code can read its own /proc/self/cmdline (the lesson's forbidden policy, the kit's paths).
        self.process = subprocess.Popen(
            [sys.executable, "-s", "-m", "grader.sandbox", SPEC_ON_STDIN],
            pass_fds=spec["fds"], env=env, cwd=str(KIT_ROOT), stdin=subprocess.PIPE,
        )
        try:
            self.process.stdin.write(json.dumps(spec).encode())
        except OSError:
            pass  # it died at start: wait_ready says so
        finally:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        for s in theirs:
            s.close()
        self._ready: set[int] = set()
        self._lock = threading.Lock()
        self.view: dict = {}  # the start-up check's findings and verdict, once ready

    def wait_ready(self, slot: int = 0, timeout: float | None = None) -> None:
        """Block until the zygote has imported everything (it answers a ping on `slot`'s socket), at most
        `timeout` seconds (the config's start_timeout)."""
        with self._lock:
            if slot in self._ready:
                return
            ctrl = self._ctrl[slot]
            ctrl.settimeout(self.config.start_timeout if timeout is None else timeout)
            try:
                socket.send_fds(ctrl, [b'{"ping": 1}'], [])
                msg = ctrl.recv(1 << 16)
            except (OSError, socket.timeout) as exc:
                raise SandboxUnavailable(f"the sandbox zygote did not start ({exc}); run "
                                         "`python -m grader.sandbox --check` to see why") from None
            finally:
                ctrl.settimeout(None)
            if not msg:
                raise SandboxUnavailable("the sandbox zygote exited while starting; run "
                                         "`python -m grader.sandbox --check` to see why")
            self.view = json.loads(msg)["view"]
            if self.view["refused"]:
                raise SandboxRefused(self.view["refused"])
            self._ready.add(slot)

    def spawn(self, slot: int, *, scratch: Path, output_fd: int, timeout: float) -> "Child":
        """Fork a child for `slot`, confined to `scratch`, writing its stdout/stderr to output_fd; the zygote
        answers within `timeout` seconds (the run's spawn_timeout: a kept zygote may have been started by another)."""
        self.wait_ready(slot)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            request = {"scratch": str(scratch), "uid": slot_uid(self.config, slot)}
            ctrl = self._ctrl[slot]
            socket.send_fds(ctrl, [json.dumps(request).encode()], [theirs.fileno(), output_fd])
            ctrl.settimeout(timeout)
            try:
                msg, fds, _, _ = socket.recv_fds(ctrl, 4096, 2)
            finally:
                ctrl.settimeout(None)
        except OSError as exc:
            mine.close()
            raise SandboxUnavailable(f"the sandbox zygote is not answering ({exc})") from None
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        if not msg:
            mine.close()
            raise SandboxUnavailable("the sandbox zygote is gone")
        reply = json.loads(msg)
        child = Child(sock=mine, pid=int(reply.get("pid", -1)), pidfd=fds[0] if fds else -1)
        if child.pidfd < 0 and child.pid > 0:
            child.starts[child.pid] = _start_time(child.pid)
        return child

    def close(self) -> None:
        for s in self._ctrl:
            s.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# What the grader alone enforces, whichever zygote forks a run's children: the transport reads these from the
# run's own config (grader/sandbox/transport.py), and the zygote process never looks at them. Every other field
# of SandboxConfig is the zygote's (what it sets on each child it forks), so a new field is one too unless added here.
GRADER_SIDE_FIELDS = ("call_timeout", "import_timeout", "module_budget", "spawn_timeout", "start_timeout", "output_tail_bytes",
                      "reply_bytes", "replies_bytes", "file_replies_bytes", "fatal_faults_per_module")


class KeptZygotes:
    """Zygotes kept alive from one grading run to the next in this process.

    The nbgrader step grades each notebook with a run of its own; without this, every notebook would pay a
    zygote's start (a torch import and the start-up check, ~3.5 s of CPU) for ~0.2 s of grading. A run takes a
    zygote started for the same lesson and the same limits on its children (GRADER_SIDE_FIELDS aside: those are
    the run's own) with at least its slots, if it is still alive, so consecutive runs are graded as one class run
    grades its rows: a fresh child forked per submission, its own scratch folder, and a zygote no child can write
    to. A run that met an engine fault closes its zygote (`give_back`), so a broken one never grades the next
    notebook. At most `limit` are kept (each holds ~250 MB): the least recently taken goes first. `close` ends
    them all (the zygotes also die with this process).
    """

    def __init__(self, limit: int = 2) -> None:
        self._kept: dict[str, Zygote] = {}  # least recently taken first
        self.limit = limit
        self.started = 0  # zygotes started so far: how many runs could not reuse one

    def take(self, *, slots: int, config: SandboxConfig, lesson) -> Zygote:
        children = {k: v for k, v in asdict(config).items() if k not in GRADER_SIDE_FIELDS}
        key = json.dumps([children, lesson.spec().to_json()], sort_keys=True)
        zygote = self._kept.pop(key, None)
        if zygote is not None and zygote.process.poll() is None and zygote.slots >= slots:
            self._kept[key] = zygote
            return zygote
        if zygote is not None:
            zygote.close()
        while len(self._kept) >= self.limit:
            self._kept.pop(next(iter(self._kept))).close()
        self.started += 1
        self._kept[key] = Zygote(slots=slots, config=config, lesson=lesson)
        return self._kept[key]

    def give_back(self, zygote: Zygote, *, healthy: bool) -> None:
        """The end of a run that took `zygote`: kept for the next run if the run ended `healthy` (no engine
        fault, no exception: either may be the zygote's), otherwise closed and forgotten."""
        if not healthy:
            self._kept = {key: kept for key, kept in self._kept.items() if kept is not zygote}
            zygote.close()

    def pids(self) -> set[int]:
        """The process ids of the zygotes kept alive now (a caller checking for leftovers expects these)."""
        return {zygote.process.pid for zygote in self._kept.values() if zygote.process.poll() is None}

    def close(self) -> None:
        while self._kept:
            self._kept.popitem()[1].close()


@dataclass
class Child:
    """One live student child as the grader sees it."""

    sock: socket.socket
    pid: int = -1  # host pid of the student child (PID 1 of its own namespace)
    pidfd: int = -1
    layers: dict = field(default_factory=dict)
    served: set = field(default_factory=set)  # modules this child has already answered calls into
    lent: set = field(default_factory=set)  # the stand-ins it was sent (grader/sandbox/lending.py)
    module: str | None = None  # the contract module whose calls it answers (transport.call_many: only that one's)
    rules: dict = field(default_factory=dict)  # parameter name -> (binding rule, its number), of the rules it was sent
    rules_sent: int = 0  # binding rules sent to it (grader/sandbox/transport.py, _as_sent): the next one's number
    starts: dict = field(default_factory=dict)  # pid -> start time, checked before a kill by pid

    def running(self) -> bool:
        """Whether the child is surely still running (False where this cannot be told: no pidfd, no /proc)."""
        if self.pidfd >= 0:
            # A pidfd becomes readable when its process has exited.
            return not select.select([self.pidfd], [], [], 0)[0]
        state = _state(self.pid) if self.pid > 0 and _start_time(self.pid) == self.starts.get(self.pid) else None
        return state is not None and state not in ("Z", "X")

    def kill(self) -> None:
        """SIGKILL the child and wait until it is gone (bounded)."""
        fd, pid = self.pidfd, self.pid
        with contextlib.suppress(ProcessLookupError, OSError):
            if fd >= 0:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            elif pid > 0 and _start_time(pid) == self.starts.get(pid):  # no pidfd: never a reused pid
                os.kill(pid, signal.SIGKILL)
        if fd >= 0:
            # A pidfd becomes readable when its process has exited.
            select.select([fd], [], [], 5.0)
            os.close(fd)
        elif pid > 0 and _start_time(pid) == self.starts.get(pid):
            _wait_gone(pid, 5.0)
        self.pidfd = -1
        self.sock.close()


def _wait_gone(pid: int, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = _state(pid)
        if state is None or state in ("Z", "X"):
            return
        time.sleep(0.01)


def _state(pid: int) -> str | None:
    """The process's state letter (R, S, Z...), None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pidfd_open(pid: int) -> int:
    """A pidfd, or -1 where the kernel (< 5.3) or a container's seccomp profile has none."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return -1


# --------------------------------------------------------------------------- zygote side


@dataclass(frozen=True)
class ChildSetup:
    """What the zygote gives every child it forks. Fixed once the zygote is ready; the start-up
    check's child, forked before the warm-up, gets it without the precompiled seccomp filter."""

    config: SandboxConfig
    lesson: LessonSpec  # what the executor needs of the lesson (names), as plain data
    entry: ModuleType  # the executor (grader/running/executor.py)
    arm: Callable[[str], None] | None  # grader/running/forbidden.py's arm(scratch): installs the audit hook
    libc: ctypes.CDLL
    own_pidns: int  # an fd of the zygote's own PID namespace; -1 when children get no namespace of their own
    view_plan: list  # confinement.view_plan() of this zygote: applied in each child before it drops root
    paths: ChildPaths  # the import path and what Landlock lets a child read, found once
    seccomp: bytes | None = None  # the filter compiled once; None (compiled in the child) until the warm-up is done


SPEC_ON_STDIN = "-"  # the zygote's one argument: its request comes on stdin (read_spec)


def read_spec() -> dict:
    """The zygote's request, read from stdin; stdin is /dev/null from then on, for it and every child."""
    spec = json.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return spec


def main(spec: dict) -> None:
    """The zygote's life: import, switch library attention off, check and warm up, then fork one
    child per request on any slot's control socket until the grader closes them all."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    import importlib
    import torch

    torch.set_num_threads(1)  # before any op: keep this process single-threaded for fork
    startup.skip_absent_device_seed_stacks(torch)
    config = SandboxConfig(**{k: tuple(v) if k == "layers" else v for k, v in spec["config"].items()})
    lesson = LessonSpec.from_json(spec["lesson"])
    entry = importlib.import_module(spec["entry"])
    # Library attention is switched off here, once, before any child exists; `arm` arms each child.
    arm = (importlib.import_module(spec["install"]).prepare(lesson.forbidden, kit_root=str(KIT_ROOT),
                                                            shipped=lesson.kit_files)
           if spec["install"] else None)
    for name in spec["preload"]:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    own_pidns = _own_pid_namespace() if "pidns" in config.layers and is_root() else -1
    setup = ChildSetup(config=config, lesson=lesson, entry=entry, arm=arm, libc=libc, own_pidns=own_pidns,
                       view_plan=view_plan() if slot_uid(config, 0) is not None else [], paths=ChildPaths.find())
    zygote_pid = os.getpid()
    # Forked before the warm-up, so the check runs beside it and its child has imported less than
    # any student child will have: what it can import, they can.
    lazy = list(lesson.lazy_imports)
    probe = startup.start_probe(config, lazy, fork=functools.partial(_fork_child, ctrls=[], setup=setup,
                                                                     zygote_pid=zygote_pid))
    startup.warm_up(torch)
    startup.warm_up_executor(entry, lesson=lesson)
    # The zygote imports them for every child: a correct call that first needs one (torch.broadcast_shapes
    # loads sympy, ~0.3 s idle and seconds on a loaded machine) must not run into its call's time limit and
    # lose points. Imported while the check's child runs, not after its verdict: that child was forked
    # before, so it still proves a child could import them itself, and a refusal stops the run either way.
    for name in lazy:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    view = startup.finish_probe(probe, setup.view_plan)
    if "seccomp" in config.layers:
        setup = dataclasses.replace(setup, seccomp=seccomp_program(me=1))
    # Everything alive now is shared with every child: frozen, the collector never walks (and so
    # never writes to, copying on write) those pages in a child.
    import gc

    gc.collect()
    gc.freeze()
    # Huge pages are asked for once config.huge_pages_after children were forked (0: now), and made while the
    # zygote waits between forks (below): copying that no child waits for.
    collapsing = _huge_pages(libc) if config.huge_pages_after <= 0 else []
    forks = 0
    # The zygote reaps every child itself, with wait(), so each child's CPU time is counted (getrusage
    # of whoever waits for the zygote); as a subreaper it also gets anything a child left behind.
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # a SIGCHLD wakes the select below
    signal.signal(signal.SIGCHLD, lambda *_: None)
    ctrls = [socket.socket(fileno=fd) for fd in spec["fds"]]
    live: dict[int, int] = {}  # pid -> the zygote's end of that child's call socket (for its exit report)
    while ctrls:
        ready, _, _ = select.select([*ctrls, wake_r], [], [], 0 if collapsing else None)
        if not ready and collapsing:
            _collapse(libc, *collapsing.pop())  # nothing asked of the zygote: the next piece, then look again
            continue
        for ctrl in ready:
            if ctrl is wake_r:
                with contextlib.suppress(OSError):
                    os.read(wake_r, 512)  # only a wake-up: the reaping is below
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(ctrl, 4096, 2)
            except OSError:
                msg, fds = b"", []
            if not msg:
                ctrls.remove(ctrl)
                ctrl.close()
                continue
            request = json.loads(msg)
            if "ping" in request:
                ctrl.send(json.dumps({"view": view}).encode())
                continue
            pid, pidfd = _fork_child(request, fds, ctrls=ctrls, setup=setup, zygote_pid=zygote_pid)
            forks += 1
            if forks == config.huge_pages_after:
                collapsing = _huge_pages(libc)
            with contextlib.suppress(OSError):
                socket.send_fds(ctrl, [json.dumps({"pid": pid}).encode()], [pidfd] if pidfd >= 0 else [])
            if pidfd >= 0:
                os.close(pidfd)
            sock_fd, out_fd = fds
            os.close(out_fd)
            if pid > 0:
                live[pid] = sock_fd  # kept until the child is reaped, then closed
            else:
                os.close(sock_fd)  # the grader sees the connection close: "failed to start"
        _reap(live)  # after every wake-up: a SIGCHLD, or a child that ended while we were busy


MADV_HUGEPAGE, MADV_COLLAPSE, HUGE_PAGE = 14, 25, 2 << 20
COLLAPSE_PIECE = 4 * HUGE_PAGE  # ~10 ms of copying: the longest a fork request waits behind one piece


def _huge_pages(libc) -> list[tuple[int, int]]:
    """Ask for the zygote's anonymous memory (~150 MB, mostly torch's) in 2 MB pages; returns the pieces
    (start, end) still to collapse into them, last first, for _collapse.

    fork() copies one page-table entry per 4 KB page of it for every child, and the child's exit
    frees them: ~37,000 entries. With huge pages that is ~75 entries, and a fork takes ~2 ms of the
    zygote's CPU instead of ~6.5 (a 2-core machine, 30 children each way). A child writing to a shared
    huge page copies only the 4 KB it writes (the kernel splits the mapping), so what children copy is
    unchanged. Best effort: a kernel without MADV_COLLAPSE (< 6.1) or with transparent huge pages off
    refuses, and nothing else changes."""
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    pieces = []
    for line in maps:
        fields = line.split()
        # Private, writable, anonymous (no file, or the brk heap): the memory fork copies entries for.
        if len(fields) < 5 or fields[1][:2] != "rw" or fields[1][3] != "p" or (len(fields) > 5 and fields[5] != "[heap]"):
            continue
        low, high = (int(x, 16) for x in fields[0].split("-"))
        low, high = -(-low // HUGE_PAGE) * HUGE_PAGE, high // HUGE_PAGE * HUGE_PAGE
        if high > low and libc.madvise(low, high - low, MADV_HUGEPAGE) == 0:
            pieces += [(start, min(start + COLLAPSE_PIECE, high)) for start in range(low, high, COLLAPSE_PIECE)]
    return pieces[::-1]


def _collapse(libc, start: int, end: int) -> None:
    """Make one piece of the advised memory huge pages now (MADV_COLLAPSE), rather than whenever the
    kernel's background scan gets to it. A refusal (no memory to spare, a kernel < 6.1) changes nothing."""
    libc.madvise(start, end - start, MADV_COLLAPSE)


def _own_pid_namespace() -> int:
    try:
        return os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


def _fork_child(request, fds, *, ctrls, setup: ChildSetup, zygote_pid: int) -> tuple[int, int]:
    """Fork one student child; returns (pid, pidfd), or (-1, -1) if the fork failed.

    For a new PID namespace the zygote unshares one just for this fork: the child it forks next is
    PID 1 there. Right after, setns() puts the zygote's later children back into its own namespace."""
    libc = setup.libc
    pidns = setup.own_pidns >= 0 and libc.unshare(CLONE_NEWPID) == 0
    try:
        pid = os.fork()
    except OSError:
        pid = -1
    if pid == 0:
        try:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if not pidns and os.getppid() != zygote_pid:
                os._exit(71)  # the zygote died before the line above: nobody would stop us
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for c in ctrls:
                c.close()
            sock_fd, out_fd = fds
            sock = socket.socket(fileno=sock_fd)
            layers = {"pidns": pidns, "netns": own_network(setup.config, libc), "ipcns": own_ipc(setup.config, libc)}
            try:
                _child(request, sock, out_fd, setup, layers)
            except BaseException as exc:  # a setup step failed: say which, rather than die silently
                with contextlib.suppress(BaseException):
                    protocol.send_message(sock, {"setup_error": f"{type(exc).__name__}: {exc}"[:500]})
        finally:
            os._exit(70)
    if pidns and libc.setns(setup.own_pidns, CLONE_NEWPID) != 0:
        # Every later child would land in this one's namespace (and fail once it is gone): stop, so
        # the grader reports an engine fault instead of grading with a broken sandbox.
        os._exit(72)
    return pid, (_pidfd_open(pid) if pid > 0 else -1)


def _reap(live: dict[int, int]) -> None:
    """Reap every ended child; tell the grader how each student child ended, on its call socket."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock_fd = live.pop(pid, None)
        if sock_fd is None:
            continue  # something a child left behind, or a child whose report went already
        with contextlib.suppress(OSError), socket.socket(fileno=sock_fd) as sock:
            # Never block the zygote: a child that filled the socket loses its exit report, and the
            # grader then sees the connection close instead.
            sock.setblocking(False)
            protocol.send_message(sock, {"sandbox_exit": {"code": os.waitstatus_to_exitcode(status)}})


def _child(request, sock, out_fd, setup: ChildSetup, layers: dict) -> None:
    """A forked child's life: every layer on, then the start-up check, or the calls of one submission."""
    scratch = request["scratch"]
    confine(scratch=scratch, uid=request.get("uid"), out_fd=out_fd, keep_fd=sock.fileno(), config=setup.config,
            libc=setup.libc, layers=layers, view=setup.view_plan, seccomp=setup.seccomp, arm=setup.arm,
            paths=setup.paths)
    if "probe" in request:  # the start-up check, run exactly where student code would run
        protocol.send_message(sock, {"probe": startup.probe_child(request["probe"]["imports"]), "layers": layers})
        os._exit(0)
    loader = setup.entry.ModuleLoader(scratch, isolated=False, lesson=setup.lesson)
    protocol.send_message(sock, {"hello": {"layers": layers}})
    transport.serve(sock, setup.entry.execute, loader)

"""The sandbox: student code runs only in children forked from a zygote that never held a secret.

Process tree (as root; without root the layers that need it are skipped and recorded):

    grader ──spawns──► zygote  (fresh interpreter: torch, numpy, grader.protocol/execute/forbidden;
                          │      nothing else. Its heap has no hidden test, no reference, no expected
                          │      output, no stand-in to find; library attention is switched off in it.)
                          └─fork─► student child = PID 1 of a new PID namespace, in a new network
                                   namespace; rlimits, uid drop, Landlock, seccomp, then
                                   a loop: recv call ─► execute() ─► send result

One fork per child: the zygote unshares a PID namespace just for that fork and steps back into
its own right after, so the child is PID 1 of a fresh namespace without an intermediate process
(a second fork and exit of a torch-sized process cost ~10 ms of CPU per submission). The zygote
is the child's parent: it reaps it and tells the grader how it ended ({"sandbox_exit": ...} on the
call socket, whose other end it keeps until then).

The grader talks to each student child over its own socket (grader/protocol.py frames, no pickle).
The zygote hands the grader a pidfd for the child, so the grader can kill it with no pid-reuse
race and know when it is gone. Killing the child (PID 1 of its namespace) kills everything it
started, and it dies if the zygote dies.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from grader import protocol
from grader.lesson import LESSON_ENV

KIT_ROOT = Path(__file__).resolve().parent.parent

# Linux constants (include/uapi); same values on x86_64 and aarch64.
CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWNS, CLONE_THREAD = 0x40000000, 0x20000000, 0x00020000, 0x00010000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER, PR_SET_SECCOMP = 1, 38, 36, 22
SECCOMP_MODE_FILTER = 2
SYS_LANDLOCK = {"create": 444, "add_rule": 445, "restrict": 446}
# Exit statuses the child uses for limits it hit (a student's os._exit could fake them, but only to
# describe its own failure differently).
EXIT_FILE_LIMIT, EXIT_CPU_LIMIT = 213, 214


@dataclass(frozen=True)
class SandboxConfig:
    """Limits for one student child. Every field can be tightened in tests."""

    call_timeout: float = 5.0  # wall seconds for one call (import included)
    submission_budget: float = 60.0  # wall seconds for all calls of one submission
    spawn_timeout: float = 10.0  # wall seconds for a fresh child to say hello
    memory_bytes: int = 768 << 20  # RLIMIT_AS: torch with one thread plus a forward fits
    cpu_seconds: int = 20  # RLIMIT_CPU: catches a busy loop even if the wall clock is generous
    max_open_files: int = 64
    max_file_bytes: int = 32 << 20  # RLIMIT_FSIZE: caps files *and* the captured stdout/stderr
    max_processes: int = 256  # RLIMIT_NPROC for the slot's own uid (threads count too)
    output_tail_bytes: int = 2000  # output_tail() length; kept out of results (paths in it vary by run)
    uid_base: int = 64000  # worker slot k runs as uid/gid uid_base + k when the grader is root
    fatal_faults_per_module: int = 2  # after this many deaths on first use of a module, fail it fast
    scratch_quota_bytes: int = 128 << 20  # a tmpfs per worker slot (as root): a disk-filling loop stops here
    # What the child may send back, header and arrays together; 0 keeps the protocol's own caps. A
    # grading run takes both from the lesson's data (`limits.toml` beside its rubric).
    reply_bytes: int = 0  # one call's answer
    replies_bytes: int = 0  # all the answers of one submission (the grader keeps them until it is scored)
    layers: tuple[str, ...] = ("pidns", "netns", "rlimits", "uid", "landlock", "seccomp", "quota")


DEFAULT_CONFIG = SandboxConfig()


def error_header(kind: str, message: str) -> dict:
    """The result header for a call the child could not answer (the same shape execute() uses)."""
    return {"error": {"type": kind, "message": message, "traceback": ""}, "forbidden": []}


def is_root() -> bool:
    return os.geteuid() == 0


def slot_uid(config: SandboxConfig, slot: int) -> int | None:
    return config.uid_base + slot if is_root() and "uid" in config.layers else None


def enterable_temp_dir() -> str:
    """The temporary folder, or a system one when the sandbox's unprivileged uid could not enter it
    (TMPDIR under a 0700 folder such as pytest's or /root's): scratch copies must be reachable."""
    base = os.path.realpath(tempfile.gettempdir())
    if not is_root() or _closed_ancestor(os.path.join(base, "x")) is None:
        return base
    for candidate in ("/tmp", "/var/tmp", "/dev/shm"):
        real = os.path.realpath(candidate)
        if os.path.isdir(real) and _closed_ancestor(os.path.join(real, "x")) is None:
            return real
    raise RuntimeError(f"no temporary folder that the sandbox's unprivileged uid can enter ({base} is not): "
                       "set TMPDIR to a folder whose every parent is world-executable (chmod o+x)")


def prepare_scratch(path: Path, uid: int | None) -> None:
    """Give the scratch copy to the slot's uid (it is the only place the child may write)."""
    if uid is None:
        return
    # The parent only needs to be traversable, not listable, by the sandbox uid. A stack, not
    # os.walk (which recurses once per folder level): a deep tree costs no Python recursion.
    folders = [os.fspath(path)]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):  # e.g. a path too long: that entry stays root's
                        os.lchown(entry.path, uid, uid)
                        if entry.is_dir(follow_symlinks=False):
                            folders.append(entry.path)
        except OSError:
            continue
    os.lchown(path, uid, uid)
    os.chmod(path, 0o700)


def mount_quota(folder: Path, config: SandboxConfig) -> bool:
    """Mount a size-limited tmpfs on `folder` (root only): scratch copies made inside it cannot fill the disk."""
    if not (is_root() and "quota" in config.layers):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"size={config.scratch_quota_bytes},mode=0711".encode()
    return libc.mount(b"tmpfs", str(folder).encode(), b"tmpfs", 0, options) == 0


def unmount_quota(folder: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(str(folder).encode(), 2)  # MNT_DETACH: never blocks on a busy mount


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
                 entry: str = "grader.execute", install: str | None = "grader.forbidden",
                 preload: tuple[str, ...] = (), extra_path: tuple[str, ...] = ()):
        self.config = config
        # The grader's stand-ins are never in the zygote (every child would hold them): each child gets
        # their source with the first call that needs them (SandboxTransport), and from then on answers
        # no call of a part they implement.
        self.standins = _lesson_standins() if install else None
        self._ctrl, theirs = [], []
        for _ in range(slots):
            mine, other = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._ctrl.append(mine)
            theirs.append(other)
        spec = {"entry": entry, "install": install, "preload": list(preload),
                "fds": [s.fileno() for s in theirs], "config": asdict(config)}
        # A minimal environment: the grader's (CI tokens, credentials) must never reach student code,
        # whose error messages end up in its feedback. The lesson's name is no secret: the zygote
        # needs it to load the same lesson as the grader.
        env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TZ", LESSON_ENV) if k in os.environ}
        # One intra-op thread: a forked child of a process whose thread pool started would hang.
        # MALLOC_ARENA_MAX: each thread's 64 MB malloc arena would count against RLIMIT_AS.
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", MALLOC_ARENA_MAX="2",
                   MPLBACKEND="Agg",
                   PYTHONPATH=os.pathsep.join([str(KIT_ROOT), *extra_path]))
        self.process = subprocess.Popen(
            [sys.executable, "-s", "-m", "grader.sandbox", json.dumps(spec)],
            pass_fds=spec["fds"], env=env, cwd=str(KIT_ROOT), stdin=subprocess.DEVNULL,
        )
        for s in theirs:
            s.close()
        self._ready: set[int] = set()
        self._lock = threading.Lock()
        self.view: dict = {}  # the start-up check's findings and verdict, once ready

    def wait_ready(self, slot: int = 0, timeout: float = 60.0) -> None:
        """Block until the zygote has imported everything (it answers a ping on `slot`'s socket)."""
        with self._lock:
            if slot in self._ready:
                return
            ctrl = self._ctrl[slot]
            ctrl.settimeout(timeout)
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

    def spawn(self, slot: int, *, scratch: Path, output_fd: int) -> "Child":
        """Fork a child for `slot`, confined to `scratch`, writing its stdout/stderr to output_fd."""
        self.wait_ready(slot)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            request = {"scratch": str(scratch), "uid": slot_uid(self.config, slot)}
            ctrl = self._ctrl[slot]
            socket.send_fds(ctrl, [json.dumps(request).encode()], [theirs.fileno(), output_fd])
            ctrl.settimeout(self.config.spawn_timeout)
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


@dataclass
class Child:
    """One live student child as the grader sees it."""

    sock: socket.socket
    pid: int = -1  # host pid of the student child (PID 1 of its own namespace)
    pidfd: int = -1
    layers: dict = field(default_factory=dict)
    served: set = field(default_factory=set)  # modules this child has already answered calls into
    holds: frozenset = frozenset()  # parts the stand-ins it was sent implement: it answers none of their calls
    has_standins: bool = False
    starts: dict = field(default_factory=dict)  # pid -> start time, checked before a kill by pid

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
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)


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


class SandboxTransport:
    """`call(header, arrays) -> (header, arrays)` into a sandboxed child of one submission.

    The child is spawned lazily and respawned after any fault, so a part that hangs or crashes
    costs only the calls that hit it. `faults` lists what happened, in words, for the result's notes;
    `isolation` which layers were active. `close()` leaves no process behind.
    """

    def __init__(self, *, zygote: Zygote, slot: int, scratch: Path, config: SandboxConfig | None = None):
        self.zygote, self.slot, self.scratch = zygote, slot, Path(scratch)
        self.config = config or zygote.config
        self.faults: list[str] = []
        self.fault_types: list[str] = []
        self.isolation: dict = {}
        self._child: Child | None = None
        self._import_faults: dict[str, int] = {}
        self._condemned: dict[str, dict] = {}
        self._spent = 0.0
        self._received = 0  # bytes of every answer so far, counted against config.replies_bytes
        self._replies_full = False  # set once an answer would have passed config.replies_bytes
        self._no_meta = False  # set once a child had to answer an inspect again on CPU
        self._output = tempfile.TemporaryFile()  # unnamed: nothing else can open it

    # -- public

    # Requests sent ahead of the answers stay under this many bytes: far below a socket's buffer, so
    # sending ahead never waits for a child that is busy writing answers nobody reads yet.
    PIPELINE_BYTES = 64 << 10

    def call(self, header: dict, arrays: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
        return self.call_many([(header, arrays)])[0]

    def call_many(self, calls: list[tuple[dict, dict]]) -> list[tuple[dict, dict]]:
        """The answers to several calls, in order, exactly as if they were made one at a time.

        Requests go ahead to the child and the answers come back in order, each within its own
        time limit, counted from when the child could start on it: the child goes from one call to
        the next without waiting for the grader, and neither side sleeps and wakes once per call.
        A fault answers the call that met it; calls sent after it go again, to a fresh child. An
        answer that needs no child (a condemned module, a used-up budget) is given only when no
        call is in flight, since a call ahead may still condemn the module or use up the budget."""
        answers: list = [None] * len(calls)
        todo = deque(range(len(calls)))  # not sent to the current child yet
        flight: deque = deque()  # (index, module, header as sent, bytes, sent at), in the order answered
        flight_bytes = 0
        answered_at = 0.0  # when the child last answered: it starts on the next call then
        while todo or flight:
            while todo:
                i = todo[0]
                header, arrays = calls[i]
                module = str(header.get("module", "")) if isinstance(header, dict) else ""
                if self._child is not None and module in self._child.holds:
                    # This child holds a working implementation of the part this call grades (the
                    # grader's stand-ins): the call goes to a fresh child, once the calls ahead are answered.
                    if flight:
                        break
                    self._stop_child()
                if not flight:
                    early = self._answer_without_child(module)
                    if early is None and self._child is None:
                        start = time.monotonic()
                        fault = self._spawn()
                        self._spent += time.monotonic() - start
                        if fault is not None:
                            early = self._after_fatal(module, fault, first_use=True), {}
                    if early is not None:
                        answers[i] = early
                        todo.popleft()
                        continue
                if self._no_meta and isinstance(header, dict) and header.get("op") == "inspect":
                    header = dict(header, no_meta=True)
                header = self._with_standins(header, module)
                parts = protocol.encode(header, arrays)
                size = sum(len(part) for part in parts)
                if flight and flight_bytes + size > self.PIPELINE_BYTES:
                    break
                sent_at = time.monotonic()
                try:
                    # A child that never reads must not block the send either (a call bigger than the socket buffer).
                    self._child.sock.settimeout(self.config.call_timeout)
                    protocol.send_parts(self._child.sock, parts)
                except (TimeoutError, OSError) as exc:
                    if flight:
                        break  # the child is stuck on, or died in, a call ahead: its answer says which
                    todo.popleft()
                    answers[i] = self._send_failed(module, exc, first_use=module not in self._child.served)
                    continue
                todo.popleft()
                flight.append((i, module, header, size, sent_at))
                flight_bytes += size
            if not flight:
                continue
            i, module, sent_header, size, sent_at = flight.popleft()
            flight_bytes -= size
            if self._spent >= self.config.submission_budget:
                # Used up by the calls ahead: this one and those behind it are answered without the child.
                self._stop_child()
                answer, retry = None, True
            else:
                start = max(sent_at, answered_at)
                answer, retry = self._receive(module, sent_header, deadline=start + self.config.call_timeout)
                answered_at = time.monotonic()
                self._spent += answered_at - start
            if answer is not None:
                answers[i] = answer
            if self._child is None:  # stopped or replaced: what was in flight goes again, to the next child
                todo.extendleft(reversed(([i] if retry else []) + [entry[0] for entry in flight]))
                flight.clear()
                flight_bytes = 0
        return answers

    def output_tail(self) -> str:
        """The last bytes the student's code printed (stdout and stderr together)."""
        self._output.flush()
        size = os.fstat(self._output.fileno()).st_size
        n = min(size, self.config.output_tail_bytes)
        data = os.pread(self._output.fileno(), n, size - n) if n else b""
        return data.decode("utf-8", "replace")

    def close(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child = None
        self._output.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- internals

    def _with_standins(self, header, module):
        """The call as sent: with the stand-ins' source if it needs them and this child has none yet."""
        standins = self.zygote.standins
        if not standins or not isinstance(header, dict) or self._child.has_standins:
            return header
        if module in standins["needed_by"] or header.get("standins") or header.get("over_standins"):
            self._child.holds, self._child.has_standins = standins["implements"], True
            return dict(header, standins_source=standins["source"])
        return header

    def _answer_without_child(self, module):
        if module in self._condemned:
            return dict(self._condemned[module]), {}
        if self._spent >= self.config.submission_budget:
            message = (f"the submission used up its {self.config.submission_budget:g} s time budget; "
                       "remaining calls were not run")
            if "Budget" not in self.fault_types:  # said once, and the run's status says "time-budget"
                self.faults.append(f"Timeout: {message}")
                self.fault_types.append("Budget")
            return self._fault("Timeout", message, record=False), {}
        if self._replies_full:
            return self._fault("OversizedReply", f"the submission's answers passed the "
                                                 f"{_mb(self.config.replies_bytes)} the grader keeps for one "
                                                 "submission; remaining calls were not run", record=False), {}
        return None

    def _reply_limits(self) -> protocol.Limits:
        """The caps for the next answer: one call's, and what is left of the submission's."""
        cap = self.config.reply_bytes or protocol.DEFAULT_LIMITS.max_total_bytes
        if self.config.replies_bytes:
            cap = max(0, min(cap, self.config.replies_bytes - self._received))
        return protocol.Limits(max_header_bytes=min(cap, protocol.DEFAULT_LIMITS.max_header_bytes), max_total_bytes=cap)

    def _oversized(self, exc: "protocol.OversizedFrame") -> dict:
        if self.config.reply_bytes and exc.declared > self.config.reply_bytes:
            return self._fault("OversizedReply", f"one answer was over the {_mb(self.config.reply_bytes)} a call may "
                                                 f"send back (this assignment's answers are far smaller): {exc}")
        if self.config.replies_bytes and self._received + exc.declared > self.config.replies_bytes:
            self._replies_full = True
            return self._fault("OversizedReply", f"the submission's answers passed the "
                                                 f"{_mb(self.config.replies_bytes)} the grader keeps for one "
                                                 f"submission: {exc}")
        return self._fault("OversizedReply", f"the process answered with a message over the protocol's caps ({exc})")

    def _send_failed(self, module, exc, first_use):
        fault = self._timed_out() if isinstance(exc, TimeoutError) else self._death_or_protocol(exc)
        return self._after_fatal(module, fault, first_use), {}

    def _timed_out(self) -> dict:
        return self._fault("Timeout", f"no answer within {self.config.call_timeout:g} s (an infinite loop, a sleep, "
                                      "or very slow code); the process was stopped")

    def _receive(self, module, header, *, deadline):
        """(answer, retry) for the oldest call in flight; after a fault or a retry, self._child is None."""
        child = self._child
        first_use = module not in child.served
        try:
            reply, out, size = protocol.recv_frame(child.sock, limits=self._reply_limits(), deadline=deadline)
        except TimeoutError:
            return (self._after_fatal(module, self._timed_out(), first_use), {}), False
        except protocol.OversizedFrame as exc:
            return (self._after_fatal(module, self._oversized(exc), first_use), {}), False
        except (protocol.ProtocolError, OSError) as exc:
            return (self._after_fatal(module, self._death_or_protocol(exc), first_use), {}), False
        self._received += size
        if "sandbox_exit" in reply:
            return (self._after_fatal(module, self._classify_exit(reply["sandbox_exit"]), first_use), {}), False
        problem = reply_problem(reply, out)
        if problem:
            # Student code can write to its own end of the socket: a reply the executor never writes is
            # the submission's fault. The stream can no longer be trusted, so the child goes.
            return (self._after_fatal(module, self._fault(
                "ProtocolError", f"the process sent an answer the grader's executor never writes "
                                 f"(forged or damaged: {problem})"), first_use), {}), False
        error = reply.get("error") if isinstance(reply, dict) else None
        if isinstance(error, dict) and _is_out_of_memory(error):
            return (self._after_fatal(module, self._fault(
                "OutOfMemory", f"ran out of memory (limit {self.config.memory_bytes >> 20} MB per submission)"
                               f": {str(error.get('message', ''))[:200]}"), first_use), {}), False
        child.served.add(module)
        if isinstance(reply, dict) and reply.pop("retry_without_meta", False) \
                and isinstance(header, dict) and not header.get("no_meta"):
            # The child built an inspected module on the meta device and something of it outlived the
            # call (grader/execute.py, _inspect_on_meta): answer from a fresh child that builds on CPU,
            # as every later inspect of this submission will. Not a fault of the submission.
            self._no_meta = True
            self._stop_child()
            return None, True
        return (reply, out), False

    def _stop_child(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child = None

    def _spawn(self):
        self._output.truncate(0)
        self._output.seek(0)
        # SandboxUnavailable propagates: a dead zygote is the engine's fault, not the submission's.
        child = self.zygote.spawn(self.slot, scratch=self.scratch, output_fd=self._output.fileno())
        deadline = time.monotonic() + self.config.spawn_timeout
        try:
            # Sent by the grader's own code before any student code runs: small, whatever the caps.
            hello, _ = protocol.recv_message(child.sock, limits=_HELLO_LIMITS, deadline=deadline)
            if "sandbox_exit" in hello:
                self._child = child
                return self._classify_exit(hello["sandbox_exit"])
            if "setup_error" in hello:
                self._child = child
                # Shown in the student's feedback: what failed, not where on this machine.
                return self._fault("Crashed", f"the sandbox could not set up the process: "
                                              f"{without_paths(str(hello['setup_error']))}")
            child.layers = dict(hello["hello"]["layers"])
        except (TimeoutError, protocol.ProtocolError, OSError, KeyError, TypeError, ValueError) as exc:
            child.kill()
            return self._fault("Crashed", f"the sandboxed process failed to start ({without_paths(str(exc))})")
        self._child = child
        if not self.isolation:
            self.isolation = dict(child.layers)
        return None

    def _death_or_protocol(self, exc):
        if isinstance(exc, protocol.ConnectionClosed):
            return self._fault("Crashed", "the process closed its connection without answering")
        return self._fault("ProtocolError", f"the process answered with a malformed message ({exc})")

    def _classify_exit(self, info) -> dict:
        code = info.get("code") if isinstance(info, dict) else None
        if not isinstance(code, int):
            return self._fault("Crashed", "the process ended")
        if code in (EXIT_FILE_LIMIT, -signal.SIGXFSZ):
            return self._fault("Crashed", f"wrote more than {self.config.max_file_bytes >> 20} MB "
                                          "(printed output or files); the process was stopped")
        if code in (EXIT_CPU_LIMIT, -signal.SIGXCPU):
            return self._fault("Timeout", f"used more than {self.config.cpu_seconds} s of CPU time")
        if code >= 0:
            return self._fault("Crashed", f"the student's code ended the process (exit status {code}, e.g. "
                                          "os._exit or sys.exit at import); later calls use a fresh process")
        sig = -code
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGKILL:
            return self._fault("Crashed", "the process was killed (SIGKILL), most likely for using too much "
                                          "memory or CPU")
        return self._fault("Crashed", f"the process died from signal {name}")

    def _fault(self, kind: str, message: str, record: bool = True) -> dict:
        if self._child is not None:
            self._child.kill()
            self._child = None
        if record:
            self.faults.append(f"{kind}: {message}")
            self.fault_types.append(kind)
        return error_header(kind, message)

    def _after_fatal(self, module, header, first_use):
        if module and first_use:
            self._import_faults[module] = self._import_faults.get(module, 0) + 1
            if self._import_faults[module] >= self.config.fatal_faults_per_module:
                condemned = error_header(header["error"]["type"], header["error"]["message"] +
                                         f" (repeatedly on first use of {module}.py: its other calls were "
                                         "not retried)")
                self._condemned[module] = condemned
        return header


def without_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part (`/home/x/kit/grader/run.py` -> `…/run.py`):
    for messages about the engine that end up in a student's feedback."""
    return re.sub(r"(?<![\w.~])(?:[A-Za-z]:)?[/\\][^\s'\"]*[/\\]([^\s/\\'\"]*)", r"…/\1", text)


_HELLO_LIMITS = protocol.Limits(max_header_bytes=1 << 16, max_arrays=0, max_total_bytes=0)


def _mb(n: int) -> str:
    return f"{n / 2**20:g} MB"


def reply_problem(header: dict, arrays: dict) -> str | None:
    """What is wrong with a call's answer, by the shape grader/execute.py gives it; None if nothing.

    Every field the scorer reads is checked for its type (and every array it names for being
    there), so a forged or damaged answer is refused here, as the submission's fault, instead of
    tripping the scorer later. Keys this check does not know pass through untouched."""
    def error_problem(key):
        value = header.get(key)
        if value is None:
            return None
        if not isinstance(value, dict) or not all(isinstance(value.get(k), str) for k in ("type", "message")) \
                or not all(isinstance(value.get(k, ""), str) for k in ("traceback", "stage")):
            return f"{key!r} is not an error record"
        return None

    def names_array(value):
        return isinstance(value, str) and value in arrays

    for key in ("error", "grad_error"):
        if problem := error_problem(key):
            return problem
    outputs = header.get("outputs", [])
    if not isinstance(outputs, list):
        return "'outputs' is not a list"
    for i, desc in enumerate(outputs):
        kind = desc.get("kind") if isinstance(desc, dict) else None
        if kind == "tensor":
            if not names_array(desc.get("array")) or not isinstance(desc.get("dtype", ""), str):
                return f"output {i} names no array that came with the answer"
        elif kind == "value":
            if not isinstance(desc.get("type"), str) or not isinstance(desc.get("value"), (bool, int, float, str)):
                return f"output {i} is not a plain value"
        elif kind not in ("none", "other", "missing") or not isinstance(desc.get("type", ""), str):
            return f"output {i} is not an output record"
    grads = header.get("grads", {})
    if not isinstance(grads, dict) or not all(v is None or names_array(v) for v in grads.values()):
        return "'grads' does not name arrays that came with the answer"
    for key in ("forbidden", "forbidden_call"):
        names = header.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return f"{key!r} is not a list of names"
    inspect = header.get("inspect", {})
    if not isinstance(inspect, dict) or not all(isinstance(inspect.get(k, {}), dict)
                                                for k in ("parameters", "trainable", "buffers", "attrs")):
        return "'inspect' is not an inspection record"
    if not isinstance(header.get("retry_without_meta", False), bool):
        return "'retry_without_meta' is not a flag"
    return None


def _lesson_standins() -> dict:
    """The lesson's stand-ins as the transport sends them: source, the modules whose calls need them,
    and the parts they implement (the lesson's forbidden.toml, [standins])."""
    from grader import forbidden

    table = forbidden.load_policy()["standins"]
    return {"source": forbidden.LESSON_POLICY.with_name(table.get("file", "standins.py")).read_text(),
            "needed_by": frozenset(table.get("needed_by", ())), "implements": frozenset(table.get("implements", ()))}


def _is_out_of_memory(error: dict) -> bool:
    kind, message = str(error.get("type", "")), str(error.get("message", ""))
    return kind == "MemoryError" or "can't allocate memory" in message or "not enough memory" in message


# --------------------------------------------------------------------------- zygote side


def _zygote_main(spec: dict) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    import importlib
    import torch

    torch.set_num_threads(1)  # before any op: keep this process single-threaded for fork
    skip_absent_device_seed_stacks(torch)
    config = SandboxConfig(**{k: tuple(v) if k == "layers" else v for k, v in spec["config"].items()})
    entry = importlib.import_module(spec["entry"])
    # Library attention is switched off here, once, before any child exists; `install` arms each child.
    install = importlib.import_module(spec["install"]).prepare(kit_root=str(KIT_ROOT)) if spec["install"] else None
    for name in spec["preload"]:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    own_pidns = _own_pid_namespace() if "pidns" in config.layers and is_root() else -1
    global _VIEW_PLAN
    _VIEW_PLAN = view_plan() if slot_uid(config, 0) is not None else []
    # Forked before the warm-up, so the check runs beside it and its child has imported less than
    # any student child will have: what it can import, they can.
    lazy = lazy_imports()
    probe = _start_probe(config, entry, install, libc, own_pidns, lazy)
    _warm_up(torch)
    _warm_up_executor(entry)
    view = _finish_probe(probe)
    # Once the check has proved a child could import them itself, the zygote imports them for every
    # child: a correct call that first needs one (torch.broadcast_shapes loads sympy, ~0.3 s idle and
    # seconds on a loaded machine) must not run into its call's time limit and lose points.
    for name in lazy:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    global _PRECOMPILED_SECCOMP
    if "seccomp" in config.layers:
        _PRECOMPILED_SECCOMP = seccomp_program(me=1)
    # Everything alive now is shared with every child: frozen, the collector never walks (and so
    # never writes to, copying on write) those pages in a child.
    import gc

    gc.collect()
    gc.freeze()
    _huge_pages(libc)
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
    zygote_pid = os.getpid()
    while ctrls:
        ready, _, _ = select.select([*ctrls, wake_r], [], [])
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
            pid, pidfd = _fork_child(request, fds, ctrls, config, entry, install, libc, own_pidns, zygote_pid)
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


_VIEW_PLAN: list = []  # view_plan() of this zygote: applied in each child before it drops root
PROBE_TIMEOUT = 45.0  # wall seconds for the start-up check (within Zygote.wait_ready's 60)


def _start_probe(config, entry, install, libc, own_pidns, imports):
    """Fork the start-up check's child: a sandboxed child like any other, as slot 0's uid."""
    folder = tempfile.mkdtemp(prefix="sandbox-check-", dir=enterable_temp_dir())
    os.chmod(folder, 0o711)
    scratch = os.path.join(folder, "scratch")
    os.mkdir(scratch)
    uid = slot_uid(config, 0)
    prepare_scratch(Path(scratch), uid)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    devnull = os.open(os.devnull, os.O_WRONLY)
    request = {"scratch": scratch, "uid": uid, "probe": {"imports": imports}}
    pid, pidfd = _fork_child(request, (theirs.fileno(), devnull), [], config, entry, install, libc, own_pidns,
                             os.getpid())
    if pidfd >= 0:
        os.close(pidfd)
    theirs.close()
    os.close(devnull)
    return {"pid": pid, "sock": mine, "folder": folder, "uid": uid, "started": time.monotonic()}


def _finish_probe(probe) -> dict:
    """The check's findings and verdict (what Zygote.view holds); its child is gone afterwards."""
    sock, pid = probe["sock"], probe["pid"]
    waited = time.monotonic()
    try:
        found, _ = protocol.recv_message(sock, deadline=probe["started"] + PROBE_TIMEOUT)
    except (TimeoutError, protocol.ProtocolError, OSError) as exc:
        found = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        sock.close()
        cpu = None
        if pid > 0:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                usage = os.wait4(pid, 0)[2]
                cpu = round(usage.ru_utime + usage.ru_stime, 3)
        shutil.rmtree(probe["folder"], ignore_errors=True)
    return {"refused": _verdict(found, probe["uid"]), "uid": probe["uid"],
            "covered": [cover for cover, _ in _VIEW_PLAN],
            "bound": [where for _, entries in _VIEW_PLAN for where, _ in entries],
            "probe": found.get("probe"), "layers": found.get("layers"),
            "seconds": round(time.monotonic() - probe["started"], 3), "cpu_seconds": cpu,
            "zygote_waited_seconds": round(time.monotonic() - waited, 3)}


MADV_HUGEPAGE, MADV_COLLAPSE, HUGE_PAGE = 14, 25, 2 << 20


def _huge_pages(libc) -> None:
    """Back the zygote's anonymous memory (~150 MB, mostly torch's) with 2 MB pages.

    fork() copies one page-table entry per 4 KB page of it for every child, and the child's exit
    frees them: ~37,000 entries, ~7 ms of CPU per child. With huge pages that is ~75 entries. A
    child writing to a shared huge page copies only the 4 KB it writes (the kernel splits the
    mapping), so what children copy is unchanged. Best effort: a kernel without MADV_COLLAPSE
    (< 6.1) or with transparent huge pages off refuses, and nothing else changes."""
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return
    for line in maps:
        fields = line.split()
        # Private, writable, anonymous (no file, or the brk heap): the memory fork copies entries for.
        if len(fields) < 5 or fields[1][:2] != "rw" or fields[1][3] != "p" or (len(fields) > 5 and fields[5] != "[heap]"):
            continue
        low, high = (int(x, 16) for x in fields[0].split("-"))
        low, high = -(-low // HUGE_PAGE) * HUGE_PAGE, high // HUGE_PAGE * HUGE_PAGE
        if high > low and libc.madvise(low, high - low, MADV_HUGEPAGE) == 0:
            libc.madvise(low, high - low, MADV_COLLAPSE)


def _own_pid_namespace() -> int:
    try:
        return os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


def _fork_child(request, fds, ctrls, config, entry, install, libc, own_pidns, zygote_pid) -> tuple[int, int]:
    """Fork one student child; returns (pid, pidfd), or (-1, -1) if the fork failed.

    For a new PID namespace the zygote unshares one just for this fork: the child it forks next is
    PID 1 there. Right after, setns() puts the zygote's later children back into its own namespace."""
    pidns = own_pidns >= 0 and libc.unshare(CLONE_NEWPID) == 0
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
            # A network namespace applies at once to whoever unshares it: the child takes its own.
            netns = "netns" in config.layers and is_root() and libc.unshare(CLONE_NEWNET) == 0
            layers = {"pidns": pidns, "netns": netns}
            try:
                _child(request, sock, out_fd, config, entry, install, libc, layers)
            except BaseException as exc:  # a setup step failed: say which, rather than die silently
                with contextlib.suppress(BaseException):
                    protocol.send_message(sock, {"setup_error": f"{type(exc).__name__}: {exc}"[:500]})
        finally:
            os._exit(70)
    if pidns and libc.setns(own_pidns, CLONE_NEWPID) != 0:
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


def skip_absent_device_seed_stacks(torch) -> None:
    """torch.manual_seed also queues a seed for CUDA, XPU and MTIA, formatting the caller's stack
    each time (linecache, a stat per frame: ~0.15 ms a call, ~15 ms per submission here). On a
    machine without such a device the queued seed can never run, so its stack is never shown:
    skip formatting it. Seeding itself is unchanged. (Callers that only need the CPU generator
    can use torch.default_generator.manual_seed instead.)"""
    import traceback
    import types

    for name in ("cuda", "xpu", "mtia"):
        device = getattr(torch, name, None)
        try:
            absent = device is not None and not device.is_available()
        except Exception:
            continue
        if absent and getattr(device, "traceback", None) is traceback:
            device.traceback = types.SimpleNamespace(format_stack=lambda *args, **kwargs: [])


def _warm_up(torch) -> None:
    """Run the kinds of ops the lesson uses once, so each child starts with warm dispatch paths.

    Generic layers on random data only: nothing here knows the assignment's answers.
    """
    nn = torch.nn
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(2, 3, 8, dtype=dtype, requires_grad=True)
        layers = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8), nn.LayerNorm(8)).to(dtype)
        a, b, c = nn.Linear(8, 24, bias=False).to(dtype)(x).chunk(3, dim=-1)
        a = a.view(2, 3, 2, 4).transpose(1, 2)  # (2, 2, 3, 4)
        s = a @ a.transpose(-2, -1) / 2.0
        s = s.masked_fill(torch.tril(torch.ones(3, 3)) == 0, float("-inf"))
        w = torch.softmax(s, dim=-1)
        y = (w @ a).transpose(1, 2).contiguous().view(2, 3, 8) + torch.einsum("bij,bjk->bik", b, c.transpose(1, 2)).sum()
        pos = torch.arange(3, dtype=dtype).unsqueeze(1) / (10000 ** (torch.arange(0, 8, 2, dtype=dtype) / 8))
        y = layers(y) + torch.cat([torch.sin(pos), torch.cos(pos)], dim=-1).repeat(1, 1)
        # A scalar, as the executor differentiates: backward(gradient) on a tensor would import
        # torch.fx's symbolic shapes and sympy (~0.3 s, ~34 MB that every fork would copy for nothing).
        y.sum().backward()
    torch.manual_seed(0)


# The warm-up runs the lesson's kinds of ops, but none of it is a working part of the assignment
# (wrong scale, wrong base, a positional table inside the block): every child inherits whatever of it
# stays in memory, and no part may find a working implementation of itself there.
_WARM_UP_MODULE = """
import math

import torch
import torch.nn as nn


def attend(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1) + 3)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ V, weights


def table(T, d):
    position = torch.arange(T, dtype=torch.float32).unsqueeze(1)
    rate = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(77.0) / d))
    t = torch.zeros(T, d)
    t[:, 0::2] = torch.sin(position * rate)
    t[:, 1::2] = torch.cos(position * rate)
    return t


class Heads(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h, self.d_k = h, d // h
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x, mask=None):
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.d_k).permute(2, 0, 3, 1, 4).unbind(0)
        ctx, _ = attend(q, k, v, mask)
        return self.out(ctx.transpose(1, 2).contiguous().reshape(B, T, d))


class Net(nn.Module):
    def __init__(self, d, h, d_ff=None, pre=False):
        super().__init__()
        self.h, self.pre = h, pre
        self.attn = Heads(d, h)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, d_ff or 4 * d), nn.GELU(), nn.Linear(d_ff or 4 * d, d), nn.Dropout(0.1))
        self.register_buffer("pe", table(16, d))

    def forward(self, x, mask=None):
        x = x + self.pe[: x.size(1)].to(x.dtype)
        if self.pre:
            x = x + self.attn(self.ln1(x), mask)
            return x + self.ffn(self.ln2(x))
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.ffn(x))


def boom(x):
    raise ValueError("warm-up")
"""


def _warm_up_executor(entry) -> None:
    """Run each kind of call once through the executor on a throwaway generic module (a small
    attention network, not the assignment: nothing here knows a test or an answer), so the code
    paths of the executor, the stand-ins and torch's kernels are warm in every child (~10 ms a child)."""
    import numpy as np

    folder = tempfile.mkdtemp(prefix="grader-zygote-")
    try:
        Path(folder, "zygote_warmup.py").write_text(_WARM_UP_MODULE)
        # meta_inspect: whatever torch loads lazily for an inspect built on the meta device is loaded
        # here once, not in every child (where a module imported during that build forces a retry).
        loader = entry.ModuleLoader(folder, isolated=True, meta_inspect=True)
        def numbers(*shape, dtype):  # varied values without numpy.random (a module no child needs)
            return np.sin(np.arange(np.prod(shape)) * 0.7).reshape(shape).astype(dtype)

        for dtype in ("float32", "float64"):
            x = numbers(2, 5, 8, dtype=dtype)
            q = numbers(2, 2, 5, 4, dtype=dtype)
            g = np.ones((2, 2, 5, 4), dtype)
            causal = np.tril(np.ones((5, 5), dtype))
            padding = np.ones((2, 1, 1, 5), dtype=bool)
            padding[1, ..., 3:] = False
            weights = {"ln1.weight": np.ones(8, dtype), "ffn.0.weight": numbers(32, 8, dtype=dtype),
                       "attn.out.weight": np.eye(8, dtype=dtype)}
            params = [{"name": n, "paths": [n], "array": f"p{i}"} for i, n in enumerate(weights)]
            net = {f"p{i}": w for i, w in enumerate(weights.values())}
            calls = []
            for mask in (None, causal, padding, causal.astype(bool), causal.astype(np.int64)):
                arrays = {"Q": q, "K": q, "V": q, "g": g} | ({} if mask is None else {"mask": mask})
                calls.append(({"op": "function", "module": "zygote_warmup", "name": "attend",
                               "args": [{"array": n} for n in ("Q", "K", "V", "mask") if n in arrays],
                               "grad_wrt": ["Q", "K", "V"], "grad_out": {"0": "g"}}, arrays))
                for pre in (False, True):
                    calls.append(({"op": "module", "module": "zygote_warmup", "cls": "Net", "init": [8, 2],
                                   "init_kwargs": {"pre": pre}, "dtype": dtype,
                                   "params": params, "args": [{"array": "x"}] + ([] if mask is None else [{"array": "mask"}]),
                                   "grad_wrt": ["x"], "grad_params": True, "grad_out": {"0": "x"}},
                                  {"x": x, **net, **({} if mask is None else {"mask": mask})}))
            calls += [
                ({"op": "function", "module": "zygote_warmup", "name": "table", "args": [12, 6]}, {}),
                ({"op": "function", "module": "zygote_warmup", "name": "boom", "args": [{"array": "x"}]}, {"x": x}),
                ({"op": "module", "module": "zygote_warmup", "cls": "Heads", "init": [8, 2], "dtype": dtype,
                  "params": [{"name": "out.weight", "paths": ["out.weight", "W_o.weight"], "array": "w"}],
                  "args": [{"array": "x"}, {"array": "mask"}]}, {"x": x, "w": np.eye(8, dtype=dtype), "mask": causal}),
            ]
            for header, arrays in calls:
                entry.execute(header, arrays, loader=loader)
        for init in ([8, 2], [512, 8]):
            entry.execute({"op": "inspect", "module": "zygote_warmup", "cls": "Net", "init": init,
                           "attrs": [{"name": "ffn", "paths": ["ffn"]}, {"name": "h", "paths": ["h"]},
                                     {"name": "pe", "paths": ["pe"]}, {"name": "W_q", "paths": ["W_q", "Wq"]}]},
                          {}, loader=loader)
    except Exception:  # a warm-up is an optimisation: never a reason not to start
        pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _child(request, sock, out_fd, config, entry, install, libc, layers):
    scratch = request["scratch"]
    uid = request.get("uid")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(devnull)
    os.close(out_fd)
    # Fresh line-buffered streams on the redirected fds: nothing printed waits in a buffer.
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    # Python ignores SIGXFSZ, and as PID 1 of its namespace the child would ignore a default action
    # too: a handler makes writing past RLIMIT_FSIZE (or CPU past RLIMIT_CPU) end it, as a stated fault.
    signal.signal(signal.SIGXFSZ, lambda *_: os._exit(EXIT_FILE_LIMIT))
    signal.signal(signal.SIGXCPU, lambda *_: os._exit(EXIT_CPU_LIMIT))
    # Nothing but stdio and the call socket stays open (no zygote control socket, no stray fd).
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)
    if _VIEW_PLAN and uid is not None:
        _enter_view(libc, _VIEW_PLAN)
    os.chdir(scratch)
    # Libraries that cache or write temporary files (matplotlib, tempfile) find a writable home here.
    os.environ.update(HOME=scratch, TMPDIR=scratch, MPLCONFIGDIR=os.path.join(scratch, ".config"))
    sys.path[:] = [scratch] + [p for p in sys.path if p and Path(p).resolve() != KIT_ROOT]
    layers["rlimits"] = "rlimits" in config.layers and _set_rlimits(config, uid)
    layers["uid"] = False
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        layers["uid"] = True
    # Re-armed after the uid change (which clears it): if the zygote dies, so do we.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    layers["landlock"] = "landlock" in config.layers and _landlock(libc, scratch) or 0
    if layers["landlock"]:
        # Landlock only allows: if the kit sits inside an allowed folder, its files stay readable.
        layers["landlock_hides_kit"] = not any(_contains(p, KIT_ROOT) for p in read_only_paths())
    # In its own PID namespace the child is PID 1, which the zygote's precompiled filter assumes.
    program = _PRECOMPILED_SECCOMP if layers["pidns"] else None
    layers["seccomp"] = "seccomp" in config.layers and _seccomp(libc, program)
    if install is not None:
        install(scratch)
    if "probe" in request:  # the start-up check, run exactly where student code would run
        protocol.send_message(sock, {"probe": _probe_child(request["probe"]["imports"]), "layers": layers})
        os._exit(0)
    loader = entry.ModuleLoader(scratch, isolated=False, meta_inspect=True)
    protocol.send_message(sock, {"hello": {"layers": layers}})
    _serve(sock, entry.execute, loader)


def _serve(sock, execute, loader):
    while True:
        try:
            header, arrays = protocol.recv_message(sock)
        except protocol.ConnectionClosed:
            os._exit(0)
        try:
            reply = execute(header, arrays, loader=loader)
        except MemoryError:
            reply = (error_header("MemoryError", "out of memory"), {})
        except SystemExit as exc:
            reply = (error_header("SystemExit", f"the code called sys.exit({exc.code!r})"), {})
        except BaseException as exc:  # the executor should catch; never let one call end the loop
            reply = (error_header(type(exc).__name__, str(exc)[:500]), {})
        try:
            protocol.send_message(sock, *reply)
        except (TypeError, ValueError) as exc:
            protocol.send_message(sock, error_header("ProtocolError", f"result could not be framed: {exc}"))


def _set_rlimits(config: SandboxConfig, uid) -> bool:
    limits = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, config.max_file_bytes),
        (resource.RLIMIT_NOFILE, config.max_open_files),
        (resource.RLIMIT_AS, config.memory_bytes),
    ]
    if uid is not None:  # NPROC never binds root, and for a shared uid it counts other processes too
        limits.append((resource.RLIMIT_NPROC, config.max_processes))
    for which, value in limits:
        resource.setrlimit(which, (value, value))
    # The soft limit sends SIGXCPU (reported as a timeout); the hard limit one second later kills.
    resource.setrlimit(resource.RLIMIT_CPU, (config.cpu_seconds, config.cpu_seconds + 1))
    return True


# -- Landlock (ABI >= 1; signal scoping from ABI 6). Linux uapi/linux/landlock.h.

class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 14, 1 << 15
_FILE_ONLY = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV


def landlock_abi(libc=None) -> int:
    libc = libc or ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(SYS_LANDLOCK["create"], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(abi, 0)


def read_only_paths() -> list[str]:
    """What a child may read: the interpreter, the libraries, a minimal /etc, a few devices."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             "/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf",
             "/dev/urandom", "/dev/random", "/dev/zero", "/proc/self", "/proc/cpuinfo",
             "/sys/devices/system/cpu"}  # torch reads the CPU topology lazily
    paths.update(os.path.dirname(p) for p in sys.path if p.endswith("site-packages"))
    return sorted(p for p in paths if p and os.path.exists(p) and not _under(p, KIT_ROOT, allow=sys.prefix))


def _contains(folder: str, path: Path) -> bool:
    real = Path(folder).resolve()
    return real == path or real in path.parents


def _under(path: str, root: Path, allow: str) -> bool:
    # The venv may live inside the kit's folder; the kit's own sources (grader/, solutions/) may not be read.
    real = Path(path).resolve()
    return (real == root or root in real.parents) and not (Path(allow).resolve() == real or
                                                            Path(allow).resolve() in real.parents)


# -- The child's view of the machine. The child runs as an unprivileged uid: a file it cannot read is
# a module it cannot import, and torch imports some only when an op first needs them (a correct
# torch.broadcast_shapes loads torch.fx's symbolic shapes and sympy). A kit checked out under a folder
# other users cannot enter (mktemp -d, a 0700 home, a Python under /root) would turn that into lost
# points. So, as root, each child gets a private mount namespace in which a small empty tmpfs covers
# each such folder and only what the child must read (read_only_paths) is bound back at its own path:
# paths are unchanged, and nothing else of the private folder (the kit's grader/, hidden tests,
# solutions/) exists there, with or without Landlock. The start-up check (_probe_child) proves the
# result as the sandbox uid, in the sandbox, before anything is graded.


def _others_may_enter(folder: str) -> bool:
    try:
        return bool(os.stat(folder).st_mode & 0o001)
    except OSError:
        return False


def _closed_ancestor(path: str) -> str | None:
    """The outermost folder above `path` that other users cannot enter, if any."""
    parts = Path(path).parts
    for i in range(1, len(parts)):
        folder = os.path.join(*parts[:i])
        if not _others_may_enter(folder):
            return folder
    return None


def view_plan(paths: list[str] | None = None) -> list[tuple[str, list[tuple[str, str]]]]:
    """[(folder to cover, [(path to bind back, its real source), ...]), ...] so that every one of
    `paths` (default: read_only_paths()) is reachable by a uid that may only enter folders open to
    all. Each path is bound back both where it is named and where it really is (a symlinked part)."""
    binds: dict[str, tuple[str, str]] = {}
    for path in paths if paths is not None else read_only_paths():
        real = os.path.realpath(path)
        for where in {os.path.abspath(path), real}:
            cover = _closed_ancestor(where)
            if cover is not None:
                binds[where] = (cover, real)
    plan: dict[str, list[tuple[str, str]]] = {}
    for where in sorted(binds):
        cover, real = binds[where]
        outer = next((c for c in plan if _inside(cover, c)), None)
        if outer is None:
            plan[cover] = []
            outer = cover
        if not any(_inside(where, bound) for bound, _ in plan[outer]):  # a bind is recursive
            plan[outer].append((where, real))
    return [(cover, entries) for cover, entries in plan.items()]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _enter_view(libc, plan) -> None:
    """Apply view_plan() in a private mount namespace of this (root, single-threaded) child."""
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    # Private first: nothing mounted below may propagate back to the machine's namespace.
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    # Opened in the new namespace (a bind's source must be in it) and before a cover hides them.
    sources = [[os.open(real, os.O_PATH | os.O_CLOEXEC) for _, real in entries] for _, entries in plan]
    try:
        for (cover, entries), fds in zip(plan, sources):
            _mount(libc, "tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=256,mode=0711")
            for (where, _), fd in zip(entries, fds):
                parent = cover
                for part in Path(where).relative_to(cover).parts[:-1]:
                    parent = os.path.join(parent, part)
                    if not os.path.isdir(parent):
                        os.mkdir(parent)
                        os.chmod(parent, 0o711)  # enter, not list
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.makedirs(where, exist_ok=True)
                else:
                    open(where, "a").close()
                # The source was opened before the cover hid it; its fd names it still.
                _mount(libc, f"/proc/self/fd/{fd}", where, None, MS_BIND | MS_REC)
    finally:
        for fds in sources:
            for fd in fds:
                os.close(fd)


def _mount(libc, source, target, fstype, flags, options=None) -> None:
    encode = lambda v: None if v is None else v.encode()  # noqa: E731
    if libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(options)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or ''} on {target}: {os.strerror(err)}")


def lazy_imports() -> list[str]:
    """Modules the lesson's calls make torch import lazily, from the lesson folder's lazy_imports.txt:
    the start-up check imports each in a fresh child, then the zygote imports them for every child."""
    from grader.lesson import load_lesson

    names: list[str] = []
    with contextlib.suppress(OSError):
        for line in (load_lesson().folder / "lazy_imports.txt").read_text(encoding="utf-8").splitlines():
            name = line.split("#", 1)[0].strip()
            if name and name not in names:
                names.append(name)
    return names


def _probe_child(imports: list[str]) -> dict:
    """Run in a sandboxed child, after every layer: the files on its import path it cannot read, and
    the lazily imported modules it cannot import. Every file is checked, not a sample: which module
    torch loads lazily next is open-ended."""
    import importlib

    start = time.perf_counter()
    roots = [p for p in sys.path[1:] if p and os.path.isdir(p)]  # sys.path[0] is the scratch copy
    unreadable, hidden, seen = [], [], 0
    stack = list(roots)
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            # File modes allow it (access() asks only them), yet it cannot be read: Landlock hides it.
            (hidden if os.access(folder, os.R_OK | os.X_OK) else unreadable).append(folder)
            continue
        for entry in entries:
            seen += 1
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":  # an unreadable .pyc only means its source is compiled again
                    stack.append(entry.path)
            elif not os.access(entry.path, os.R_OK) and os.path.exists(entry.path):
                unreadable.append(entry.path)
    interpreter = os.path.realpath(sys.executable)
    if not os.access(interpreter, os.R_OK | os.X_OK):
        unreadable.append(interpreter)
    failed = {}
    preloaded = [name for name in imports if name in sys.modules]  # nothing to prove for these: no child reads them
    for name in imports:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - any failure is the finding
            failed[name] = f"{type(exc).__name__}: {exc}"[:300]
    usage = resource.getrusage(resource.RUSAGE_SELF)  # since the fork: set-up, walk and imports
    return {"roots": roots, "files": seen, "unreadable": sorted(unreadable)[:20], "hidden": hidden,
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
            "unreadable_count": len(unreadable), "failed_imports": failed, "preloaded_imports": preloaded,
            "imported": [name for name in imports if name not in failed],
            "seconds": round(time.perf_counter() - start, 3)}


def _verdict(found: dict, uid) -> str:
    """'' when the child can read and import all it must; else the one message a run prints."""
    who = f"the sandbox's unprivileged uid ({uid})" if uid is not None else "the sandboxed child"
    if "setup_error" in found:
        covered = [cover for cover, _ in _VIEW_PLAN]
        remedy = (f" It must read what lies under {', '.join(covered)}, which other users may not enter: let them "
                  f"(`chmod o+x` on each), or keep the kit and its .venv in a folder they may enter."
                  if covered else "")
        return (f"{who} could not be started with its view of the machine ({found['setup_error']}).{remedy} "
                "`python -m grader.sandbox --check` shows the details. Nothing was graded.")
    if "probe" not in found:
        return (f"{who} did not finish the start-up check ({found.get('error', 'no answer')}); "
                "run `python -m grader.sandbox --check`. Nothing was graded.")
    probe = found["probe"]
    if probe["hidden"]:
        return (f"{who} may not read {', '.join(probe['hidden'][:3])}, on the import path of student code but "
                f"inside the kit's folder ({KIT_ROOT}), which the sandbox hides from student code: keep the "
                "environment in the kit's .venv or outside the kit's folder. Nothing was graded.")
    if probe["unreadable"]:
        shown = ", ".join(probe["unreadable"][:3])
        more = probe["unreadable_count"] - min(3, len(probe["unreadable"]))
        folder = os.path.commonpath(probe["unreadable"]) if len(probe["unreadable"]) > 1 else probe["unreadable"][0]
        return (f"{who} cannot read {shown}{f' and {more} more' if more > 0 else ''} on the import path of "
                f"student code, which would fail imports that torch makes during a call. Make them readable "
                f"to other users (`chmod -R o+rX {folder}`), or rebuild the environment (`rm -rf .venv && make "
                "setup`); `python -m grader.sandbox --check` lists them. Nothing was graded.")
    if probe["failed_imports"]:
        name, error = next(iter(probe["failed_imports"].items()))
        return (f"{who} cannot import {name} ({error}), which torch loads during this lesson's calls; "
                "`python -m grader.sandbox --check` shows the details. Nothing was graded.")
    return ""


def _landlock(libc, scratch: str) -> int:
    """Restrict the filesystem, TCP and signals. Returns the ABI used, 0 if unavailable."""
    abi = landlock_abi(libc)
    if abi < 1:
        return 0
    fs = (1 << 13) - 1  # EXECUTE .. MAKE_SYM (ABI 1)
    if abi >= 2:
        fs |= 1 << 13  # REFER
    if abi >= 3:
        fs |= _FS_TRUNCATE
    if abi >= 5:
        fs |= _FS_IOCTL_DEV
    attr = _RulesetAttr(fs, 0b11 if abi >= 4 else 0, 0b11 if abi >= 6 else 0)  # TCP bind+connect; signals
    size = ctypes.sizeof(attr) if abi >= 6 else 16
    ruleset = libc.syscall(SYS_LANDLOCK["create"], ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    try:
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        rules = [(p, read) for p in read_only_paths()]
        rules += [(os.devnull, _FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE), (scratch, fs)]
        for path, access in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if not os.path.isdir(path):
                    access &= _FILE_ONLY
                rule = _PathBeneath(access & fs, fd)
                if libc.syscall(SYS_LANDLOCK["add_rule"], ruleset, 1, ctypes.byref(rule), 0) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock rule for {path}")
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return 0
        if libc.syscall(SYS_LANDLOCK["restrict"], ruleset, 0) != 0:
            return 0
    finally:
        os.close(ruleset)
    return abi


def _seccomp_filter(me: int):
    """Deny new processes, exec, non-Unix sockets, ptrace and signals to others. Threads still work."""
    import pyseccomp as sc

    f = sc.SyscallFilter(defaction=sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    rules = [
        ("fork",), ("vfork",), ("execve",), ("execveat",), ("ptrace",), ("process_vm_readv",),
        ("process_vm_writev",), ("unshare",), ("setns",), ("mount",), ("umount2",), ("chroot",),
        ("pivot_root",), ("bpf",), ("perf_event_open",), ("userfaultfd",), ("kcmp",), ("tkill",),
        ("pidfd_open",), ("pidfd_send_signal",), ("pidfd_getfd",),
        ("clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0)),  # a new process, not a thread
        ("socket", sc.Arg(0, sc.NE, socket.AF_UNIX)),
        ("kill", sc.Arg(0, sc.NE, me)),
        ("tgkill", sc.Arg(0, sc.NE, me)),
    ]
    for name, *args in rules:
        with contextlib.suppress(Exception):  # a syscall unknown on this architecture
            f.add_rule(deny, name, *args)
    # glibc falls back from clone3 to clone on ENOSYS, where the flags can be inspected.
    with contextlib.suppress(Exception):
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    return f


def seccomp_program(me: int) -> bytes | None:
    """The filter compiled to BPF once (in the zygote), for a child whose pid will be `me`."""
    try:
        f = _seccomp_filter(me)
        with tempfile.TemporaryFile() as out:
            f.export_bpf(out)
            out.seek(0)
            return out.read()
    except Exception:
        return None


_PRECOMPILED_SECCOMP: bytes | None = None


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _seccomp(libc=None, program: bytes | None = None) -> bool:
    """Install the filter: a precompiled program when given (~0.1 ms), else compile it here (~10 ms)."""
    if program:
        libc = libc or ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(program, len(program))
        fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))  # struct sock_filter is 8 bytes
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 and \
                libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0:
            return True
    try:
        _seccomp_filter(os.getpid()).load()
    except Exception:
        return False
    return True


def check() -> dict:
    """Which layers work on this machine, and the start-up check's findings, as a grading run would
    see them (for `python -m grader.sandbox --check`)."""
    found = {"root": is_root(), "landlock_abi": landlock_abi(),
             "pyseccomp": _importable("pyseccomp"), "python": sys.executable}
    start = time.monotonic()
    try:
        with Zygote(slots=1) as zygote:
            try:
                zygote.wait_ready()
            except SandboxRefused:
                pass
            found["child_view"] = zygote.view or {"refused": "the sandbox zygote did not start"}
    except SandboxUnavailable as exc:
        found["child_view"] = {"refused": str(exc)}
    found["zygote_start_seconds"] = round(time.monotonic() - start, 3)
    return found


def _importable(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        report = check()
        print(json.dumps(report, indent=2))
        if report["child_view"]["refused"]:
            print(f"\nnot ready to grade: {report['child_view']['refused']}", file=sys.stderr)
            sys.exit(1)
    else:
        _zygote_main(json.loads(sys.argv[1]))
        # No interpreter teardown: the attention kernels switched off in this process are Python
        # objects held by the dispatcher for good, which must not outlive the interpreter's own end.
        os._exit(0)

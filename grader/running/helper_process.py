"""A trusted helper process of the grader with its own memory limit, answering one JSON line per request.

The static scan and the deliverables checks read untrusted files: a file built to make a parser blow up
must cost that file, not the grading run. Each runs in a helper started here, limited in address space
from outside (the worker may have threads, so no preexec_fn), asked over a pipe and waited on with a
deadline; when it runs out of memory or time it is killed, and the next request starts a fresh one.

Its time is CPU time, read from /proc: on a machine busy with other work a helper gets less of a core, and a
file it can read must not become one it could not (a deliverable left unchecked costs points). A helper that
waits rather than works is stopped by wall time too, WALL_FACTOR times its CPU allowance.
"""
from __future__ import annotations

import contextlib
import os
import resource
import select
import subprocess
import sys
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[2]
WALL_FACTOR = 10  # wall seconds per CPU second a helper may take: a core shared ten ways still answers
POLL = 0.1  # how often a waiting reader looks at the helper's CPU time


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU time a living process has used (all its threads), or None without /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


class LimitedHelper:
    """Start, ask and stop one helper (`python -s -m <module> <args>`) under `memory_bytes` of address space."""

    memory_bytes: int
    max_answer_bytes: int = 1 << 20
    last_cpu: float = 0.0  # CPU seconds the helper used for the last answer read

    def __init__(self):
        self._proc: subprocess.Popen | None = None

    def _command(self) -> list[str]:
        """The module and arguments the helper is started with."""
        raise NotImplementedError

    def _environment(self) -> dict[str, str]:
        """Variables set for the helper beyond the locale and PATH (the kit's root is always its path)."""
        return {}

    def cpu_used(self) -> float | None:
        """CPU seconds the helper's process has used since it started, to the nanosecond where the scheduler's
        statistics can be read (the bench times one answer of a few ms; /proc/PID/stat counts 10 ms ticks); None
        when no helper runs."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return None
        try:
            return sum(int(Path(task, "schedstat").read_text().split()[0])
                       for task in Path(f"/proc/{proc.pid}/task").iterdir()) / 1e9
        except (OSError, ValueError, IndexError):
            return cpu_seconds(proc.pid)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _helper(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TZ") if k in os.environ}
            env.update(PYTHONPATH=str(KIT_ROOT), MALLOC_ARENA_MAX="2", PYTHONDONTWRITEBYTECODE="1")
            env.update(self._environment())
            proc = subprocess.Popen([sys.executable, "-s", "-m", *self._command()],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    env=env, cwd=str(KIT_ROOT))
            # Set from outside, before the first request.
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (self.memory_bytes, self.memory_bytes))
            resource.prlimit(proc.pid, resource.RLIMIT_CORE, (0, 0))
            self._proc = proc
        return self._proc

    def _read_line(self, proc, seconds: float, *, since_wall: float | None = None,
                   since_cpu: float | None = None) -> bytes:
        """One answer line from `proc`, which may use `seconds` of CPU time since `since_cpu` (its CPU time when
        it was asked; now if not given) and WALL_FACTOR times that in wall time since `since_wall`: TimeoutError
        past either (an answer that came after more CPU than allowed too), OSError past max_answer_bytes.
        Where /proc cannot be read, `seconds` is wall time."""
        if proc is None:
            raise OSError("no helper")
        since_wall = time.monotonic() if since_wall is None else since_wall
        if since_cpu is None:
            since_cpu = cpu_seconds(proc.pid)
        wall_limit = seconds * (WALL_FACTOR if since_cpu is not None else 1)
        fd, answer = proc.stdout.fileno(), b""
        while not answer.endswith(b"\n"):
            remaining = since_wall + wall_limit - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if not select.select([fd], [], [], min(remaining, POLL))[0]:
                used = _used(proc, since_cpu)
                if used is not None and used > seconds:
                    raise TimeoutError
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk or len(answer) + len(chunk) > self.max_answer_bytes:
                raise OSError("the helper ended or answered too much")
            answer += chunk
        used = _used(proc, since_cpu)
        if used is not None and used > seconds:  # answered, but after more CPU than it may use
            raise TimeoutError
        self.last_cpu = used or 0.0
        return answer


def _used(proc, since_cpu: float | None) -> float | None:
    """CPU seconds `proc` has used since `since_cpu`; None without /proc."""
    now = None if since_cpu is None else cpu_seconds(proc.pid)
    return None if now is None else now - since_cpu

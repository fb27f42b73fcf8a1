"""A trusted helper process of the grader with its own memory limit, answering one JSON line per request.

The static scan and the deliverables checks read untrusted files: a file built to make a parser blow up
must cost that file, not the grading run. Each runs in a helper started here, limited in address space
from outside (the worker may have threads, so no preexec_fn), asked over a pipe and waited on with a
deadline; when it runs out of memory or time it is killed, and the next request starts a fresh one.
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


class LimitedHelper:
    """Start, ask and stop one helper (`python -s -m <module> <args>`) under `memory_bytes` of address space."""

    memory_bytes: int
    max_answer_bytes: int = 1 << 20

    def __init__(self):
        self._proc: subprocess.Popen | None = None

    def _command(self) -> list[str]:
        """The module and arguments the helper is started with."""
        raise NotImplementedError

    def _environment(self) -> dict[str, str]:
        """Variables set for the helper beyond the locale and PATH (the kit's root is always its path)."""
        return {}

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

    def _read_line(self, proc, deadline: float) -> bytes:
        """One answer line from `proc`, by `deadline` (TimeoutError), at most max_answer_bytes (OSError)."""
        if proc is None:
            raise OSError("no helper")
        fd, answer = proc.stdout.fileno(), b""
        while not answer.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(fd, 1 << 16)
            if not chunk or len(answer) + len(chunk) > self.max_answer_bytes:
                raise OSError("the helper ended or answered too much")
            answer += chunk
        return answer

"""The sandbox: student code runs only in children forked from a zygote that never held a secret.

Process tree (as root; without root the layers that need it are skipped and recorded):

    grader ──spawns──► zygote  (fresh interpreter: torch, numpy, grader.running.protocol/execute/forbidden and
                          │      this package; nothing else. Its heap has no hidden test, no reference,
                          │      no expected output, no stand-in to find; library attention is switched
                          │      off in it.)
                          └─fork─► student child = PID 1 of a new PID namespace, in new network and
                                   IPC namespaces, in its own copy of the submission; rlimits,
                                   uid drop, Landlock, seccomp, then
                                   a loop: recv call ─► execute() ─► send result

One file per part, in the order a call meets them:

    transport.py    the call socket, both ends: SandboxTransport (grader side: pipelined calls, time
                    limits, answer checks, faults in words) and serve() (the child's loop)
    lending.py      which of the grader's stand-ins a call needs, each one's own source, and which
                    child may answer a call (never one lent a stand-in of the name it grades)
    zygote.py       the zygote: Zygote (the grader's handle), its main loop, one fork per child in a
                    PID namespace of its own, reaping; Child (a live child, killed by pidfd)
    confinement.py  the layers around a child: its own copy of the submission, ownership and quota,
                    private mount view, rlimits, uid drop, Landlock, seccomp, network and IPC
                    namespaces, then the audit hook
    startup.py      what the zygote does once before its first child: warm-up, and the start-up
                    check (a child that proves it can read its import path and import what torch
                    loads lazily); SandboxRefused when it cannot
    __main__.py     `python -m grader.sandbox -` (how the grader starts a zygote, its request on stdin) and
                    `python -m grader.sandbox --check` (what this machine offers)
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxConfig:
    """Limits for one student child. Every field can be tightened in tests."""

    call_timeout: float = 5.0  # wall seconds for one call
    # Wall seconds for a module's first call in a child, which imports it (0: call_timeout, unless the lesson's
    # limits.toml [calls] import_seconds says more; grader/running/grade.py, with_lesson_limits): a file, or a notebook
    # whose every cell runs when each part's module is imported, may run a demo at its top level, which the student's
    # own `make test` waits for (held-out s47r: a notebook's last cell sleeping 6 s zeroed all four parts).
    import_timeout: float = 0.0
    # Wall seconds for all the calls into one of the submission's files (a part's module): a loop in one part
    # uses up that part's budget, never another's. A submission's calls take at most this times its files.
    module_budget: float = 60.0
    spawn_timeout: float = 10.0  # wall seconds for a fresh child to say hello
    # Wall seconds for the zygote to import torch and run its start-up check: 2-5 s on a quiet machine,
    # past 60 s for PyPI's CUDA build on Python 3.13 niced behind a load of 6-9. A slow start is not a
    # broken one (a zygote that dies is seen at once): only a start that never ends is cut here.
    start_timeout: float = 300.0
    # Memory a child may map beyond what it inherits from the zygote (RLIMIT_AS is set to the zygote's
    # mapping plus this): torch's own libraries cost nothing, whichever build (CPU ~0.64 GB mapped, CUDA
    # ~3.2 GB). A correct submission needs under 32 MB more (measured: 16 MB fails torch's lazy imports).
    memory_bytes: int = 256 << 20
    cpu_seconds: int = 20  # RLIMIT_CPU: catches a busy loop even if the wall clock is generous
    max_open_files: int = 64
    max_file_bytes: int = 32 << 20  # RLIMIT_FSIZE: caps files *and* the captured stdout/stderr
    max_processes: int = 256  # RLIMIT_NPROC for the slot's own uid (threads count too)
    output_tail_bytes: int = 2000  # output_tail() length; kept out of results (paths in it vary by run)
    uid_base: int = 64000  # worker slot k runs as uid/gid uid_base + k when the grader is root
    fatal_faults_per_module: int = 2  # after this many deaths on first use of a module, fail it fast
    scratch_quota_bytes: int = 128 << 20  # a tmpfs per worker slot (as root): a disk-filling loop stops here
    # Files and folders on that tmpfs (its nr_inodes). Empty folders cost no bytes, so without this cap only the
    # kernel's default (half the RAM's pages: ~3 million) stopped a loop of mkdir, after ~2.6 GB of the kernel's
    # own memory (~1 KB each), outside every limit of the child's. An honest submission's scratch holds ~20 (its
    # files twice: intake's copy and the child's); intake takes at most 500 files, so 20,000 is ten times the
    # most a handed-in tree can need twice, and costs the kernel ~20 MB at most. Without root (no tmpfs), a child
    # that leaves more than this many behind is named for it the same way.
    scratch_inodes: int = 20_000
    # What the child may send back, header and arrays together; 0 keeps the protocol's own caps. A
    # grading run takes both from the lesson's data (`limits.toml` beside its rubric).
    reply_bytes: int = 0  # one call's answer
    replies_bytes: int = 0  # all the answers of one submission (the grader keeps them until it is scored)
    # All the answers into one of the submission's files (a part's module): a file that floods its answers uses up
    # its own share, never another's, as module_budget does for time. 0: only replies_bytes holds.
    file_replies_bytes: int = 0
    layers: tuple[str, ...] = ("pidns", "netns", "ipcns", "rlimits", "uid", "landlock", "seccomp", "quota")
    # Children the zygote forks before it makes its memory huge pages (zygote.py, _huge_pages): 1.2-1.4 s of
    # copying that then saves 4.5-8 ms of each later fork's CPU, so it pays back after ~200 children. A run
    # of a couple of hundred submissions never pays it; a longer one has spent about as much on forks by the
    # time it does (rent, then buy). 0: at once.
    huge_pages_after: int = 250


DEFAULT_CONFIG = SandboxConfig()

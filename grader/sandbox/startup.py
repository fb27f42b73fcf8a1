"""What the zygote does once, before its first student child: warm up, and check.

Warm-up: run the kinds of ops and calls the lesson makes, on generic code that is no working part of
any assignment, so each forked child starts with warm dispatch paths (warm_up, warm_up_executor).

Start-up check: one child forked like any other (slot 0's uid, every layer) walks every file on its
import path and imports the modules torch loads lazily during the lesson's calls (the lesson's
lazy_imports.txt). A file it cannot read is a module a student's correct call could fail to import,
so a finding refuses the whole run with one message (verdict; the grader raises SandboxRefused)
instead of grading into false failures. `python -m grader.sandbox --check` shows the findings.
"""
from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from grader.running import protocol
from grader.sandbox.confinement import KIT_ROOT, enterable_temp_dir, prepare_scratch, slot_uid

PROBE_TIMEOUT = 45.0  # wall seconds for the start-up check (within Zygote.wait_ready's 60)


# --------------------------------------------------------------------------- warm-up


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


def warm_up(torch) -> None:
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


def warm_up_executor(entry, *, lesson) -> None:
    """Run each kind of call once through the executor on a throwaway generic module (a small
    attention network, not the assignment: nothing here knows a test or an answer), so the code
    paths of the executor, the stand-ins and torch's kernels are warm in every child (~10 ms a child).
    `lesson`: what the executor knows of the lesson (the zygote's LessonSpec); the warm-up module is
    none of its modules."""
    import numpy as np

    folder = tempfile.mkdtemp(prefix="grader-zygote-")
    try:
        Path(folder, "zygote_warmup.py").write_text(_WARM_UP_MODULE)
        loader = entry.ModuleLoader(folder, isolated=True, lesson=lesson)
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

# --------------------------------------------------------------------------- start-up check


def start_probe(config, imports: list[str], fork) -> dict:
    """Fork the start-up check's child, a sandboxed child like any other, as slot 0's uid: `fork(request,
    (call socket fd, output fd))` is the zygote's own fork of a child, which returns (pid, pidfd)."""
    folder = tempfile.mkdtemp(prefix="sandbox-check-", dir=enterable_temp_dir())
    os.chmod(folder, 0o711)
    scratch = os.path.join(folder, "scratch")
    os.mkdir(scratch)
    uid = slot_uid(config, 0)
    prepare_scratch(Path(scratch), uid)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    devnull = os.open(os.devnull, os.O_WRONLY)
    request = {"scratch": scratch, "uid": uid, "probe": {"imports": imports}}
    pid, pidfd = fork(request, (theirs.fileno(), devnull))
    if pidfd >= 0:
        os.close(pidfd)
    theirs.close()
    os.close(devnull)
    return {"pid": pid, "sock": mine, "folder": folder, "uid": uid, "started": time.monotonic()}


def finish_probe(probe: dict, plan: list) -> dict:
    """The check's findings and verdict (what Zygote.view holds); its child is gone afterwards.
    `plan` is the zygote's view_plan(), which every child applies."""
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
    covered = [cover for cover, _ in plan]
    return {"refused": verdict(found, probe["uid"], covered), "uid": probe["uid"], "covered": covered,
            "bound": [where for _, entries in plan for where, _ in entries],
            "probe": found.get("probe"), "layers": found.get("layers"),
            "seconds": round(time.monotonic() - probe["started"], 3), "cpu_seconds": cpu,
            "zygote_waited_seconds": round(time.monotonic() - waited, 3)}


def probe_child(imports: list[str]) -> dict:
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


def verdict(found: dict, uid, covered: list[str]) -> str:
    """'' when the child can read and import all it must; else the one message a run prints.
    `covered`: the folders its private view covers (view_plan), which it could not enter itself."""
    who = f"the sandbox's unprivileged uid ({uid})" if uid is not None else "the sandboxed child"
    if "setup_error" in found:
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

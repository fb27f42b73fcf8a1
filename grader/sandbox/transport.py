"""The call socket between the grader and a student child, both ends.

Grader side, SandboxTransport: `call(header, arrays) -> (header, arrays)` into a sandboxed child of
one submission (grader/running/protocol.py frames, no pickle). It pipelines a batch of calls, holds each to
its time limit and the submission to its budget, caps what the child may send back, and checks every
answer's fields against what the executor writes (reply_problem): a forged, oversized or missing
answer, a death or a hang becomes a fault of that call, in words, and the next call goes to a fresh
child. Child side, serve(): receive a call, run the executor on it, send the answer, forever.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from grader.running import protocol
from grader.sandbox import SandboxConfig
from grader.sandbox.lending import as_code
from grader.sandbox.confinement import (EXIT_CHANNEL, EXIT_CPU_LIMIT, EXIT_FILE_LIMIT, child_copy, discard_copy, slot_uid,
                                        sweep_shared)

if TYPE_CHECKING:
    from grader.sandbox.zygote import Child, Zygote


# The keys of the child's notes on a call's imports (serve, SandboxTransport._receive): the called file's import is
# done (a first call), and a module of the submission starts importing during the call (a helper imported inside
# forward or __init__).
IMPORTED, IMPORTING = "imported", "importing"


def error_header(kind: str, message: str) -> dict:
    """The result header for a call the child could not answer (the same shape execute() uses)."""
    return {"error": {"type": kind, "message": message, "traceback": ""}, "forbidden": []}


class SandboxTransport:
    """`call(header, arrays) -> (header, arrays)` into a sandboxed child of one submission.

    The child is spawned lazily and respawned after any fault, so a part that hangs or crashes
    costs only the calls that hit it. Each child works in its own fresh copy of `scratch` (the
    submission as handed in), removed when the child ends. `faults` lists what happened, in words,
    for the result's notes; `isolation` which layers were active. `close()` leaves no process behind.
    """

    def __init__(self, *, zygote: Zygote, slot: int, scratch: Path, config: SandboxConfig | None = None,
                 quota: bool = False):
        self.zygote, self.slot, self.scratch = zygote, slot, Path(scratch)
        self.config = config or zygote.config
        self.quota = quota  # `scratch` is on a tmpfs of its own, mount_quota's, with the config's limits
        self.scratch_full: set[str] = set()  # "bytes", "inodes": what a child of this submission used up
        self.faults: list[str] = []
        self.fault_types: list[str] = []
        self.isolation: dict = {}
        self._child: Child | None = None
        self._copy: Path | None = None  # the current child's own copy of the submission
        self._names: set[str] = set()  # top-level names seen in any child's copy when it ended (top_names)
        self._import_faults: dict[str, int] = {}
        self._condemned: dict[str, dict] = {}
        self._spent: dict[str, float] = {}  # wall seconds of calls (and child starts) per module
        self._windows: dict[str, float] = {}  # wall seconds of helpers' import windows per module (_receive)
        self._received = 0  # bytes of every answer so far, counted against config.replies_bytes
        self._replies_full = False  # set once an answer would have passed config.replies_bytes
        self._received_by: dict[str, int] = {}  # bytes of the answers into each file (config.file_replies_bytes)
        self._files_full: set[str] = set()  # files whose answers would have passed their share
        self._output = tempfile.TemporaryFile()  # unnamed: nothing else can open it
        self._printed: list[str] = []  # the start of what each earlier child printed (printed_heads)
        self._ahead = 0  # what the live child's socket may hold of calls sent ahead (send_ahead_budget)
        self.quoted_grader_code = False  # an answer quoted a lent stand-in (_own_words): for the staff's flags
        self._sent = 0  # calls sent to this submission's children: the next one's number (its header's "seq")
        self._quoted_lines: dict[str, set] = {}  # stand-in -> its code lines seen in this submission's answers
        self.channel_replaced = False  # a child ended because its channel was swapped (serve): for the staff's flags

    # -- public

    # Requests sent ahead of the answers stay under this many bytes, and under half of what the kernel lets the
    # grader's end of the socket queue, counted as the kernel counts it (queued_cost): sending ahead must never wait
    # for a child that is busy writing an answer nobody reads yet, or each side waits for the other to read. Bytes
    # alone were the bound once: ~300 tiny calls behind a 1.6 MB answer filled the buffer at 45 KB, every call timed
    # out, and a correct module was condemned.
    PIPELINE_BYTES = 64 << 10
    SEND_BUFFER = 1 << 20  # asked for the grader's end; the kernel doubles it, within net.core.wmem_max

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
        flight: deque = deque()  # (index, module, bytes, sent at), in the order answered
        flight_bytes = flight_cost = 0
        answered_at = 0.0  # when the child last answered: it starts on the next call then
        while todo or flight:
            while todo:
                i = todo[0]
                header, arrays = calls[i]
                module = str(header.get("module", "")) if isinstance(header, dict) else ""
                if self._child is not None and (self._refuses(self._child, header)
                                                or self._child.module not in (None, module)):
                    # This child was lent a working implementation of the graded name this call grades (a
                    # stand-in the call does not need), or it answers another module's calls: the call goes to
                    # a fresh child, once the calls ahead are answered. One child a module: whatever a file's code
                    # leaves in its process (a patched torch function, a global hook, a mode left on, a thread
                    # that fires later) reaches that file's own calls, as in the student's own process, and no
                    # other part's (red teams s45r and s46r moved one part's score from another part's file).
                    if flight:
                        break
                    self._stop_child()
                if not flight:
                    early = self._answer_without_child(module)
                    if early is None and self._child is None:
                        start = time.monotonic()
                        fault = self._spawn()
                        self._spend(module, time.monotonic() - start)
                        if fault is not None:
                            early = self._after_fatal(module, fault, first_use=True), {}
                    if early is not None:
                        answers[i] = early
                        todo.popleft()
                        continue
                header, lends = self._as_sent(header)
                seq = None
                if isinstance(header, dict):
                    # Its number, which its answer must carry: a stray frame on the stream shifts no later answer.
                    self._sent += 1
                    seq = self._sent
                    header = dict(header, seq=seq)
                parts = protocol.encode(header, arrays)
                size = sum(len(part) for part in parts)
                if flight and (flight_bytes + size > self.PIPELINE_BYTES
                               or flight_cost + queued_cost(size) > self._ahead):
                    break  # not sent: what it would have lent goes with it when it is
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
                self._lend(lends)
                self._child.module = module
                todo.popleft()
                flight.append((i, module, size, sent_at, seq))
                flight_bytes += size
                flight_cost += queued_cost(size)
            if not flight:
                continue
            i, module, size, sent_at, seq = flight.popleft()
            flight_bytes -= size
            flight_cost -= queued_cost(size)
            if self._spent.get(module, 0.0) >= self.config.module_budget:
                # Used up by the calls ahead: this one and those behind it go again, without the child for
                # this module (_answer_without_child) and to a fresh child for any other.
                self._stop_child()
                answer, retry = None, True
            else:
                start = max(sent_at, answered_at)
                answer, retry = self._receive(module, start=start, seq=seq), False
                answered_at = time.monotonic()
                self._spend(module, answered_at - start)
            if answer is not None:
                answers[i] = answer
            if self._child is None:  # stopped or replaced: what was in flight goes again, to the next child
                todo.extendleft(reversed(([i] if retry else []) + [entry[0] for entry in flight]))
                flight.clear()
                flight_bytes = flight_cost = 0
        return answers

    def output_tail(self) -> str:
        """The last bytes the student's code printed (stdout and stderr together)."""
        self._output.flush()
        size = os.fstat(self._output.fileno()).st_size
        n = min(size, self.config.output_tail_bytes)
        data = os.pread(self._output.fileno(), n, size - n) if n else b""
        return data.decode("utf-8", "replace")

    PRINTED_CHILDREN = 8  # children whose printed output is kept for printed_heads()

    def printed_heads(self) -> list[str]:
        """The first and the last bytes each child of this submission printed, the live one's last: what the
        grader looks through for printed claims of a result (grader/judging/integrity.py). Only read, never
        parsed as a grade."""
        return self._printed + [self._output_head()]

    def _output_head(self) -> str:
        """The first output_tail_bytes of the child's output and, after a line break, its last as many (a claim
        printed after a screenful of progress lines is seen too)."""
        self._output.flush()
        fd, n = self._output.fileno(), self.config.output_tail_bytes
        size = os.fstat(fd).st_size
        head = os.pread(fd, min(size, n), 0) if size else b""
        tail = os.pread(fd, min(size - n, n), max(n, size - n)) if size > n else b""
        return (head + (b"\n" + tail if tail else b"")).decode("utf-8", "replace")

    def close(self) -> None:
        self._stop_child()
        self._output.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- internals

    def _refuses(self, child, header) -> bool:
        lent = self.zygote.standins
        return bool(lent and child.lent and isinstance(header, dict) and lent.refuses(child.lent, header))

    def _as_sent(self, header):
        """(the call as sent to this child, what it lends the child): the source of each stand-in the call
        needs that the child was not lent yet (grader/sandbox/lending.py), and each parameter's binding rule
        (the contract's description of where it goes, grader/running/calls.py Adapter.binding) by the
        number the child holds it under, the rule itself going with the first call that needs it: a block's
        call carries ten rules, ~2 KB of the same JSON, written by the grader and read by the child each
        time. The child holds them once the call is sent (`_lend`), not before: a call held back (the
        pipeline is full) lends them when it goes."""
        if not isinstance(header, dict):
            return header, None
        child, lent = self._child, self.zygote.standins
        standins = sorted(lent.needed(header) - child.lent) if lent else []
        if standins:
            header = dict(header, standins_source={name: lent.units[name] for name in standins})
        params = header.get("params")
        if not isinstance(params, list) or not params:
            return header, (standins, [])
        known, rules, wire = dict(child.rules), [], []  # rules: (name, (rule, number)) this call lends
        for spec in params:
            rule = spec.get("bind") if isinstance(spec, dict) else None
            if not isinstance(rule, dict):
                wire.append(spec)
                continue
            name = spec.get("name")
            entry = known.get(name)
            if entry is None or entry[0] != rule:
                entry = known[name] = (rule, child.rules_sent + len(rules))
                rules.append((name, entry))
            wire.append({k: v for k, v in spec.items() if k != "bind"} | {"rule": entry[1]})
        header = dict(header, params=wire)
        if rules:
            header["rules"] = {str(number): rule for _, (rule, number) in rules}
        return header, (standins, rules)

    def _lend(self, lends) -> None:
        """The child now holds what a call sent to it lent (`_as_sent`)."""
        if lends is not None:
            standins, rules = lends
            self._child.lent.update(standins)
            self._child.rules.update(rules)  # in order: a name lent twice keeps its last rule
            self._child.rules_sent += len(rules)

    def _answer_without_child(self, module):
        if module in self._condemned:
            return dict(self._condemned[module]), {}
        if self._spent.get(module, 0.0) >= self.config.module_budget:
            message = (f"the submission used up its {self.config.module_budget:g} s time budget for {module}.py; "
                       f"the remaining calls into {module}.py were not run")
            if f"Timeout: {message}" not in self.faults:  # said once a file; the run's status says "time-budget"
                self.faults.append(f"Timeout: {message}")
                self.fault_types.append("Budget")
            return self._fault("Timeout", message, record=False), {}
        if module in self._files_full:
            return self._fault("OversizedReply", f"the answers of {module}.py passed the "
                                                 f"{_mb(self.config.file_replies_bytes)} the grader keeps for one "
                                                 f"file; the remaining calls into {module}.py were not run",
                               record=False), {}
        if self._replies_full:
            return self._fault("OversizedReply", f"the submission's answers passed the "
                                                 f"{_mb(self.config.replies_bytes)} the grader keeps for one "
                                                 "submission; remaining calls were not run", record=False), {}
        return None

    def _spend(self, module: str, seconds: float) -> None:
        self._spent[module] = self._spent.get(module, 0.0) + seconds

    def _reply_limits(self, module: str) -> protocol.Limits:
        """The caps for the next answer, into `module`: one call's, and what is left of its file's and the submission's."""
        cap = self.config.reply_bytes or protocol.DEFAULT_LIMITS.max_total_bytes
        if self.config.replies_bytes:
            cap = max(0, min(cap, self.config.replies_bytes - self._received))
        if self.config.file_replies_bytes:
            cap = max(0, min(cap, self.config.file_replies_bytes - self._received_by.get(module, 0)))
        return protocol.Limits(max_header_bytes=min(cap, protocol.DEFAULT_LIMITS.max_header_bytes), max_total_bytes=cap)

    def _oversized(self, exc: "protocol.OversizedFrame", module: str) -> dict:
        if self.config.reply_bytes and exc.declared > self.config.reply_bytes:
            return self._fault("OversizedReply", f"one answer was over the {_mb(self.config.reply_bytes)} a call may "
                                                 f"send back (this assignment's answers are far smaller): {exc}")
        if (self.config.file_replies_bytes
                and self._received_by.get(module, 0) + exc.declared > self.config.file_replies_bytes):
            self._files_full.add(module)
            return self._fault("OversizedReply", f"the answers of {module}.py passed the "
                                                 f"{_mb(self.config.file_replies_bytes)} the grader keeps for one "
                                                 f"file: {exc}")
        if self.config.replies_bytes and self._received + exc.declared > self.config.replies_bytes:
            self._replies_full = True
            return self._fault("OversizedReply", f"the submission's answers passed the "
                                                 f"{_mb(self.config.replies_bytes)} the grader keeps for one "
                                                 f"submission: {exc}")
        return self._fault("OversizedReply", f"the process answered with a message over the protocol's caps ({exc})")

    def _send_failed(self, module, exc, first_use):
        fault = self._timed_out() if isinstance(exc, TimeoutError) else self._death_or_protocol(exc)
        return self._after_fatal(module, fault, first_use), {}

    def _timeout(self, module) -> float:
        """Seconds for the oldest call in flight: a module's first call in a child imports it (import_timeout)."""
        first = self._child is not None and module not in self._child.served
        return max(self.config.call_timeout, self.config.import_timeout) if first else self.config.call_timeout

    def _timed_out(self, seconds: float | None = None) -> dict:
        seconds = self.config.call_timeout if seconds is None else seconds
        return self._fault("Timeout", f"no answer within {seconds:g} s (an infinite loop, a sleep, "
                                      "or very slow code); the process was stopped")

    def _receive(self, module, *, start, seq=None):
        """The answer to the oldest call in flight, which the child could start on at `start`; after a fault,
        self._child is None. A module's first call in a child imports its file, with import_timeout; the child says
        when that import is done (a frame {IMPORTED, seq} of this call's), and the rest has call_timeout (an infinite
        loop in forward on a first call had the import's 30 s, twice). A forged note of that kind can only shorten
        its own call. A helper of the student's first imported during a call gives the call import_timeout while it
        imports ({IMPORTING, seq} then {IMPORTED, seq}, once a call: s49r's 7 s helper imported inside __init__ timed
        out): forged, it gives the call at most that, within its file's budget of time, as the first call had before
        these notes."""
        child = self._child
        first_use = module not in child.served
        seconds = self._timeout(module)
        deadline = start + seconds
        noted: list[str] = []
        opened = None  # when a helper's import window opened in this call, until it closes
        try:
            while True:
                try:
                    reply, out, size = protocol.recv_frame(child.sock, limits=self._reply_limits(module),
                                                           deadline=deadline)
                except TimeoutError:
                    return self._after_fatal(module, self._timed_out(seconds), first_use), {}
                except protocol.OversizedFrame as exc:
                    return self._after_fatal(module, self._oversized(exc, module), first_use), {}
                except (protocol.ProtocolError, OSError) as exc:
                    return self._after_fatal(module, self._death_or_protocol(exc), first_use), {}
                note = next((k for k in (IMPORTED, IMPORTING) if reply == {k: True, "seq": seq}), None) \
                    if seq is not None and not out else None
                if note == IMPORTED and (first_use or IMPORTING in noted) and noted.count(IMPORTED) < 2:
                    noted.append(note)  # the called file's import, or the helper's said to be starting, is done
                    self._close_window(module, opened)
                    opened = None
                    seconds = self.config.call_timeout
                    deadline = min(deadline, time.monotonic() + seconds)
                    continue
                if note == IMPORTING and note not in noted:
                    noted.append(note)
                    # The helpers' imports of a file share one import's time (held-out s51r: a fresh module imported
                    # in each call gave every call 30 s).
                    left = max(self.config.import_timeout - self._windows.get(module, 0.0), 0.0)
                    opened = time.monotonic()
                    seconds = max(self.config.call_timeout, left)
                    deadline = max(deadline, opened + seconds)
                    continue
                break
        finally:
            self._close_window(module, opened)  # however the call ended, a window still open counts
        self._received += size
        self._received_by[module] = self._received_by.get(module, 0) + size
        if "sandbox_exit" in reply:
            # The zygote reports a child's end once it has reaped it; the child itself can write the same frame.
            ended = self._fault("ProtocolError", "the process reported its own end while still running (forged)") \
                if child.running() else self._classify_exit(reply["sandbox_exit"])
            return self._after_fatal(module, ended, first_use), {}
        problem = reply_problem(reply, out)
        if problem:
            # Student code can write to its own end of the socket: a reply the executor never writes is
            # the submission's fault. The stream can no longer be trusted, so the child goes.
            return self._after_fatal(module, self._fault(
                "ProtocolError", f"the process sent an answer the grader's executor never writes "
                                 f"(forged or damaged: {problem})"), first_use), {}
        if seq is not None and reply.pop("seq", None) != seq:
            return self._after_fatal(module, self._fault(
                "ProtocolError", "the process sent an answer that is not this call's (a frame written to its "
                                 "channel to the grader, or the answer to another call)"), first_use), {}
        reply = self._own_words(reply)
        error = reply.get("error") if isinstance(reply, dict) else None
        if isinstance(error, dict) and _is_out_of_memory(error):
            return self._after_fatal(module, self._fault(
                "OutOfMemory", f"ran out of memory (it may use {self.config.memory_bytes >> 20} MB beyond torch's own)"
                               f": {str(error.get('message', ''))[:200]}"), first_use), {}
        child.served.add(module)
        return reply, out

    def _close_window(self, module: str, opened: float | None) -> None:
        """Count the time a helper's import window stayed open against the file's share of import time."""
        if opened is not None:
            self._windows[module] = self._windows.get(module, 0.0) + time.monotonic() - opened

    def _own_words(self, reply: dict) -> dict:
        """The answer, with the child's own words bounded as the executor bounds them: an error's message 600
        characters, its traceback 1500, a non-tensor output's type name 60, each name of an inspect record 200 (a
        process that writes its own frames could send any length into its feedback: red team s42r). An answer
        whose words quote a stand-in lent to the child (_quotes_stand_ins) becomes an error that shows none of
        them, and the staff are told (quoted_grader_code): the stand-ins are the grader's working code."""
        if self._quotes_stand_ins(reply):
            return {"error": {"type": "UngradableResult", "traceback": "", "stage": "output",
                              "message": "(this answer quoted the grader's own code, which is not shown)"},
                    "outputs": []}
        steps = reply.get("steps") if isinstance(reply.get("steps"), list) else []
        places = None
        for record in [reply.get("error"), reply.get("grad_error"), *(step.get("error") for step in steps)]:
            if isinstance(record, dict):
                places = self._places() if places is None else places
                for key, value in record.items():
                    if isinstance(value, str):
                        record[key] = _unplaced(value, places)[:protocol.ERROR_TEXT_CAPS.get(key, 100)]
        for output in reply.get("outputs") or ():
            for key in ("type", "value"):
                if isinstance(output.get(key), str):
                    places = self._places() if places is None else places
                    output[key] = _unplaced(output[key], places)[:60]
        inspect = reply.get("inspect")
        if isinstance(inspect, dict):
            reply["inspect"] = _capped_names(inspect, 200)
        return reply

    def _places(self) -> list[tuple[str, str]]:
        """The grading machine's own folders, longest first, each with what the student reads instead: code of a
        submission may put them in its errors (red team s56r: the kit's folder, the run's scratch folder, the Python
        in use), and they are the grader's, not the student's (the student's own copy reads as their folder)."""
        places = [(str(self._copy), "<your folder>")] if self._copy is not None else []
        # The submission's scratch folder and those it is in, up to the run's own (its slot's, other slots'), never /tmp.
        folders = [folder for folder in (self.scratch, *self.scratch.parents) if len(folder.parts) >= 3]
        places += [(str(folder), "<scratch>") for folder in folders]
        # A path cut short still names them: their random names (mkdtemp's, 8 characters and more) are said too.
        places += [(folder.name, "<scratch>") for folder in folders if len(folder.name) >= 8]
        places += [(path, said) for path, said in ((sys.prefix, "<python>"), (str(_KIT), "<grader>"))
                   if len(Path(path).parts) >= 3]
        return sorted(places, key=lambda place: -len(place[0]))

    def _quotes_stand_ins(self, reply: dict) -> bool:
        """Whether the words of an answer quote a lent stand-in, compared as code with no spacing and no invisible
        characters (red team s43r slipped a zero-width space into each line): at least two of its code lines, and
        two in five, in this answer, or in all this submission's answers so far (a quote cut into one line an
        answer), once which any of its lines is one. The second way tells the staff (quoted_grader_code). A
        traceback shows one line a frame, each the student's own: a line that is also a stand-in's (code copied
        from the handout) is not a quote, nor is the same such line in every traceback."""
        lending = self.zygote.standins
        if not lending:
            return False
        text = as_code("\n".join(_strings(reply)))
        quoted = False
        for name, (lines, enough) in lending.code_lines.items():
            here = {line for line in lines if line in text}
            if not here:
                continue
            seen = self._quoted_lines.setdefault(name, set())
            seen |= here
            if len(here) >= enough or len(seen) >= enough:
                self.quoted_grader_code = True
                quoted = True
        return quoted

    def _stop_child(self) -> None:
        """Kill the child, then remove its copy: what it wrote is read by no later child."""
        if self._child is not None:
            self._child.kill()
            if self._child.layers.get("uid") and not self._child.layers.get("landlock"):
                # No Landlock (kernel < 5.13): the slot's uid could write in the folders every user may.
                sweep_shared(slot_uid(self.config, self.slot))
            self._child = None
        if self._copy is not None:
            self._names |= _top_names(self._copy)
            self._check_full(self._copy)
            if discard_copy(self._copy) >= self.config.scratch_inodes:
                self.scratch_full.add("inodes")  # no tmpfs to stop it (no root): named all the same
            self._copy = None

    def _check_full(self, copy: Path) -> None:
        """Note what the child just ended used up of its tmpfs (nothing else writes there while it runs)."""
        if not self.quota:
            return
        try:
            free = os.statvfs(copy)
        except OSError:
            return
        if free.f_ffree == 0:
            self.scratch_full.add("inodes")
        if free.f_bavail == 0:
            self.scratch_full.add("bytes")

    def top_names(self) -> set[str]:
        """The names at the top of each child's copy when it ended, the live one's too: with the names
        handed in, what the submission's code wrote into its own folder (grader/judging/integrity.py)."""
        return self._names | (_top_names(self._copy) if self._copy is not None else set())

    def _spawn(self):
        if len(self._printed) < self.PRINTED_CHILDREN and (head := self._output_head()):
            self._printed.append(head)
        self._output.truncate(0)
        self._output.seek(0)
        try:
            self._copy = child_copy(self.scratch, slot_uid(self.config, self.slot))
        except OSError as exc:  # a full quota, a vanished folder: said like a child that could not start
            return self._fault("Crashed", f"the sandbox could not set up the process: "
                                          f"{without_paths(f'{type(exc).__name__}: {exc}')}")
        # SandboxUnavailable propagates: a dead zygote is the engine's fault, not the submission's.
        child = self.zygote.spawn(self.slot, scratch=self._copy, output_fd=self._output.fileno(),
                                  timeout=self.config.spawn_timeout)
        self._ahead = send_ahead_budget(child.sock, self.SEND_BUFFER)
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
        if code == EXIT_CHANNEL:
            self.channel_replaced = True
            return self._fault("Crashed", "the code put something else in place of the process's channel to the "
                                          "grader; the process was stopped")
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
        self._stop_child()
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


_KIT = Path(__file__).resolve().parents[2]


def _unplaced(text: str, places: list[tuple[str, str]]) -> str:
    for path, said in places:
        if path in text:
            text = text.replace(path, said)
    return text


def _strings(value) -> list[str]:
    """Every string in an answer's header, its keys included."""
    found, todo = [], [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return found


def _capped_names(value, cap: int):
    """An inspect record with each of its strings, names included, cut to `cap` characters."""
    if isinstance(value, str):
        return value[:cap]
    if isinstance(value, dict):
        return {_capped_names(k, cap): _capped_names(v, cap) for k, v in value.items()}
    if isinstance(value, list):
        return [_capped_names(v, cap) for v in value]
    return value


def _identity(st) -> tuple:
    return st.st_dev, st.st_ino


def queued_cost(size: int) -> int:
    """At most what the kernel charges a socket's send buffer for one message of `size` bytes sent by one sendmsg:
    its bytes rounded up by the allocator, plus the buffer's bookkeeping (measured: 766 for 50 bytes, 4347 for 2000,
    16384 for 17000, with a 212,992-byte buffer)."""
    return 2 * size + 1024


def send_ahead_budget(sock: socket.socket, wanted: int) -> int:
    """Half of the send buffer the grader's end of `sock` gets after asking for `wanted` bytes: what calls sent
    ahead may cost (queued_cost) so that a send never waits. The other half is margin, since the kernel admits a
    message while the queue is below the buffer, however large the message."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, wanted)
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2


def _top_names(folder: Path, limit: int = 2000) -> set[str]:
    names = set()
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if len(names) >= limit:
                    break
                names.add(entry.name)
    except OSError:
        pass
    return names


def without_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part (`/home/x/kit/grader/running/grade.py` -> `…/run.py`):
    for messages about the engine that end up in a student's feedback."""
    return re.sub(r"(?<![\w.~])(?:[A-Za-z]:)?[/\\][^\s'\"]*[/\\]([^\s/\\'\"]*)", r"…/\1", text)


_HELLO_LIMITS = protocol.Limits(max_header_bytes=1 << 16, max_arrays=0, max_total_bytes=0)


def _mb(n: int) -> str:
    return f"{n / 2**20:g} MB"


def reply_problem(header: dict, arrays: dict) -> str | None:
    """What is wrong with a call's answer, by the shape grader/running/executor.py gives it; None if nothing.

    Every field the scorer reads is checked for its type (and every array it names for being
    there), so a forged or damaged answer is refused here, as the submission's fault, instead of
    tripping the scorer later. Keys this check does not know pass through untouched."""
    def error_problem(key):
        value = header.get(key)
        if value is None:
            return None
        if not isinstance(value, dict) or _error_problem(value):
            return f"{key!r} is not an error record"
        if protocol.unanswered({"error": value}):
            # The transport's own record of a call it got no answer to (error_header): never the code's answer.
            return f"a {value['type']} with no traceback, which only the sandbox reports"
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
            # What the scorer judges (a dtype, a shape) must be what the bytes are, not what the child says.
            array = arrays[desc["array"]]
            if "dtype" in desc and protocol.SENT_AS.get(desc["dtype"]) != array.dtype.name:
                return f"output {i} is said to be {str(desc['dtype'])[:20]} but its array holds {array.dtype.name}"
            if "shape" in desc and desc["shape"] != list(array.shape):
                return f"output {i} is said to have shape {str(desc['shape'])[:40]} but its array has {list(array.shape)}"
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
    # Structured answers (a "call" or a "session"): value trees, read back only after this check.
    if "value" in header and (problem := protocol.value_problem(header["value"], arrays)):
        return f"'value' is not a value tree: {problem}"
    steps = header.get("steps", [])
    if not isinstance(steps, list):
        return "'steps' is not a list"
    for i, answer in enumerate(steps):
        if not isinstance(answer, dict) or len(answer) != 1 or not ({"value", "error"} & set(answer)):
            return f"step {i} is neither a value nor an error"
        if "error" in answer and (not isinstance(answer["error"], dict) or (problem := _error_problem(answer["error"]))):
            return f"step {i}: {problem if isinstance(answer['error'], dict) else 'not an error record'}"
        if "value" in answer and (problem := protocol.value_problem(answer["value"], arrays)):
            return f"step {i} is not a value tree: {problem}"
    return None


def _error_problem(value: dict) -> str | None:
    bases = value.get("bases", [])
    step = value.get("step", {"index": 0})
    if not all(isinstance(value.get(k), str) for k in ("type", "message")) \
            or not all(isinstance(value.get(k, ""), str) for k in ("traceback", "stage")) \
            or not (isinstance(bases, list) and all(isinstance(b, str) for b in bases)):
        return "not an error record"
    if not (isinstance(step, dict) and type(step.get("index")) is int
            and all(isinstance(step.get(k, ""), str) for k in ("of", "method", "attr"))):
        return "not an error record (its 'step' is not a step's place)"
    return None


def _is_out_of_memory(error: dict) -> bool:
    kind, message = str(error.get("type", "")), str(error.get("message", ""))
    return kind == "MemoryError" or "can't allocate memory" in message or "not enough memory" in message


# --------------------------------------------------------------------------- child side


_FSTAT, _EXIT = os.fstat, os._exit  # bound when the zygote imports this file, before any student code runs


def serve(sock, execute, loader):
    """The child's loop, once every layer is on: each call in, the executor's answer out. Before each answer goes,
    its channel must still be the socket it was given: code that puts a socket of its own in its place (red teams
    s42r, s43r: dup2 over its number, or close it and open pairs until one gets the number) would read and rewrite
    every answer on its way out. Then the child ends (EXIT_CHANNEL), and the grader says why."""
    fd = sock.fileno()
    given = _identity(_FSTAT(fd))

    def say(header, arrays=None):
        try:
            swapped = _identity(_FSTAT(fd)) != given
        except OSError:
            swapped = True
        if swapped:
            _EXIT(EXIT_CHANNEL)
        protocol.send_message(sock, header, arrays)

    while True:
        try:
            header, arrays = protocol.recv_message(sock)
        except protocol.ConnectionClosed:
            _EXIT(0)
        seq = header.get("seq") if isinstance(header, dict) else None
        # A first call imports the called file: once that is done, the grader gives the rest the call's own time.
        loader.on_imported = (lambda seq=seq: say({IMPORTED: True, "seq": seq})) if isinstance(seq, int) else None
        loader.on_importing = (lambda seq=seq: say({IMPORTING: True, "seq": seq})) if isinstance(seq, int) else None
        try:
            reply = execute(header, arrays, loader=loader)
        except MemoryError:
            reply = (error_header("MemoryError", "out of memory"), {})
        except SystemExit as exc:
            reply = (error_header("SystemExit", f"the code called sys.exit({exc.code!r})"), {})
        except BaseException as exc:  # the executor should catch; never let one call end the loop
            reply = (error_header(type(exc).__name__, str(exc)[:500]), {})
        loader.on_imported = loader.on_importing = None
        if isinstance(header, dict) and "seq" in header and isinstance(reply[0], dict):
            reply[0]["seq"] = header["seq"]  # whichever way the call ended: the grader pairs the answer with it
        try:
            say(*reply)
        except (TypeError, ValueError) as exc:
            say(error_header("ProtocolError", f"result could not be framed: {exc}"))

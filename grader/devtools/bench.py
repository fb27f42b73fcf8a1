"""`make bench`: grade a synthetic class and compare with a bare `python -c "import torch"`.

Everything is measured in one run, on this machine, with every isolation layer the machine allows
(the layers are printed). Each figure is printed beside its goal. `make bench BASE=<commit>` grades
the same class with that commit too (its files taken from git into a temporary folder, run with this
virtual environment), in turns with this kit, so a ratio between two versions comes from one run on
one machine whatever else the machine is doing. A per-stage breakdown of one submission (a reference
copy and a planted bug) comes from timing the stages of a real grading of it, as a worker grades it.

    python -m grader.devtools.bench [-n 200] [--jobs J] [--base COMMIT] [--scale 1000] [--repeats R]
    python -m grader.devtools.bench similarity [-n 500]
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]

# What this round asks of grading (printed beside each figure).
GOAL_RATIO = 0.05  # class wall per submission / bare torch import
GOAL_SCALE = 0.10  # per submission at a larger class, at most this much above the figure at n
GOAL_PEAK_BYTES = 1 << 30  # the grading run's whole process tree (cgroup peak)
GOAL_CHILD_MB = 768  # one student child's peak RSS (the sandbox's address-space limit)
GOAL_STUDENT_SECONDS = 2.0  # a student's `make test` on correct code in a built release, warm
# The bench's sandbox uids: away from a real grading run's (SandboxConfig.uid_base, 64000 + slot), so a
# bench beside `make grade` shares no uid with it.
BENCH_UID_BASE = 64512


# ---------------------------------------------------------------- the class


def build_class(root: Path, n: int, *, lesson, mutants_every: int = 2) -> dict:
    """n submissions: reference copies, and every `mutants_every`-th one a mutant (cycling through the
    catalogue bugs the lesson names for the benchmark): half correct, half with one bug by default,
    since a failing test costs the scorer more than a pass (its calls are replayed on the catalogue)."""
    counts = {"reference": 0, "mutant": 0}
    for i in range(n):
        bug = i // mutants_every if i % mutants_every == mutants_every - 1 else None
        counts["mutant" if plant(root / f"student_{i:04d}", bug, lesson=lesson) else "reference"] += 1
    return counts


def plant(folder: Path, bug: int | None, *, lesson) -> bool:
    """A copy of the reference in `folder`, with the lesson's `bug`-th bench bug (cycling) planted, if any.
    True when a bug was planted."""
    from grader.judging.mutants import Catalogue

    shutil.copytree(lesson.solutions, folder, ignore=shutil.ignore_patterns("__pycache__"))
    if bug is None or not lesson.bench_mutants:
        return False
    catalogue = Catalogue.of(lesson)
    for name, text in catalogue.apply(catalogue.by_id[lesson.bench_mutants[bug % len(lesson.bench_mutants)]]).items():
        (folder / name).write_text(text)
    return True


def torch_import_times(repeats: int = 3) -> list[float]:
    """Wall seconds of `repeats` bare `python -c "import torch"` runs, one after another."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        times.append(time.perf_counter() - start)
    return times


# ---------------------------------------------------------------- versions: this kit and BASE


@contextlib.contextmanager
def checkout(commit: str):
    """The files of `commit` in a temporary folder (`git archive`: no worktree registered, no state
    left in the repository), for grading with this virtual environment."""
    folder = Path(tempfile.mkdtemp(prefix="grader-bench-base-"))
    try:
        archive = subprocess.run(["git", "-C", str(KIT), "archive", "--format=tar", commit],
                                 capture_output=True, check=False)
        if archive.returncode != 0:
            raise SystemExit(f"bench: BASE={commit} is not a commit of {KIT} "
                             f"({archive.stderr.decode(errors='replace').strip()}); give a commit id or a branch")
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
        os.chmod(folder, 0o755)  # the sandbox's uid imports the base's grader from here
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# Grades a class with the kit in the current folder: run.main with the bench's uid base (every version
# since the first round has run.main(submissions, out, jobs, config) and grader.sandbox.SandboxConfig).
# The lesson goes by what `--lesson` takes (argv[5]), built into a value where run.main takes one; a BASE
# from before the lesson value grades the lesson it finds itself (it had one: Day 13).
_DRIVER = """
import inspect, sys
try:
    from grader.running import grade as run
except ImportError:
    from grader import run
from grader.sandbox import SandboxConfig
kwargs = dict(submissions=sys.argv[1], out=sys.argv[2], jobs=int(sys.argv[3]),
              config=SandboxConfig(uid_base=int(sys.argv[4])))
if "lesson" in inspect.signature(run.main).parameters:
    from grader import lesson as lessons  # not in a BASE from before the lesson value
    kwargs["lesson"] = lessons.load_lesson(sys.argv[5])
sys.exit(run.main(**kwargs))
"""


@dataclass
class ClassRun:
    label: str
    n: int
    wall: float = 0.0
    cpu: float = 0.0
    first_row: float | None = None
    last_row: float | None = None
    peak_bytes: int | None = None
    peak_why: str = ""
    full: int = 0
    records: int = 0
    mean_row: float = 0.0
    failed: str = ""
    cpu_by_kind: dict[str, float] = field(default_factory=dict)  # seconds, TreeCpu.by_kind

    @property
    def per_submission(self) -> float:
        return self.wall / self.n

    @property
    def steady(self) -> float | None:
        """Seconds between rows once rows come (first to last row): the rate without the run's start-up and
        class files, which a larger class spreads thinner."""
        if self.first_row is None or self.last_row is None or self.n < 2:
            return None
        return (self.last_row - self.first_row) / (self.n - 1)


def grade_class(label: str, tree: Path, subs: Path, out: Path, *, lesson, n: int, jobs: int, uid_base: int) -> ClassRun:
    """Grade `subs` into `out` with the kit in `tree`, in a memory cgroup of its own when the machine
    gives one (the peak is the whole process tree's: grader, workers, zygote, children, checkers)."""
    run = ClassRun(label, n)
    group = MemoryGroup.create(f"grader-bench-{os.getpid()}-{label.split()[0]}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # The run's temporary files in a folder of its own, removed after it: an older commit (BASE=) may leave some
    # behind (aeb6d03's workers left their catalogue mutants), and a bench must not fill the machine's /tmp.
    temporary = Path(tempfile.mkdtemp(prefix="grader-bench-tmp-"))
    os.chmod(temporary, 0o1777)  # as /tmp: the sandbox's uids pass through it
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(subs), str(out), str(jobs), str(uid_base), lesson.ref],
                            cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(temporary)},
                            preexec_fn=group.enter if group.path else None)
    tree = TreeCpu(proc.pid)
    tree.start()
    lines, graded_at = [], []  # when each "graded k/n" line came: start-up, steady state, class files
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("graded ") and "/" in line.split()[1]:
            graded_at.append(time.perf_counter() - start)
    stderr = proc.stderr.read()
    proc.wait()
    run.wall = time.perf_counter() - start
    tree.stop()
    shutil.rmtree(temporary, ignore_errors=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU of the whole process tree: other load on the machine does not inflate it.
    run.cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    run.cpu_by_kind = tree.by_kind(run.cpu)
    run.peak_bytes, run.peak_why = group.close()
    if graded_at:
        run.first_row, run.last_row = graded_at[0], graded_at[-1]
    if proc.returncode != 0:
        run.failed = f"exit code {proc.returncode}:\n{''.join(lines)[-1500:]}\n{stderr[-1500:]}"
        return run
    records = [json.loads(p.read_text()) for p in sorted(out.glob("*/record.json"))]
    run.records = len(records)
    run.full = sum(1 for r in records if _code_score(r) == _code_max(r))
    run.mean_row = statistics.mean(r.get("execution_time", 0.0) for r in records) if records else 0.0
    return run


# The kinds of process a grading run starts, by the module their command line runs (`python -m MODULE`), or by the
# name the kit gives a process it forks (grader/running/grade.py's workers, grader/admin/similarity.py's pool); any
# other is the grader.
PROCESS_KINDS = {b"grader.sandbox": "zygote", b"grader.running.deliverables_process": "deliverables checker",
                 b"grader.judging.source_scan": "scan helper"}
PROCESS_NAMES = {"grade-worker": "grading workers", "similarity": "similarity report"}
KIND_ORDER = ("sandboxed children", "grading workers", "grader", "zygote", "similarity report", "deliverables checker",
              "scan helper", "not seen")


class TreeCpu(threading.Thread):
    """The CPU of a running grading run by kind of process, read from /proc ten times a second: each process's own
    CPU as last seen, and the sandboxed children's as the zygote's (it reaps them all, so theirs is its children's
    CPU). What ended between two samples is the rest of the exact total, said as "not seen"."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root = root
        self.seen: dict[int, tuple[str, float, float]] = {}  # pid -> (kind, own CPU, reaped children's CPU)
        # The run's processes found so far, by pid, with their start times (a pid taken again is another process).
        # Found by their parent among /proc's new pids: a thread's `children` list can miss a process for good.
        self._start_times: dict[int, str] = {}
        self._looked_at: set[int] = set()
        self._done = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")

    def run(self) -> None:
        while not self._done.wait(0.1):
            for pid in list(self._start_times):
                self._sample(pid)
            self._find_new()

    def stop(self) -> None:
        self._done.set()
        self.join()

    def _find_new(self) -> None:
        with contextlib.suppress(OSError):
            new = sorted(int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and int(e.name) not in self._looked_at)
            for pid in new:  # a parent's pid comes before its children's, so a tree is found in one look
                self._looked_at.add(pid)
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                except OSError:
                    continue
                parent = int(stat[stat.rindex(")") + 2:].split()[1])
                # The zygote's children are the students': their CPU comes with its reaped children's.
                if pid == self.root or (parent in self._start_times and self.seen[parent][0] != "zygote"):
                    if (started := self._sample(pid)) is not None:
                        self._start_times[pid] = started

    def _sample(self, pid: int) -> str | None:
        """Read one process into `seen`; returns its start time (None: it has ended, or its pid is another's now)."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        comm, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if self._start_times.get(pid, fields[19]) != fields[19]:
            return None
        argv = cmdline.split(b"\0")
        module = argv[argv.index(b"-m") + 1] if b"-m" in argv[:-1] else b""
        kind = PROCESS_NAMES.get(comm) or PROCESS_KINDS.get(module, "grader")
        if not cmdline and pid in self.seen:
            kind = self.seen[pid][0]  # an ended process not yet waited for has no command line left: as it was
        own, reaped = (int(fields[11]) + int(fields[12])) / self._tick, (int(fields[13]) + int(fields[14])) / self._tick
        self.seen[pid] = (kind, own, reaped)
        return fields[19]

    def by_kind(self, total: float) -> dict[str, float]:
        """Seconds of CPU by kind of process; "not seen" is what `total` (the exact figure) holds beyond them."""
        kinds: dict[str, float] = defaultdict(float)
        for kind, own, reaped in self.seen.values():
            kinds[kind] += own
            if kind == "zygote":
                kinds["sandboxed children"] += reaped
        kinds["not seen"] = total - sum(kinds.values())
        return dict(kinds)


@dataclass
class MemoryGroup:
    """A memory cgroup of its own for one command (cgroup v2, else v1's memory controller), beside the
    bench's own: its peak covers every process the command starts. `path` is None when the machine
    gives none (not root, no memory controller); `why` then says so."""
    path: Path | None
    peak_file: str = ""
    why: str = ""

    @classmethod
    def create(cls, name: str) -> MemoryGroup:
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError as exc:
            return cls(None, why=f"no /proc/self/cgroup ({exc})")
        tries = []
        for line in lines:
            _, controllers, where = line.split(":", 2)
            if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").is_file():
                tries.append((Path("/sys/fs/cgroup") / where.lstrip("/"), "memory.peak"))
            elif "memory" in controllers.split(","):
                tries.append((Path("/sys/fs/cgroup/memory") / where.lstrip("/"), "memory.max_usage_in_bytes"))
        why = "no memory cgroup on this machine"
        for parent, peak in tries:
            try:
                (parent / name).mkdir()
            except OSError as exc:
                why = f"cannot create a cgroup under {parent} ({exc.strerror})"
                continue
            if (parent / name / peak).is_file():
                return cls(parent / name, peak)
            with contextlib.suppress(OSError):
                (parent / name).rmdir()
            why = f"a cgroup under {parent} has no {peak}"
        return cls(None, why=why)

    def enter(self) -> None:
        """In the command's process, before it starts: every process it starts is counted."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def close(self) -> tuple[int | None, str]:
        """(the peak in bytes, or None and why), the cgroup removed (its processes have all ended)."""
        if self.path is None:
            return None, self.why
        try:
            peak = int((self.path / self.peak_file).read_text())
        except (OSError, ValueError) as exc:
            peak, self.why = None, f"could not read {self.peak_file} ({exc})"
        for _ in range(50):  # a process that has just exited may still be counted for a moment
            try:
                self.path.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        return peak, self.why


# ---------------------------------------------------------------- one submission, stage by stage


# Each stage of grading one submission, as (module, attribute path, stage). A stage's time excludes the
# stages nested in it, so the stages add up to the whole; the rest is the hidden tests' own work in
# the grader (building inputs, the reference's cached answers, comparisons). A name that has moved
# makes the breakdown fail loudly (tests/engine/test_bench.py runs it), never report a stage as free.
STAGES = (
    ("grader.running.grade", "intake.materialise", "intake (scratch copy, notebook, quota)"),
    ("grader.running.grade", "mount_quota", "intake (scratch copy, notebook, quota)"),
    ("grader.running.grade", "unmount_quota", "intake (scratch copy, notebook, quota)"),
    ("grader.running.grade", "remove_tree", "intake (scratch copy, notebook, quota)"),
    ("grader.running.grade", "regrade.submission_digest", "digests (regrade)"),
    ("grader.running.grade", "regrade.current", "digests (regrade)"),
    ("grader.running.grade", "integrity.top_files", "integrity checks (files, printed claims)"),
    ("grader.running.grade", "integrity.named_paths", "integrity checks (files, printed claims)"),
    ("grader.running.grade", "integrity.printed_claims", "integrity checks (files, printed claims)"),
    ("grader.running.grade", "integrity.written_results", "integrity checks (files, printed claims)"),
    ("grader.judging.source_scan", "LimitedScan.scan", "scan"),
    ("grader.judging.score", "scan_submission", "scan"),
    ("grader.sandbox.transport", "SandboxTransport._spawn", "fork and confinement"),
    ("grader.sandbox.transport", "child_copy", "each child's own copy of the submission"),
    ("grader.sandbox.transport", "discard_copy", "each child's own copy of the submission"),
    ("grader.sandbox.transport", "SandboxTransport.call_many", "round trips"),
    ("grader.sandbox.transport", "SandboxTransport.close", "fork and confinement"),
    ("grader.judging.mutants", "Catalogue.identify", "mutant replay for hints"),
    ("grader.judging.mutants", "Catalogue.identify_forbidden", "mutant replay for hints"),
    ("grader.running.deliverables_process", "LimitedChecker.start", "deliverables checker"),
    ("grader.running.deliverables_process", "LimitedChecker.finish", "deliverables checker"),
    # What a grading run writes for one submission: the worker keeps its record, the class stage writes the
    # student's files (tests/engine/test_bench.py reads both callers, so this list follows them).
    ("grader.results.feedback", "keep_record", "feedback and records"),
    ("grader.results.feedback", "rewrite_changed", "feedback and records"),
)
GATES = "gates (does-the-work probes, their calls included)"
# The hidden tests' gates: their helpers that ask whether the student's code reacts to its input.
GATE_NAMES = re.compile(r"probe|is_real|require_real")
REST = "hidden tests' own work in the grader"


class StageClock:
    """Times the stages of grading one submission by wrapping the functions that do them."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.entered: dict[str, int] = defaultdict(int)  # times each wrapped function ran, by its path
        self.calls = self.batches = 0
        self._frames: list[list] = []  # [stage, start, time of the stages nested in it]
        self._undo: list = []

    def wrap(self, owner, attr: str, stage: str, path: str = "") -> None:
        original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        clock = self

        def timed(*args, **kwargs):
            if stage == "round trips" and any(f[0] == GATES for f in clock._frames):
                return original(*args, **kwargs)  # a gate's own calls are the gate's cost
            if stage == "round trips":
                clock.calls += len(args[1])
                clock.batches += 1
            clock.entered[path or attr] += 1
            clock._frames.append([stage, time.perf_counter(), 0.0])
            try:
                return original(*args, **kwargs)
            finally:
                stage_, start, nested = clock._frames.pop()
                elapsed = time.perf_counter() - start
                clock.seconds[stage_] += elapsed - nested
                if clock._frames:
                    clock._frames[-1][2] += elapsed

        setattr(owner, attr, timed)
        self._undo.append((owner, attr, original))

    def install(self, score, *, lesson) -> None:
        import importlib

        for module, path, stage in STAGES:
            *owners, attr = path.split(".")
            owner = importlib.import_module(module)
            for name in owners:
                owner = getattr(owner, name)
            self.wrap(owner, attr, stage, path)
        # The gates live in the lesson's hidden tests and the helper modules they import.
        seen: set[int] = set()
        package = lesson.package
        for _, _, test in lesson.hidden_tests:
            for module in [test.__globals__, *(vars(v) for v in test.__globals__.values() if type(v).__name__ == "module")]:
                if id(module) in seen or not str(module.get("__name__", "")).startswith(package):
                    continue
                seen.add(id(module))
                for name, value in list(module.items()):
                    if callable(value) and GATE_NAMES.search(name) and getattr(value, "__module__", None) == module["__name__"]:
                        self.wrap(_ModuleDict(module), name, GATES)

    def uninstall(self) -> None:
        while self._undo:
            owner, attr, original = self._undo.pop()
            setattr(owner, attr, original)

    def reset(self) -> None:
        self.seconds.clear()
        self.entered.clear()
        self.calls = self.batches = 0


class _ModuleDict:
    """setattr/getattr on a module's namespace given as its dict."""

    def __init__(self, namespace: dict):
        object.__setattr__(self, "namespace", namespace)

    def __getattr__(self, name):
        return self.namespace[name]

    def __setattr__(self, name, value):
        self.namespace[name] = value


def one_submission_breakdown(*, lesson, repeats: int = 3, uid_base: int = BENCH_UID_BASE) -> dict:
    """Grade a reference copy and a copy with a planted bug `repeats` times each as a grading run does
    (grade_one: scratch copy, sandbox, hidden tests, deliverables helper; then the worker's record and the
    student's files the class stage writes), the first time a warm-up; returns {"reference"|"bug": the last
    grading's stage times, ...}."""
    import dataclasses

    from grader.results import feedback
    from grader.results.storage import check_name

    from grader.intake import submissions as intake

    from grader.running import grade as run
    from grader.running.deliverables_process import LimitedChecker
    from grader.sandbox import DEFAULT_CONFIG
    from grader.sandbox.zygote import Zygote

    config = dataclasses.replace(DEFAULT_CONFIG, uid_base=uid_base)
    # Where a grading run puts its scratch copies: a TMPDIR the sandbox's uid cannot enter (under pytest's or
    # /root's 0700 folders) would fail every call of this submission, as it would a grading run's.
    root = Path(tempfile.mkdtemp(prefix="grader-bench-one-", dir=run.scratch_base()))
    os.chmod(root, 0o711)
    subs, out, work = root / "class", root / "out", root / "work"
    for folder in (subs, work, work / "slot0"):
        folder.mkdir(mode=0o711)
    plant(subs / "reference", None, lesson=lesson)
    planted = plant(subs / "bug", 0, lesson=lesson)
    found = {s.name: s for s in intake.discover(subs)}
    breakdown: dict = {}
    clock = StageClock()
    try:
        with contextlib.ExitStack() as stack, Zygote(slots=1, config=config, lesson=lesson) as zygote:
            score = run._preload(lesson)[0]  # as a grading worker has it: the reference's answers cached
            limits = lesson.limits.get("deliverables", {})
            scanner = score.limited_scan(lesson=lesson, **lesson.limits.get("scan", {}))
            stack.callback(scanner.close)
            with LimitedChecker(memory_bytes=limits.get("memory_bytes", 1 << 30),
                                seconds=limits.get("seconds", 30), lesson=lesson) as checker:
                zygote.wait_ready(0)
                clock.install(score, lesson=lesson)
                helpers = {"deliverables checker": checker, "scan helper": scanner}
                words = feedback.Words.of(lesson.rubric())
                for name in ("reference", "bug") if planted else ("reference",):
                    for i in range(repeats):
                        clock.reset()
                        helpers_before = {what: h.cpu_used() for what, h in helpers.items()}
                        start = time.perf_counter()
                        result = run.grade_one(found[name], slot=0, work=work, zygote=zygote, config=config,
                                               score=score, lesson=lesson, checker=checker, scanner=scanner)
                        # As a run writes it: the worker's record, then the class stage's student files, into a
                        # folder of their own each time (a first run finds none to compare with).
                        folder = out / f"{name}-{i}"
                        feedback.keep_record(folder, result)
                        feedback.rewrite_changed(folder / check_name(result.submission), result, words,
                                                 feedback.DEFAULT_RELEASE, lesson=lesson)
                        total = time.perf_counter() - start
                        helpers_cpu = {what: _spent(helpers_before[what], h.cpu_used()) for what, h in helpers.items()}
                    stages = dict(clock.seconds)
                    stages[REST] = total - sum(stages.values())
                    breakdown[name] = {"total": total, "stages": stages, "calls": clock.calls,
                                       "batches": clock.batches, "entered": dict(clock.entered),
                                       "layers": dict(result.isolation), "helpers": helpers_cpu, "score": result.total,
                                       "max": result.max_total}
                breakdown["view"] = dict(zygote.view)
                breakdown["child_peak_mb"] = _child_peak_mb(zygote, work, config, score, found["reference"], lesson)
    finally:
        clock.uninstall()
        shutil.rmtree(root, ignore_errors=True)
    return breakdown


def _spent(before: float | None, after: float | None) -> float | None:
    """CPU seconds between two readings of one helper process; None if either is missing (no /proc, or the helper
    was started again in between)."""
    return None if before is None or after is None or after < before else after - before


def _child_peak_mb(zygote, work, config, score, sub, lesson) -> float:
    """The peak RSS (VmHWM) of one student child, read before it ends."""
    from grader.intake import submissions as intake
    from grader.sandbox.transport import SandboxTransport

    scratch = Path(tempfile.mkdtemp(prefix="peak", dir=work / "slot0"))
    intake.materialise(sub, scratch, lesson=lesson)
    with SandboxTransport(zygote=zygote, slot=0, scratch=scratch, config=config) as transport:
        score.grade_submission(name="peak", directory=scratch, transport=transport, lesson=lesson)
        status = Path(f"/proc/{transport._child.pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


# ---------------------------------------------------------------- the report


def student_check_seconds(*, lesson, repeats: int = 3) -> dict:
    """A student's `make test` on the reference in a built release of `lesson`, wall seconds: the first run
    (it starts the release's warm checker, when the lesson's Makefile has one), the median of `repeats` runs
    after it, and the median of `repeats` runs of plain pytest (WARM=0). `ok` is false when a run failed."""
    from grader.release import student_release

    root = Path(tempfile.mkdtemp(prefix="bench-check-"))
    home = Path(tempfile.mkdtemp(prefix="warm-", dir="/tmp"))  # the warm checker's socket: short, private
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "MAKEFLAGS", "MAKELEVEL", "PYTEST_ADDOPTS")}
    env["XDG_RUNTIME_DIR"] = str(home)

    def make(target: str, warm: str) -> tuple[float, bool]:
        start = time.perf_counter()
        done = subprocess.run(["make", target, f"PYTHON={sys.executable}"], cwd=folder, env=dict(env, WARM=warm),
                              capture_output=True, text=True, timeout=600)
        return time.perf_counter() - start, done.returncode == 0

    try:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            student_release.main(out=str(root / "dist"), lesson=lesson)
        folder = root / "dist" / lesson.name
        for name in lesson.file_of.values():
            shutil.copyfile(lesson.solutions / name, folder / name)
        first, ok = make("test", "1")
        warm = [make("test", "1") for _ in range(repeats)]
        plain = [make("test", "0") for _ in range(repeats)]
        return {"first": first, "warm": statistics.median(t for t, _ in warm),
                "plain": statistics.median(t for t, _ in plain), "repeats": repeats,
                "ok": ok and all(good for _, good in warm + plain)}
    finally:
        if (root / "dist" / lesson.name / "Makefile").exists():
            make("stop", "1")
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def _goal(met: bool) -> str:
    return "met" if met else "NOT met"


def main(*, lesson, n: int = 200, jobs: int | None = None, keep: bool = False, base: str | None = None,
         scale: int | None = None, repeats: int = 1, torch_repeats: int = 3, uid_base: int = BENCH_UID_BASE,
         check_repeats: int = 3) -> int:
    jobs = jobs or os.cpu_count() or 1
    cores = os.cpu_count() or 1
    root = Path(tempfile.mkdtemp(prefix="grader-bench-"))
    os.chmod(root, 0o711)
    try:
        return _bench(root, lesson=lesson, n=n, jobs=jobs, cores=cores, base=base, scale=scale, repeats=repeats,
                      torch_repeats=torch_repeats, uid_base=uid_base, keep=keep, check_repeats=check_repeats)
    finally:
        if keep:
            print(f"classes and outputs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _bench(root: Path, *, lesson, n, jobs, cores, base, scale, repeats, torch_repeats, uid_base, keep,
           check_repeats) -> int:
    subs = root / "class"
    subs.mkdir()
    counts = build_class(subs, n, lesson=lesson)
    print(f"{lesson.title} grading benchmark: {n} submissions ({counts['reference']} reference copies, "
          f"{counts['mutant']} with one planted bug), {cores} cores, --jobs {jobs}"
          + (f", this kit and BASE={base} in turns" if base else ""), flush=True)
    load_before = os.getloadavg()[0]

    with contextlib.ExitStack() as stack:
        versions = [("this kit", KIT)]
        if base:
            versions.append((f"BASE {base}", stack.enter_context(checkout(base))))
        runs: dict[str, list[ClassRun]] = {label: [] for label, _ in versions}
        imports: list[float] = []  # the bare torch imports, timed in turns with the gradings
        for turn in range(repeats):
            timed = torch_import_times(torch_repeats)
            imports += timed
            print(f"  bare `python -c \"import torch\"`, turn {turn + 1}: "
                  + ", ".join(f"{t:.2f}" for t in timed) + " s", flush=True)
            for label, tree in versions:
                out = root / f"out-{label.split()[0]}-{turn}"
                done = grade_class(label, tree, subs, out, lesson=lesson, n=n, jobs=jobs, uid_base=uid_base)
                if done.failed:
                    print(f"{label}: grading failed ({done.failed})")
                    return 1
                runs[label].append(done)
                print(f"  {label}, turn {turn + 1}: {done.wall:.1f} s", flush=True)
                if not keep:
                    shutil.rmtree(out, ignore_errors=True)
    big = None
    if scale:
        big_subs = root / f"class-{scale}"
        big_subs.mkdir()
        build_class(big_subs, scale, lesson=lesson)
        big = grade_class("this kit", KIT, big_subs, root / f"out-{scale}", lesson=lesson, n=scale, jobs=jobs, uid_base=uid_base)
        if big.failed:
            print(f"grading {scale} failed ({big.failed})")
            return 1
    one = one_submission_breakdown(lesson=lesson, uid_base=uid_base)
    check = student_check_seconds(lesson=lesson, repeats=check_repeats)
    load_after = os.getloadavg()[0]

    def best(label):  # the quickest turn: the one the machine's other work slowed least
        return min(runs[label], key=lambda r: r.wall)

    # The quickest import, as the quickest turn is the class's figure: both the least slowed by other work. (A
    # median beside a best turn would flatter the ratio whenever the machine is busy.)
    torch_s = min(imports)

    head = best("this kit")
    print()
    print(f"== the class ({n} submissions, start-up and class files included; best of {repeats} turn(s))")
    print(f"bare `python -c \"import torch\"`: {torch_s:.2f} s (quickest of {len(imports)}, timed in turns with "
          f"the gradings; median {statistics.median(imports):.2f} s)")
    for label in runs:
        r = best(label)
        print(f"{label}: {r.wall:.1f} s, {r.per_submission * 1000:.0f} ms per submission "
              f"= {r.per_submission / torch_s:.3f}x a bare torch import; {r.records} records, {r.full} with every "
              f"code test passed; CPU of its whole process tree {r.cpu:.1f} s ({r.cpu / n * 1000:.0f} ms per submission)"
              + (f"; first row after {r.first_row:.1f} s, last after {r.last_row:.1f} s" if r.first_row else ""))
    for label in runs:
        kinds = best(label).cpu_by_kind
        print(f"{label}, CPU per submission by process: " + ", ".join(
            f"{kind} {kinds[kind] / n * 1000:.1f} ms" for kind in KIND_ORDER if kind in kinds))
    print()
    print("== figures and their goals")
    ratio = head.per_submission / torch_s
    print(f"per submission / bare torch import: {ratio:.3f}x [goal < {GOAL_RATIO}x: {_goal(ratio < GOAL_RATIO)}]")
    if base:
        b = best(f"BASE {base}")
        print(f"per submission, this kit / BASE {base}: {head.per_submission * 1000:.0f} / "
              f"{b.per_submission * 1000:.0f} ms = {head.per_submission / b.per_submission:.2f} "
              f"[goal <= 1: {_goal(head.per_submission <= b.per_submission)}]")
    if big:
        growth = big.per_submission / head.per_submission - 1
        print(f"per submission at {scale} / at {n}: {big.per_submission * 1000:.0f} / {head.per_submission * 1000:.0f} ms "
              f"= {growth:+.1%} [goal at most {GOAL_SCALE:.0%} above: {_goal(growth <= GOAL_SCALE)}]")
        if big.steady and head.steady:
            print(f"  the same between the first and the last row (no start-up, no class files): "
                  f"{big.steady * 1000:.0f} / {head.steady * 1000:.0f} ms = {big.steady / head.steady - 1:+.1%}")
        if big.cpu and head.cpu:
            # CPU, unlike the wall clock, is not stretched by what else runs on the machine between the two runs.
            print(f"  CPU of the whole process tree per submission: {big.cpu / big.n * 1000:.0f} / "
                  f"{head.cpu / head.n * 1000:.0f} ms = {(big.cpu / big.n) / (head.cpu / head.n) - 1:+.1%}")
    for r in [head] + ([big] if big else []):
        if r.peak_bytes is None:
            print(f"peak memory of the grading run ({r.n}): not measured ({r.peak_why}) "
                  f"[goal < {GOAL_PEAK_BYTES >> 20} MB: not checked]")
        else:
            print(f"peak memory of the grading run ({r.n}, cgroup peak of its whole process tree): "
                  f"{r.peak_bytes / 2**20:.0f} MB [goal < {GOAL_PEAK_BYTES >> 20} MB: {_goal(r.peak_bytes < GOAL_PEAK_BYTES)}]")
    child = one["child_peak_mb"]
    print(f"peak RSS of one student child: {child:.0f} MB [goal < {GOAL_CHILD_MB} MB: {_goal(child < GOAL_CHILD_MB)}]")
    print(f"student `make test` on the reference in a built release, warm: {check['warm']:.2f} s (median of "
          f"{check['repeats']}; first run {check['first']:.2f} s, plain pytest {check['plain']:.2f} s)"
          + ("" if check["ok"] else "; a run FAILED")
          + f" [goal < {GOAL_STUDENT_SECONDS:g} s: {_goal(check['ok'] and check['warm'] < GOAL_STUDENT_SECONDS)}]")
    print(f"machine load (1-min average) before/after: {load_before:.1f}/{load_after:.1f} on {cores} cores "
          "(other work on the machine slows every wall figure above; ratios between versions are of one run)")
    print()
    _print_breakdown(one)
    return 0


def _print_breakdown(one: dict) -> None:
    kinds = [k for k in ("reference", "bug") if k in one]
    print("== one submission, stage by stage (ms; graded as a worker does, its files as the class stage "
          "writes them, after a warm-up grading of it)")
    names = [stage for _, _, stage in STAGES] + [GATES, REST]
    order = list(dict.fromkeys(names))
    header = f"{'stage':<52}" + "".join(f"{k + ' copy' if k == 'reference' else 'one planted bug':>18}" for k in kinds)
    print(header)
    for stage in order:
        print(f"{stage:<52}" + "".join(f"{one[k]['stages'].get(stage, 0.0) * 1000:>18.1f}" for k in kinds))
    print(f"{'total':<52}" + "".join(f"{one[k]['total'] * 1000:>18.1f}" for k in kinds))
    for k in kinds:
        o = one[k]
        trips = o["stages"].get("round trips", 0.0)
        print(f"{k}: {o['score']:g}/{o['max']:g} points; {o['calls']} calls outside the gates in {o['batches']} "
              f"batches, {trips / max(o['calls'], 1) * 1000:.2f} ms per call's round trip (the child's work included); "
              f"{o['entered'].get('SandboxTransport._spawn', 0)} child(ren) started")
    # The helpers' CPU is not in the table's wall times: the checker works while the calls run, and the scan's
    # wait for its helper is the "scan" row.
    def spent(what: str) -> str:
        figures = [one[k]["helpers"].get(what) for k in kinds]
        if all(f is None for f in figures):
            return f"{what}: none ran"  # a lesson without deliverable checks starts no checker
        return f"{what} " + " / ".join("-" if f is None else f"{f * 1000:.1f}" for f in figures) + " ms"

    print("the helpers' own processes, CPU per submission (" + " / ".join(kinds) + "; beside the grading, not in the "
          "total): " + ", ".join(spent(what) for what in one[kinds[0]]["helpers"]))
    layers = one["reference"]["layers"]
    print(f"isolation layers active: {', '.join(k for k, v in sorted(layers.items()) if v) or 'none'}")
    view = one.get("view") or {}
    if view:
        print(f"start-up check of the child's view: {view['cpu_seconds']:.2f} s of CPU in its child "
              f"({view['probe']['files']} files on the import path, {view['probe']['seconds']:.2f} s with the lazy "
              f"imports), of which the zygote's start-up waited {view['zygote_waited_seconds']:.2f} s")


def _code_score(record: dict) -> float:
    return round(sum(t["score"] for t in record["tests"] if t["component"] != "deliverables"), 4)


def _code_max(record: dict) -> float:
    return round(sum(t["max_score"] for t in record["tests"] if t["component"] != "deliverables"), 4)


# ---------------------------------------------------------------- similarity: `python -m grader.devtools.bench similarity`



class _Renamer(ast.NodeTransformer):
    """Every name the author chose gets a new one; library names (torch, nn, F, math) stay."""

    KEEP = {"torch", "nn", "F", "math", "self", "super", "float", "int", "range", "len", "ValueError",
            "NotImplementedError", "isinstance", "print", "zip", "list", "tuple", "dict", "sum", "max", "min"}

    def __init__(self, seed: int):
        self.names: dict[str, str] = {}
        self.seed = seed

    def new(self, name: str) -> str:
        if name in self.KEEP or name.startswith("__"):
            return name
        return self.names.setdefault(name, f"v{self.seed}_{len(self.names)}_{name[::-1].lower()}")

    def visit_Name(self, node):
        node.id = self.new(node.id)
        return node

    def visit_arg(self, node):
        node.arg = self.new(node.arg)
        node.annotation = None
        return node

    def visit_FunctionDef(self, node):
        node.name = self.new(node.name)
        body = node.body
        if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:]  # no docstring
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node):
        node.name = self.new(node.name)
        self.generic_visit(node)
        node.body.reverse()  # methods in another order
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            node.attr = self.new(node.attr)
        return node

    def visit_ImportFrom(self, node):
        for alias in node.names:
            alias.name = self.new(alias.name)
        return node


def disguised(source: str, seed: int) -> str:
    """The same program renamed, reordered, reformatted (ast.unparse), without docstrings or the
    author's comments, with comments of its own: every disguise a copier reaches for at once."""
    tree = _Renamer(seed).visit(ast.parse(source))
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    rest = [n for n in tree.body if n not in imports and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    random.Random(seed).shuffle(rest)
    tree.body = imports + rest
    out = ["# my own work, written from scratch"]
    for n, line in enumerate(ast.unparse(ast.fix_missing_locations(tree)).split("\n")):
        out.append(line)
        if n % 5 == 4 and line.strip() and not line.rstrip().endswith((":", ",", "(", "[")):
            out.append(" " * (len(line) - len(line.lstrip())) + "# step done")
    return "\n".join(out) + "\n"


def build_similarity_class(root: Path, n: int, *, lesson) -> int:
    """n submissions, each a disguised copy of one of the correct fixtures or the reference, with
    its README and the lesson's bench pictures resized: every submission is in a cluster of about n/12,
    which is the costly case (every pair in a cluster is compared in full). Returns the number of sources."""
    from PIL import Image

    sources = sorted(lesson.variants.iterdir()) + [lesson.solutions]  # correct implementations, with deliverables
    for i in range(n):
        source, rng = sources[i % len(sources)], random.Random(i)
        folder = root / f"student_{i:03d}"
        folder.mkdir()
        for name in lesson.file_of.values():  # the contract's files: what a student hands in as code
            if (source / name).is_file():
                (folder / name).write_text(disguised((source / name).read_text(encoding="utf-8"), i), encoding="utf-8")
        shutil.copyfile(source / "README.md", folder / "README.md")
        for picture in lesson.bench_pictures:
            with Image.open(source / picture) as image:
                scale = rng.uniform(0.6, 1.0)
                image.convert("RGB").resize((int(image.width * scale), int(image.height * scale))).save(
                    folder / picture)
    return len(sources)


def similarity_bench(*, lesson, n: int = 500, jobs: int | None = None, keep: bool = False) -> int:
    jobs = jobs or os.cpu_count() or 1
    root = Path(tempfile.mkdtemp(prefix="similarity-bench-"))
    subs, out = root / "class", root / "out"
    subs.mkdir()
    sources = build_similarity_class(subs, n, lesson=lesson)
    print(f"similarity benchmark: {n} submissions, disguised copies of {sources} sources (clusters of about "
          f"{n // sources}: every pair in a cluster is compared in full), {os.cpu_count()} cores, --jobs {jobs}",
          flush=True)
    load_before = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "grader", "similarity", str(subs), "--out", str(out),
                           "--jobs", str(jobs), "--lesson", lesson.ref], cwd=KIT, capture_output=True, text=True)
    total = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
        return 1
    rows = (out / "similarity.csv").read_text(encoding="utf-8").splitlines()[1:]
    flagged = sum(1 for r in rows if ",yes," in r)
    print(done.stdout.strip())
    print(f"total (python -m grader similarity, start-up included): {total:.1f} s "
          f"[target < 60 s for 500 on 2 cores: {'met' if total < 60 * n / 500 else 'NOT met'}]")
    print(f"{len(rows)} rows in similarity.csv, {flagged} flagged; similarity.html "
          f"{(out / 'similarity.html').stat().st_size / 2**20:.1f} MB")
    print(f"CPU time of the whole run: {cpu:.1f} s; machine load (1-min average) before/after: "
          f"{load_before:.1f}/{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if keep:
        print(f"class and outputs kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m grader.devtools.bench", description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=("grade", "similarity"), default="grade",
                        help="grade (default): the grading benchmark; similarity: the class similarity report")
    parser.add_argument("-n", type=int, default=None, help="submissions in the synthetic class (200; 500 for similarity)")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the class and outputs for inspection")
    parser.add_argument("--base", default=None, metavar="COMMIT",
                        help="grade the same class with this commit too, in turns with this kit (make bench BASE=...)")
    parser.add_argument("--scale", type=int, default=None, metavar="N",
                        help="grade a class of N too and compare the per-submission figure (e.g. 1000)")
    parser.add_argument("--repeats", type=int, default=1, help="turns of each version (the quickest is reported)")
    parser.add_argument("--torch-repeats", type=int, default=3,
                        help="bare torch imports timed before each turn (the quickest of all is used)")
    parser.add_argument("--check-repeats", type=int, default=3,
                        help="student `make test` runs timed, warm and plain (the median of each is used)")
    parser.add_argument("--uid-base", type=int, default=BENCH_UID_BASE,
                        help=f"sandbox uids of the bench's slots (default {BENCH_UID_BASE}, away from a grading run's)")
    parser.add_argument("--lesson", default=None, metavar="NAME|PATH",
                        help="the lesson whose reference and catalogue make the class (default: as `python -m grader`)")
    args = parser.parse_args()
    from grader.lesson import LessonError, load_lesson

    try:
        the_lesson = load_lesson(args.lesson)
    except LessonError as error:
        sys.exit(f"bench: {error}")
    if args.mode == "similarity":
        sys.exit(similarity_bench(lesson=the_lesson, n=args.n or 500, jobs=args.jobs, keep=args.keep))
    sys.exit(main(lesson=the_lesson, n=args.n or 200, jobs=args.jobs, keep=args.keep, base=args.base, scale=args.scale,
                  repeats=args.repeats, torch_repeats=args.torch_repeats, uid_base=args.uid_base,
                  check_repeats=args.check_repeats))

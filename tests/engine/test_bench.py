"""grader/devtools/bench.py (`make bench`): it runs, on a tiny class, with a BASE side by side, and says what it
measured beside each goal; the per-stage breakdown names every stage and each stage that must cost
something does. Timing figures themselves are never asserted (speed lives in the bench's output)."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import KIT, uid_base_for_tests  # noqa: E402

from grader.devtools import bench  # noqa: E402

N = 2
# The base the speed issue compares with (the end of the first round: before the lesson value, so the bench
# drives its own run.main), when this clone has it and torch is the CPU build; else the committed HEAD. (A
# shallow clone has no aeb6d03; and aeb6d03 capped a child's address space at 768 MB, which PyPI's CUDA build
# maps 3.2 GB of before any student code runs, so it grades nothing right there: the bug issue 28 fixed.)
FIRST_ROUND = "aeb6d03"
_CPU_BUILD = torch.version.cuda is None
BASE = FIRST_ROUND if _CPU_BUILD and subprocess.run(
    ["git", "-C", str(KIT), "cat-file", "-e", f"{FIRST_ROUND}^{{commit}}"], capture_output=True).returncode == 0 else "HEAD"


def test_make_bench_on_a_tiny_class_beside_a_base_commit(tmp_path):
    # The base's files taken from git into a temporary folder and graded in turns with this tree; both must
    # grade every submission of the same class.
    temporary = tmp_path / "tmp"
    temporary.mkdir(mode=0o1777)
    temporary.chmod(0o1777)  # as /tmp: the sandbox's uids pass through it
    done = subprocess.run([sys.executable, "-m", "grader.devtools.bench", "-n", str(N), "--jobs", "1", "--base", BASE,
                           "--torch-repeats", "1", "--check-repeats", "1", "--uid-base", str(uid_base_for_tests(9))],
                          cwd=KIT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TMPDIR": str(temporary)})
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    # Nothing of the gradings, the base's or this kit's, outlives the bench in the machine's temporary folder.
    assert sorted(p.name for p in temporary.iterdir()) == [], sorted(p.name for p in temporary.iterdir())

    # Both versions graded the whole class: one with a planted bug, the rest full marks.
    for label in ("this kit", f"BASE {BASE}"):
        line = next(x for x in out.splitlines() if x.startswith(f"{label}: "))
        assert f"{N} records, {N - 1} with every code test passed" in line, line

    # The bare torch import is timed in turns with the gradings, and the quickest pairs with the quickest turn.
    turns = [x.strip() for x in out.splitlines() if x.startswith("  ")]
    assert turns[0].startswith("bare `python -c \"import torch\"`, turn 1: "), turns
    assert turns[1].startswith("this kit, turn 1: ") and turns[2].startswith(f"BASE {BASE}, turn 1: "), turns
    timed = [float(t) for t in turns[0].split(": ", 1)[1].removesuffix(" s").split(", ")]
    torch_line = next(x for x in out.splitlines() if x.startswith("bare `python -c \"import torch\"`: "))
    assert torch_line.startswith(f"bare `python -c \"import torch\"`: {min(timed):.2f} s (quickest of 1, "), torch_line

    # The tree's CPU by the process that spent it (--jobs 1: the grader grades in its own process, no workers).
    split = next(x for x in out.splitlines() if x.startswith("this kit, CPU per submission by process: "))
    parts = {k: float(v) for k, v in re.findall(r"([a-z][a-z ]+?) (-?[\d.]+) ms", split.split(": ", 1)[1])}
    assert {"sandboxed children", "zygote", "grader", "deliverables checker", "scan helper", "not seen"} <= set(parts), split
    assert all(parts[k] > 0 for k in ("sandboxed children", "zygote", "grader", "deliverables checker")), split
    assert next(x for x in out.splitlines() if x.startswith(f"BASE {BASE}, CPU per submission by process: "))

    # Every figure stands beside its goal, and says whether it met it.
    figures = out.split("== figures and their goals\n", 1)[1].split("\n\n", 1)[0].splitlines()
    goals = [x for x in figures if not x.startswith("machine load")]
    assert len(goals) >= 4, figures
    assert all(re.search(r"\[goal [^\]]+: (met|NOT met|not checked)\]$", x) for x in goals), goals
    assert any(x.startswith("per submission / bare torch import") for x in goals)
    assert any(x.startswith(f"per submission, this kit / BASE {BASE}") for x in goals)
    assert any(x.startswith("peak memory of the grading run") for x in goals)
    check = next(x for x in goals if x.startswith("student `make test` on the reference in a built release"))
    assert "FAILED" not in check, check  # the reference passes its own visible tests, warm and plain

    # The breakdown: each stage a row with a figure for both submissions, the rows adding up to the total.
    table = out.split("== one submission, stage by stage", 1)[1].splitlines()[2:]
    rows = {}
    for line in table:
        m = re.fullmatch(r"(.+?)\s+(-?[\d.]+)\s+(-?[\d.]+)", line)
        if not m:
            break
        rows[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    stages = list(dict.fromkeys([s for _, _, s in bench.STAGES] + [bench.GATES, bench.REST]))
    assert list(rows) == stages + ["total"], rows
    for col in (0, 1):
        assert abs(sum(rows[s][col] for s in stages) - rows["total"][col]) < 0.5, rows
    # Work that every submission costs, timed where it happens (a renamed function would read 0 here).
    for stage in ("intake (scratch copy, notebook, quota)", "digests (regrade)",
                  "integrity checks (files, printed claims)", "scan", "fork and confinement",
                  "each child's own copy of the submission",
                  "round trips", "deliverables checker", "feedback and records", bench.GATES):
        assert rows[stage][0] > 0 and rows[stage][1] > 0, (stage, rows[stage])
    # Only the planted bug's failing tests are replayed on the catalogue.
    assert rows["mutant replay for hints"][0] == 0 and rows["mutant replay for hints"][1] > 0, rows
    assert re.search(r"^reference: ([\d.]+)/\1 points; [1-9]\d* calls outside the gates", out, re.M), out
    assert "isolation layers active: " in out
    # The helper processes' own CPU, which the table's wall times cannot show (the checker works beside the calls).
    helpers = next(x for x in out.splitlines() if x.startswith("the helpers' own processes"))
    figures = dict(re.findall(r"(deliverables checker|scan helper) ([\d.]+ / [\d.]+) ms", helpers))
    assert set(figures) == {"deliverables checker", "scan helper"}, helpers
    assert all(float(v) > 0 for v in figures["deliverables checker"].split(" / ")), helpers


def test_a_base_that_is_no_commit_is_refused_with_what_to_give():
    done = subprocess.run([sys.executable, "-c", "from grader.devtools import bench\n"
                           "with bench.checkout('no-such-commit-0000'):\n    pass"],
                          cwd=KIT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "BASE=no-such-commit-0000 is not a commit" in done.stderr and "give a commit id" in done.stderr


def test_the_breakdown_writes_what_a_grading_run_writes():
    """The per-stage breakdown's "feedback and records" times the functions a grading run calls for one submission:
    the worker's (grader/running/grade.py) and the class stage's share (grader/results/classreport.py), read from
    their source, so a change to what a run writes cannot leave the bench timing something else."""
    import ast
    import inspect

    from grader.results import classreport
    from grader.running import grade

    def feedback_calls(function) -> set[str]:
        tree = ast.parse(inspect.getsource(function).lstrip())
        return {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value).endswith("feedback")}

    run_writes = feedback_calls(grade._Worker.grade) | feedback_calls(classreport.write_class)
    timed = {attr for module, attr, stage in bench.STAGES if module == "grader.results.feedback"}
    assert run_writes and run_writes == timed, (run_writes, timed)


def test_the_cpu_by_process_keeps_the_kind_of_a_process_that_has_ended(monkeypatch):
    # A process that has ended and is not yet waited for has an empty command line: read then, the zygote was
    # counted as the grader, and its children's CPU with it, in some runs and not others.
    monkeypatch.setitem(bench.PROCESS_KINDS, b"timeit", "zygote")  # any module run with -m stands for the zygote
    proc = subprocess.Popen([sys.executable, "-m", "timeit", "-n", "1", "-r", "1", "import time; time.sleep(0.5)"],
                            stdout=subprocess.DEVNULL)
    try:
        tree = bench.TreeCpu(proc.pid)
        deadline = time.monotonic() + 30
        while tree.seen.get(proc.pid, ("",))[0] != "zygote" and time.monotonic() < deadline:
            tree._find_new()  # as the sampling thread does, one look at a time
            tree._sample(proc.pid)
        assert tree.seen[proc.pid][0] == "zygote", tree.seen
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the process never ended"
            time.sleep(0.02)
        assert Path(f"/proc/{proc.pid}/cmdline").read_bytes() == b""  # what misled the count
        tree._sample(proc.pid)
        assert tree.seen[proc.pid][0] == "zygote", tree.seen
        assert "zygote" in tree.by_kind(total=10.0)
    finally:
        proc.wait()

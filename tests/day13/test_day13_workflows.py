"""Day 13's release through the student workflow run locally (its deliverables among the checks), and the
instructor workflow's grade step on its demo class. The workflows' structure, and the student workflow on
the toy lesson, are tested in tests/engine/test_workflows.py."""
from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from grader.release import notebook

from grader.release import student_release as release
from grader.lesson import load_lesson  # noqa: E402

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage

ROOT = Path(__file__).resolve().parents[2]
STUDENT = release.TEMPLATES / "autograde.yml"
INSTRUCTOR = release.TEMPLATES / "instructor-grade.yml"


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert "on" in data, f"{path.name}: quote the `on` key, or YAML 1.1 reads it as True"
    return data


def _commands(step: dict) -> list[str]:
    """The shell lines of a `run` step, with line continuations joined."""
    return [line.strip() for line in step.get("run", "").replace("\\\n", " ").splitlines() if line.strip()]


# --------------------------------------------------------------------------- the student steps, run here

@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    release.build(out=out, lesson=DAY13)
    return out / "day13"


def _run_student_workflow(folder: Path) -> tuple[dict, str, str]:
    """Every `run` step of the shipped workflow as one script, except the installs (the venv has them)."""
    data = _load(folder / ".github" / "workflows" / "autograde.yml")
    (job,) = data["jobs"].values()
    lines = [c for s in job["steps"] for c in _commands(s) if "pip install" not in c]
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    summary, output = folder.parent / f"{folder.name}-summary.md", folder.parent / f"{folder.name}-output.txt"
    env = dict(os.environ, GITHUB_STEP_SUMMARY=str(summary), GITHUB_OUTPUT=str(output),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    result = subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{script}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    (line,) = [l for l in output.read_text(encoding="utf-8").splitlines() if l.startswith("result=")]
    return json.loads(base64.b64decode(line.removeprefix("result="))), summary.read_text(encoding="utf-8"), result.stdout


def _by_part(result: dict) -> dict[str, float]:
    parts: dict[str, float] = {}
    for test in result["tests"]:
        part = test["name"].split(":")[0]
        parts[part] = parts.get(part, 0.0) + test["score"]
    return parts


def test_student_workflow_on_the_blank_release(released, tmp_path):
    folder = tmp_path / "blank"
    shutil.copytree(released, folder)
    result, summary, _ = _run_student_workflow(folder)
    points = json.loads((folder / "tools" / "points.json").read_text(encoding="utf-8"))
    assert result["version"] == 1 and result["status"] == "fail"
    assert result["max_score"] == pytest.approx(sum(points.values()))
    assert sum(t["score"] for t in result["tests"]) == 0
    assert all(t["status"] == "fail" for t in result["tests"])
    code_tests = [t for t in result["tests"] if not t["name"].startswith("deliverables")]
    assert code_tests and all("not implemented yet" in t["message"] for t in code_tests)
    assert "0 / " in summary and "not implemented yet" in summary and "not your grade" in summary


def test_student_workflow_on_a_sample_submission(released, tmp_path):
    """The reference code in the release; the deliverables only where the kit has a reference set."""
    folder = tmp_path / "sample"
    shutil.copytree(released, folder)
    for module in DAY13.modules:
        shutil.copyfile(DAY13.solutions / f"{module}.py", folder / f"{module}.py")
    deliverables = [p for p in DAY13.solutions.iterdir() if p.is_file() and p.suffix != ".py"]
    for path in deliverables:
        shutil.copyfile(path, folder / path.name)
    result, summary, stdout = _run_student_workflow(folder)
    points = json.loads((folder / "tools" / "points.json").read_text(encoding="utf-8"))
    scores = _by_part(result)
    for part in DAY13.modules:
        assert scores[part] == pytest.approx(points[part]), (part, scores)
    checks = [t for t in result["tests"] if t["name"].startswith("deliverables")]
    assert {t["name"] for t in checks} >= {"deliverables: analysis", "deliverables: readme"}
    if any(p.name.lower() == "analysis.md" for p in deliverables):
        assert scores["deliverables"] == pytest.approx(points["deliverables"]), checks
        assert result["status"] == "pass"
    else:
        assert all(t["message"] for t in checks if t["status"] == "fail")
    assert f"**{sum(t['score'] for t in result['tests']):g} / {result['max_score']:g}**" in summary
    assert "| self_attention |" in summary and "passed" in stdout


def _notebook_student(released, tmp_path):
    """A copy of the release (folder), the source notebook, each solution cell's reference code by grade id, and the
    student's notebook as released, to fill and write back."""
    import nbformat

    folder = tmp_path / "notebook"
    shutil.copytree(released, folder)
    source = notebook.build(student=False, lesson=DAY13)
    reference = {c.metadata["nbgrader"]["grade_id"]: "\n".join(l for l in c.source.split("\n") if "SOLUTION" not in l)
                 for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")}
    return folder, source, reference, nbformat.read(folder / "day13.ipynb", as_version=4)


def test_student_workflow_on_a_notebook_submission(released, tmp_path):
    """The student worked in day13.ipynb (block left undone) and left the .py stubs as released."""
    import nbformat

    folder, source, reference, nb = _notebook_student(released, tmp_path)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in reference and grade_id != "solution_block":
            cell.source = reference[grade_id]
    nb.cells[1].source = "%matplotlib inline\n" + nb.cells[1].source
    nbformat.write(nb, folder / "day13.ipynb")
    result, summary, stdout = _run_student_workflow(folder)
    points = json.loads((folder / "tools" / "points.json").read_text(encoding="utf-8"))
    scores = _by_part(result)
    assert "feedback from the notebook's test cells" in stdout
    for part in ("self_attention", "multihead", "positional"):
        assert scores[part] == pytest.approx(points[part]), (part, scores)
    assert scores["block"] == 0
    block = [t for t in result["tests"] if t["name"].startswith("block")]
    assert len(block) > 1, "one entry per visible test, as for .py files"
    assert all("not implemented yet" in t["message"] for t in block)
    assert "Task 7" in block[0]["message"]
    # `make test` runs the same tests on the notebook's code, not on the stubs it does not use.
    make = ["make", f"PYTHON={sys.executable}", "WARM=0"]
    done = subprocess.run(make + ["test", "PART=positional"], cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "day13.ipynb has your code" in done.stdout, done.stdout + done.stderr
    assert " failed" in done.stdout and "0 failed" in done.stdout and "not implemented" not in done.stdout
    done = subprocess.run(make + ["test", "PART=block"], cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "Task 7" in done.stdout and "FAILED  " in done.stdout, done.stdout
    # Of several edited notebooks, whatever their names, the one changed last is tested, as it is the one graded.
    notebook.write(source, folder / "day13-Copy1.ipynb")
    os.utime(folder / "day13-Copy1.ipynb", (time.time() + 60, time.time() + 60))
    done = subprocess.run(make + ["test", "PART=block"], cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "day13-Copy1.ipynb has your code" in done.stdout, done.stdout + done.stderr


def test_a_notebook_cell_that_reads_its_own_source_runs_in_make_test(released, tmp_path):
    """Held-out s46: a notebook's attention under @torch.jit.script, which reads the function's source, ran in
    Jupyter and in the grader but not in `make test`: the cells ran with no lines where a kernel keeps them, and
    every self_attention test failed with only "has no attribute"."""
    import nbformat

    folder, _, reference, nb = _notebook_student(released, tmp_path)
    reads = ("import torch\n\n\n@torch.jit.script\ndef _scaled(scores: torch.Tensor, d_k: int) -> torch.Tensor:\n"
             "    return scores / d_k ** 0.5\n\n\n")
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in reference:
            cell.source = reference[grade_id]
            if "def scaled_dot_product_attention" in cell.source:  # scripted before the function the tests call
                cell.source = reads + cell.source
    assert any(reads in c.source for c in nb.cells)
    nbformat.write(nb, folder / "day13.ipynb")
    make = ["make", f"PYTHON={sys.executable}", "WARM=0", "test", "PART=self_attention"]
    done = subprocess.run(make, cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "day13.ipynb has your code" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 failed" in done.stdout, done.stdout[-3000:]


# --------------------------------------------------------------------------- the instructor's grade step, run here

def _deny_user_namespaces():
    """As on GitHub's Ubuntu runners (AppArmor's restrict_unprivileged_userns): no new user namespace."""
    import errno

    import pyseccomp as seccomp
    CLONE_NEWUSER = 0x10000000
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for call in ("unshare", "clone"):
        rules.add_rule(seccomp.ERRNO(errno.EPERM), call, seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # glibc falls back to clone, which the rule sees
    rules.load()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("sudo") is None and not os.environ.get("CI"),
                    reason="needs root and sudo (.ci/run installs sudo)")
def test_instructor_grade_step_as_written_records_every_layer_where_user_namespaces_are_denied(tmp_path):
    pytest.importorskip("pyseccomp")
    assert shutil.which("sudo"), "the instructor workflow's grade step runs under sudo: install it (.ci/run does)"
    data = _load(INSTRUCTOR)
    (step,) = [s for s in data["jobs"]["grade"]["steps"] if "grader grade" in s.get("run", "")]
    # The runner's own user gets no namespaces there: the grader itself must run as root.
    assert shlex.split(_commands(step)[0])[0] == "sudo", "run the grade step as root (sudo) on GitHub's runners"
    checkout = tmp_path / "checkout"
    for folder in ("grader", "solutions", "assignments"):
        shutil.copytree(ROOT / folder, checkout / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    for name in ("ada_reference", "chloe_no_scale"):
        shutil.copytree(ROOT / "demo" / "class" / name, checkout / "submissions" / name)
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)},
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "SHARD": "1", "SHARDS": "1"}
    probe = subprocess.run(["unshare", "--user", "true"], preexec_fn=_deny_user_namespaces, capture_output=True)
    assert probe.returncode != 0, "the simulated runner must refuse user namespaces"
    done = subprocess.run(["bash", "-ec", step["run"]], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=600, preexec_fn=_deny_user_namespaces)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in ("ada_reference", "chloe_no_scale"):
        layers = json.loads((checkout / "out" / "shard-1" / name / "record.json").read_text())["isolation"]
        assert all(layers.get(k) for k in ("pidns", "netns", "uid", "seccomp", "landlock", "rlimits")), layers
    assert "Sandbox layers missing" not in (checkout / "out" / "shard-1" / "summary.md").read_text()

"""grader/templates/: both workflows' structure and commands, and the student workflow run locally on the toy
lesson's release. A real lesson's own run (its deliverables, its demo class) is tested with that lesson."""
from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grader.lesson import load_lesson
from grader.release import notebook

from grader.release import student_release as release
from grader.__main__ import build_parser

ROOT = Path(__file__).resolve().parents[2]
STUDENT = release.TEMPLATES / "autograde.yml"
INSTRUCTOR = release.TEMPLATES / "instructor-grade.yml"
TOY = ROOT / "tests" / "fixtures" / "lessons" / "toy"
EXPRESSION = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert "on" in data, f"{path.name}: quote the `on` key, or YAML 1.1 reads it as True"
    return data


def _commands(step: dict) -> list[str]:
    """The shell lines of a `run` step, with line continuations joined."""
    return [line.strip() for line in step.get("run", "").replace("\\\n", " ").splitlines() if line.strip()]


def _grader_args(command: str, values: dict[str, str], env: dict[str, str]) -> list[str] | None:
    """The arguments after `python -m grader`, with ${{ }} and $VARS replaced by sample values."""
    expand = lambda text: EXPRESSION.sub(lambda m: values[m.group(1)], str(text))  # noqa: E731
    variables = {name: expand(value) for name, value in env.items()}
    words = [re.sub(r"\$\{?(\w+)\}?", lambda m: variables[m.group(1)], expand(w)) for w in shlex.split(command)]
    if words[:1] == ["sudo"]:  # sudo [--options] "$(command -v python)" -m grader ...
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[1:]
        words[:1] = ["python"] if words and words[0].endswith("command -v python)") else words[:1]
    if words[:3] != ["python", "-m", "grader"]:
        return None
    return words[3:]


def _feedback_step(steps):
    return next(s for s in steps if "ci_feedback.py" in s.get("run", ""))


# --------------------------------------------------------------------------- structure

def test_student_workflow_structure():
    data = _load(STUDENT)
    assert set(data["on"]) >= {"push"}
    assert data["permissions"]["contents"] == "read", "the student workflow needs no write access"
    assert "secrets." not in STUDENT.read_text(encoding="utf-8"), "a student repository can't keep a secret"
    (job,) = data["jobs"].values()
    steps = job["steps"]
    assert steps[0]["uses"].startswith("actions/checkout@")
    setup = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"]["python-version"] == "3.11"
    install = " ".join(c for s in steps for c in _commands(s) if "pip install" in c)
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in install
    for package in ("numpy", "pillow", "pytest"):
        assert package in install
    feedback = _feedback_step(steps)
    (command,) = _commands(feedback)
    words = shlex.split(command)
    assert words[:2] == ["python", "tools/ci_feedback.py"]
    sys.path.insert(0, str(release.TEMPLATES))
    try:
        import ci_feedback
    finally:
        sys.path.remove(str(release.TEMPLATES))
    args = ci_feedback.build_parser().parse_args(words[2:])
    assert (args.summary, args.output) == ("$GITHUB_STEP_SUMMARY", "$GITHUB_OUTPUT")
    # GitHub Classroom's reporter reads <RUNNER>_RESULTS for each runner id it is given.
    reporter = steps[-1]
    assert reporter["uses"].startswith("classroom-resources/autograding-grading-reporter@")
    runner = reporter["with"]["runners"]
    assert reporter["env"][f"{runner.upper()}_RESULTS"] == "${{ steps.%s.outputs.result }}" % feedback["id"]


def test_instructor_workflow_collects_grades_shards_and_merges():
    data = _load(INSTRUCTOR)
    jobs = data["jobs"]
    assert list(jobs) == ["collect", "grade", "merge"]
    assert jobs["grade"]["needs"] == "collect" and jobs["merge"]["needs"] == "grade"
    shards = jobs["grade"]["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, int(data["env"]["SHARDS"]) + 1)), "matrix and SHARDS must agree"
    values = {"inputs.roster": "roster.txt", "inputs.deadline": "2026-12-01T23:59:00+00:00",
              "matrix.shard": "2", "secrets.CLASSROOM_TOKEN": "token"}
    parsed = {}
    for name, job in jobs.items():
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), f"{step.get('name')}: pass expressions through env"
            env = {**data["env"], **job.get("env", {}), **step.get("env", {})}
            for command in _commands(step):
                args = _grader_args(command, values, env)
                if args is not None:  # each command must parse; a job is named by its first one
                    parsed.setdefault(name, build_parser().parse_args(args))  # exits (fails) on a bad command
    assert parsed["collect"].command == "collect" and parsed["collect"].deadline == values["inputs.deadline"]
    assert parsed["grade"].command == "grade" and parsed["grade"].shard == f"2/{data['env']['SHARDS']}"
    assert parsed["grade"].submissions == parsed["collect"].out
    assert parsed["merge"].command == "merge"
    uploads = [s for s in jobs["merge"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert uploads and uploads[-1]["with"]["path"] == parsed["merge"].out
    downloads = [s for s in jobs["grade"]["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
    assert downloads[0]["with"]["path"] == parsed["grade"].submissions


# --------------------------------------------------------------------------- the student steps, run here

@pytest.fixture(scope="module")
def lesson():
    return load_lesson(str(TOY))


@pytest.fixture(scope="module")
def released(tmp_path_factory, lesson) -> Path:
    out = tmp_path_factory.mktemp("dist")
    release.build(out=out, lesson=lesson)
    return out / lesson.name


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


def _visible_tests(folder: Path, part: str) -> int:
    return len(re.findall(r"^def test_", (folder / "tests" / f"test_{part}.py").read_text(encoding="utf-8"), re.M))


def test_student_workflow_on_the_blank_release(released, tmp_path, lesson):
    folder = tmp_path / "blank"
    shutil.copytree(released, folder)
    result, summary, _ = _run_student_workflow(folder)
    points = json.loads((folder / "tools" / "points.json").read_text(encoding="utf-8"))
    assert result["version"] == 1 and result["status"] == "fail"
    assert result["max_score"] == pytest.approx(sum(points.values()))
    assert sum(t["score"] for t in result["tests"]) == 0
    assert all(t["status"] == "fail" for t in result["tests"])
    assert result["tests"] and all("not implemented yet" in t["message"] for t in result["tests"])
    # One entry per visible test, not one per part.
    for part in lesson.modules:
        entries = [t for t in result["tests"] if t["name"].startswith(f"{part}:")]
        assert len(entries) == _visible_tests(folder, part), (part, entries)
    assert max(_visible_tests(folder, part) for part in lesson.modules) > 1, "a part with several visible tests"
    assert "0 / " in summary and "not implemented yet" in summary and "not your grade" in summary


def test_student_workflow_on_a_sample_submission(released, tmp_path, lesson):
    """The reference code in the release."""
    folder = tmp_path / "sample"
    shutil.copytree(released, folder)
    for module in lesson.modules:
        shutil.copyfile(lesson.solutions / f"{module}.py", folder / f"{module}.py")
    result, summary, stdout = _run_student_workflow(folder)
    points = json.loads((folder / "tools" / "points.json").read_text(encoding="utf-8"))
    scores = _by_part(result)
    for part in lesson.modules:
        assert scores[part] == pytest.approx(points[part]), (part, scores)
    assert result["status"] == "pass"
    assert f"**{sum(t['score'] for t in result['tests']):g} / {result['max_score']:g}**" in summary
    assert f"| {lesson.modules[0]} |" in summary and "passed" in stdout


def test_student_workflow_on_a_notebook_submission(released, tmp_path, lesson):
    """The student worked in the lesson's notebook (its last part left undone) and left the .py stubs as released."""
    import nbformat

    *done, undone = lesson.modules
    folder = tmp_path / "notebook"
    shutil.copytree(released, folder)
    source = notebook.build(student=False, lesson=lesson)
    reference = {c.metadata["nbgrader"]["grade_id"]: "\n".join(l for l in c.source.split("\n") if "SOLUTION" not in l)
                 for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")}
    assert f"solution_{undone}" in reference, sorted(reference)
    nb = nbformat.read(folder / lesson.notebook, as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in reference and grade_id != f"solution_{undone}":
            # IPython's help after a name, and a continuation line that starts like a shell line (PEP 8 breaks
            # before an operator): CI must read them as the grading does, or the cell would be lost.
            # A forward reference in an annotation runs only under the earlier cell's __future__ import (below).
            cell.source = ("def _later() -> _Later:\n    pass\n\n\n" + reference[grade_id]
                           + "\nprint?\n_same = (1\n         != 2)\n\n\nclass _Later:\n    pass")
    nb.cells[1].source = "%matplotlib inline\n?len\n" + nb.cells[1].source
    nb.cells.insert(1, nbformat.v4.new_code_cell("from __future__ import annotations"))
    # A helper the notebook writes with %%writefile and a solution cell imports (CI must write it, as Jupyter does).
    nb.cells.insert(2, nbformat.v4.new_code_cell("%%writefile _nb_helper.py\nHELPED = True"))
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == f"solution_{done[0]}":
            cell.source = "from _nb_helper import HELPED\ndisplay(HELPED)  # a kernel's builtin\n" + cell.source
    nbformat.write(nb, folder / lesson.notebook)
    result, summary, stdout = _run_student_workflow(folder)
    points = json.loads((folder / "tools" / "points.json").read_text(encoding="utf-8"))
    scores = _by_part(result)
    assert "feedback from the notebook's test cells" in stdout
    assert not (folder / "_nb_helper.py").exists(), "CI writes what the notebook writes outside the student's folder"
    for part in done:
        assert scores[part] == pytest.approx(points[part]), (part, scores)
    assert scores[undone] == 0
    left = [t for t in result["tests"] if t["name"].startswith(undone)]
    assert len(left) == _visible_tests(folder, undone), "one entry per visible test, as for .py files"
    assert all("not implemented yet" in t["message"] for t in left)
    task = re.search(r"# BEGIN SOLUTION \((Task \d+) ", (lesson.solutions / f"{undone}.py").read_text(encoding="utf-8"))
    assert task and task.group(1) in left[0]["message"]

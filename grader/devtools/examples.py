"""The example outputs in README.md and demo/README.md, produced from real runs.

    python -m grader.devtools.examples          grade the example course and the demo class and run the kill rate
                                   for real, store what they printed and wrote in docs/run-record.json,
                                   and rewrite every
                                   block between `<!-- docs:NAME -->` and `<!-- /docs:NAME -->`
    python -m grader.devtools.examples --check  exit 1 when a block differs from what the stored run gives, or the
                                   stored run no longer has the gradebook's columns (fast: grades nothing)

Run the first after a change that moves a score or an output line; the kit's tests run the second.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.lesson import load_lesson

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "run-record.json"
FILES = (ROOT / "README.md", ROOT / "demo" / "README.md")
BLOCK = re.compile(r"(<!-- docs:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /docs:(?P=name) -->)", re.S)


def _grade(cwd: Path, submissions: str, out: str) -> tuple[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "grader", "grade", submissions, "--out", out, "--jobs", "2"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"grading {submissions} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout, time.monotonic() - start


def record() -> dict:
    """Grade the lesson's example course (a few students of its demo class) and the demo class; what
    they printed and wrote."""
    lesson = load_lesson()
    with tempfile.TemporaryDirectory(prefix="grader-docs-") as tmp:
        root = Path(tmp)
        subs = root / "out" / "course" / "submissions"
        for name, folder in lesson.example_course.items():
            shutil.copytree(lesson.demo_class / folder, subs / name)
        printed, _ = _grade(root, "out/course/submissions", "out/course/grades")
        grades = root / "out" / "course" / "grades"
        demo_printed, seconds = _grade(ROOT, str(lesson.demo_class.relative_to(ROOT)), str(root / "demo"))
        with open(root / "demo" / "grades.csv", encoding="utf-8") as handle:
            totals = {row["submission"]: row["total"] for row in csv.DictReader(handle)}
        release_printed = _run(root, "release", "--out", "dist")
        gradescope_printed = _run(root, "gradescope", "--out", "dist")
        return {
            "release_output": release_printed,
            "gradescope_output": gradescope_printed,
            "course_grade_output": [line for line in printed.splitlines() if line.strip()],
            "course_grades_csv": (grades / "grades.csv").read_text(encoding="utf-8"),
            "course_feedback_head":
                (grades / lesson.example_feedback / "feedback.md").read_text(encoding="utf-8").splitlines()[:9],
            "demo_totals": totals,
            "demo_seconds": round(seconds),
            "demo_submissions": len(totals),
            "cores": os.cpu_count() or 1,
            "killrate_output": _killrate(),
        }


def _run(cwd: Path, *args: str) -> list[str]:
    """What `python -m grader ARGS` prints, run from `cwd` (so its paths read as the README's)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "grader", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"grader {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return [line.rstrip() for line in done.stdout.splitlines() if line.strip()]


def _killrate() -> list[str]:
    """What `python -m grader killrate` prints for the run's lesson (its catalogue, variants, skeletons)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "grader", "killrate"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the kill rate failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    # Its report lines only: a correct variant may print while it is graded, and the timing varies.
    return [line.rstrip() for line in done.stdout.splitlines() if line.startswith(" ") or ":" in line]


def _abridged(lines: list[str]) -> list[str]:
    """Each heading line with the first and last of its indented lines, an ellipsis between: the
    figures a reader checks (counts, the summary lines) all stay."""
    out, group = [], []

    def flush():
        out.extend(group if len(group) <= 2 else [group[0], "  …", group[-1]])
        group.clear()

    for line in lines:
        if line.startswith(" "):
            group.append(line)
        else:
            flush()
            out.append(line)
    flush()
    return out


def blocks(run: dict) -> dict[str, str]:
    """Each marked block's text, from a stored run."""
    grade = "\n".join(["```console", "$ make grade SUBMISSIONS=out/course/submissions OUT=out/course/grades",
                       ".venv/bin/python -m grader grade out/course/submissions --out out/course/grades",
                       *run["course_grade_output"], "```"])
    review = "\n".join(["```console", "$ cat out/course/grades/grades.csv", *run["course_grades_csv"].splitlines(),
                        f"$ head -9 out/course/grades/{load_lesson().example_feedback}/feedback.md",
                        *run["course_feedback_head"], "```"])
    names = {name: name.split("_")[0] for name in run["demo_totals"]}
    totals = ", ".join(f"{names[n]} {t}" for n, t in run["demo_totals"].items())
    demo = (f"Graded by the kit (`make grade`, {run['cores']} cores, {run['demo_seconds']} s for the class of "
            f"{run['demo_submissions']}), the totals were: {totals}.")
    counts = {line.split(":")[0].split(" (")[0]: line.split(":")[1].split()[0]
              for line in run.get("killrate_output", []) if not line.startswith(" ") and ":" in line}
    lead = _wrap(f"How well the graders separate right from wrong, on {counts.get('Bug catalogue', '?')} catalogued "
                 f"bugs, {counts.get('Correct implementations', '?')} independent correct implementations "
                 f"(`tests/fixtures/correct/`) and {counts.get('Skeletons', '?')} skeletons (`tests/fixtures/skeleton/`):")
    killrate = "\n".join([lead, "", "```console", "$ .venv/bin/python -m grader killrate",
                           *_abridged(run.get("killrate_output", [])), "```"])
    release = "\n".join(["```console", "$ make release", ".venv/bin/python -m grader release --out dist",
                          *run.get("release_output", []), "```"])
    gradescope = "\n".join(["```console", "$ make gradescope", ".venv/bin/python -m grader gradescope --out dist",
                             *run.get("gradescope_output", []), "```"])
    return {"course-grade": grade, "course-results": review, "demo-totals": _wrap(demo), "killrate": killrate,
            "release": release, "gradescope": gradescope}


def _wrap(text: str, width: int = 100) -> str:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join(lines + [line])


def render(text: str, run: dict) -> str:
    wanted = blocks(run)

    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in wanted:
            raise KeyError(f"no generated block named {name!r} (known: {', '.join(wanted)})")
        return f"{match.group(1)}{wanted[name]}\n{match.group(4)}"

    return BLOCK.sub(replace, text)


def stale(run: dict) -> list[str]:
    """What differs between the files and the stored run (empty when nothing does)."""
    from grader.results.classreport import grades_columns

    columns = grades_columns(load_lesson().components)

    problems = []
    header = run["course_grades_csv"].splitlines()[0]
    if header != ",".join(columns):
        problems.append(f"{RECORD.relative_to(ROOT)} was recorded with the columns {header!r}; grades.csv now has "
                        f"{','.join(columns)!r}")
    if not run.get("killrate_output"):
        problems.append(f"{RECORD.relative_to(ROOT)} has no kill-rate output (it predates the killrate block)")
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        if not BLOCK.search(text):
            problems.append(f"{path.relative_to(ROOT)} has no <!-- docs:NAME --> block")
        elif render(text, run) != text:
            problems.append(f"{path.relative_to(ROOT)} differs from what {RECORD.relative_to(ROOT)} gives")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.devtools.examples", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare only; grade nothing, write nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale(json.loads(RECORD.read_text(encoding="utf-8")))
        for problem in problems:
            print(f"docs: {problem}", file=sys.stderr)
        if problems:
            print("docs: run `python -m grader.devtools.examples` (it grades the examples again) and commit what it changes",
                  file=sys.stderr)
        return 1 if problems else 0
    run = record()
    RECORD.write_text(json.dumps(run, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for path in FILES:
        path.write_text(render(path.read_text(encoding="utf-8"), run), encoding="utf-8")
    print(f"docs: {RECORD.relative_to(ROOT)} and the blocks of " + ", ".join(str(p.relative_to(ROOT)) for p in FILES))
    return 0


if __name__ == "__main__":
    sys.exit(main())

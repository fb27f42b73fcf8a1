"""Stage "gradescope": the autograder zip for Gradescope, and what runs inside it.

    make gradescope            # -> dist/gradescope.zip  (python -m grader gradescope --out dist)

The zip holds `setup.sh` (Gradescope runs it once, as root, when it builds the image), `run_autograder`
(run for every submission), and the kit's grading engine: grader/ with the hidden graders and the
rubric of the lesson, the lesson's reference (solutions/<lesson>/), and pyproject.toml (the dependencies). Upload it as a
"Zip file upload" autograder on an Ubuntu 22.04 base image.

`run_autograder` grades /autograder/submission with the same engine as `python -m grader grade`:
the submission is copied into a scratch class of one, graded in the sandbox (student code runs as an
unprivileged uid in a child process, with whichever isolation layers the container allows; the
results record which), and results/results.json is written in Gradescope's format. The root is
/autograder unless AUTOGRADER_ROOT says otherwise, which is how the tests run it on a fake tree.
If the engine itself fails, no results.json is written: Gradescope then reports an autograder
failure to the staff instead of a zero the student did not earn.

The kit in /autograder/source holds the hidden graders and the reference, so root owns it and nobody
else may read it: setup.sh sets that when the image is built, and run_autograder sets it again before
every submission (a container without Landlock would otherwise leave the student's uid only the file
modes between its code and the answers). Student code needs nothing from there: it imports torch from
the world-readable venv, and the sandbox's zygote, which runs as root, has loaded the engine's part.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile
from pathlib import Path

from grader.intake import submissions as intake
from grader.lesson import ENGINE, Lesson, lesson_names

ROOT = Path(__file__).resolve().parents[2]
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
ROW = "submission"  # the row name of the one submission graded

def packaged(lesson: Lesson) -> tuple[str, ...]:
    """What the autograder needs of the kit: the engine with the lesson's hidden graders (in grader/, or
    the lesson's own folder when it was found by path), the lesson's reference, the dependencies."""
    entries = ["grader"]
    if lesson.folder.parent != ENGINE:
        entries.append(_inside_kit(lesson.folder))
    solutions = _inside_kit(lesson.solutions)
    if not any(solutions == e or solutions.startswith(e + "/") for e in entries):
        entries.append(solutions)
    return (*entries, "pyproject.toml")


def _inside_kit(path: Path) -> str:
    if not path.is_relative_to(ROOT):
        raise ValueError(f"{path} is outside the kit ({ROOT}): the autograder zip holds the kit's tree, so "
                         "move the lesson (and its reference) into the kit's folder to export it")
    return path.relative_to(ROOT).as_posix()


def run_autograder_script(lesson: Lesson) -> str:
    """run_autograder; for a lesson found by path, it names the lesson's folder inside the unzipped kit."""
    if lesson.folder.parent == ENGINE:
        return RUN_AUTOGRADER
    chosen = f' --lesson "$ROOT/source/{_inside_kit(lesson.folder)}"'
    return RUN_AUTOGRADER.replace('run --root "$ROOT"\n', f'run --root "$ROOT"{chosen}\n', 1)

SKIP_DIRS = {"__pycache__", ".pytest_cache", "templates"}

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, in /autograder/source, when it builds the autograder image.
set -euo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# python3.11 is in Ubuntu 22.04 (jammy); on other bases fall back to the deadsnakes PPA.
if ! apt-get install -y -q python3.11 python3.11-venv libseccomp2 git; then
    apt-get install -y -q software-properties-common
    add-apt-repository -y ppa:deadsnakes/ppa
    apt-get update -q
    apt-get install -y -q python3.11 python3.11-venv libseccomp2 git
fi
# A venv from the system interpreter stays world-readable: the sandbox drops student code to an
# unprivileged uid, which must still be able to import the standard library.
python3.11 -m venv /autograder/venv
/autograder/venv/bin/pip install -q --upgrade pip
/autograder/venv/bin/pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/pip install -q /autograder/source
# The seccomp layer is optional: without it the sandbox runs and records that it was off.
/autograder/venv/bin/pip install -q pyseccomp || echo "pyseccomp not installed: seccomp layer off"
# Student code runs as an unprivileged uid: it may read the venv (torch) but never the kit, which holds
# the hidden graders and the reference. Modes, not only Landlock: some kernels have no Landlock.
chmod -R go+rX /autograder/venv
# By its path: Gradescope also runs copies of these scripts from /autograder, which holds the venv.
KIT=/autograder/source
@@PROTECT_KIT@@
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission: grade $ROOT/submission, write $ROOT/results/results.json.
# AUTOGRADER_ROOT moves the tree (the kit's tests use a fake one); AUTOGRADER_PYTHON picks the interpreter.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
cd "$ROOT/source"
# Again before every submission: whatever changed the image since setup.sh, the sandbox's uids must not
# read the hidden graders or the reference. Without root (a local try-out) there is no other uid to fear.
if [ "$(id -u)" -eq 0 ]; then
    KIT="$ROOT/source"
@@PROTECT_KIT_INDENTED@@
fi
exec "$PYTHON" -m grader.release.gradescope run --root "$ROOT"
"""

# Root owns every file of the kit and nobody else may read, write or enter any of it. Symlinks are not
# followed (-P): a link in the tree must not hand its target's ownership to root or change its mode.
PROTECT_KIT = """chown -R -P 0:0 "$KIT" || { echo "could not give $KIT to root" >&2; exit 1; }
chmod -R go-rwx "$KIT" || { echo "could not make $KIT private to root" >&2; exit 1; }"""
SETUP_SH = SETUP_SH.replace("@@PROTECT_KIT@@", PROTECT_KIT)
RUN_AUTOGRADER = RUN_AUTOGRADER.replace("@@PROTECT_KIT_INDENTED@@", textwrap.indent(PROTECT_KIT, "    "))


# --------------------------------------------------------------------------- building the zip

def _packaged_files(lesson: Lesson) -> list[tuple[str, Path]]:
    # Another lesson's folder has no business in this lesson's autograder (nor its hidden tests).
    others = {f"grader/{name}" for name in lesson_names() if ENGINE / name != lesson.folder}
    files = []
    for entry in packaged(lesson):
        path = ROOT / entry
        if path.is_file():
            files.append((entry, path))
            continue
        for found in sorted(path.rglob("*")):
            relative = found.relative_to(ROOT)
            if found.is_file() and not SKIP_DIRS.intersection(relative.parts) and found.suffix != ".pyc" \
                    and "/".join(relative.parts[:2]) not in others:
                files.append((relative.as_posix(), found))
    return files


def build(*, out: Path, lesson: Lesson) -> Path:
    """Write <out>/gradescope.zip deterministically; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "gradescope.zip"
    tmp = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", run_autograder_script(lesson))):
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o755 << 16
            archive.writestr(info, text)
        for name, path in _packaged_files(lesson):
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            archive.writestr(info, path.read_bytes())
    tmp.replace(target)
    return target


def main(*, out: str = "dist", lesson: Lesson) -> int:
    try:
        target = build(out=Path(out), lesson=lesson)
    except ValueError as error:  # a lesson the zip cannot hold: said as what to do, a usage error
        print(f"gradescope: {error}", file=sys.stderr)
        return 2
    with zipfile.ZipFile(target) as archive:
        names = archive.namelist()
    print(f"wrote {target} ({len(names)} files, {target.stat().st_size // 1024} KiB): "
          f"setup.sh, run_autograder, grader/ (engine, hidden graders, rubric), "
          f"{', '.join(e + '/' for e in packaged(lesson)[1:-1])}, pyproject.toml")
    print("Upload it on Gradescope as a 'Zip file upload' autograder (base image: Ubuntu 22.04).")
    return 0


# --------------------------------------------------------------------------- inside Gradescope

def stage_submission(submission: Path, subs: Path, notes: list[str] | None = None) -> Path:
    """Copy Gradescope's submission folder into `subs` as one row the engine can read.

    Uploads arrive as loose files, as one folder holding them, or as a single zip; a notebook
    beside its deliverables stays in the folder (the engine grades its code cells). The copy stops
    one level below the intake's depth cap (the engine notes that folder as too deep) and leaves out
    paths longer than its length cap, each with a line in `notes`, so an upload built to be deep
    costs a note, not the run.
    """
    notes = [] if notes is None else notes
    visible = [p for p in submission.iterdir() if not p.name.startswith((".", "__MACOSX"))] if submission.is_dir() else []
    subs.mkdir(parents=True, exist_ok=True)
    if len(visible) == 1 and visible[0].is_file() and not visible[0].is_symlink() and \
            visible[0].suffix.lower() == ".zip":
        target = subs / f"{ROW}.zip"
        shutil.copyfile(visible[0], target)
        return target
    source = visible[0] if len(visible) == 1 and visible[0].is_dir() and not visible[0].is_symlink() else submission
    target = subs / ROW
    limits = intake.DEFAULT_LIMITS

    def bounded(folder: str, names: list[str]) -> set[str]:
        rel = os.path.relpath(folder, source)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        if depth > limits.max_depth:
            return set(names)  # the folder itself is copied, empty: the intake says it was too deep
        prefix = "" if rel == "." else rel + "/"
        long = {n for n in names if len(prefix + n) > limits.max_path_chars}
        notes.extend(f"skipped {intake.shown(prefix + n)}: its path is too long "
                     f"(over {limits.max_path_chars} characters)" for n in sorted(long))
        return long | ({".git"} & set(names))

    # symlinks=True copies a link as a link; the engine's intake then skips it and says so.
    shutil.copytree(source, target, symlinks=True, ignore=bounded)
    return target  # which of its notebook and .py files is the student's work, the intake decides


def run_autograder(*, root: Path, lesson: str | None = None, python: str = sys.executable) -> int:
    """Grade Gradescope's upload under `root` with the kit's lesson (`lesson`: a lesson folder's path,
    handed to `python -m grader grade --lesson`; None: the kit's only lesson)."""
    start = time.monotonic()  # execution_time is this whole run's wall time, start-up included
    submission, results = root / "submission", root / "results"
    results.mkdir(parents=True, exist_ok=True)
    if not submission.is_dir():
        print(f"run_autograder: {submission} does not exist; Gradescope puts the upload there", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gradescope-") as tmp:
        subs, out = Path(tmp) / "subs", Path(tmp) / "out"
        notes: list[str] = []
        stage_submission(submission, subs, notes)
        chosen = ["--lesson", lesson] if lesson else []
        graded = subprocess.run([python, "-m", "grader", "grade", str(subs), "--out", str(out), "--jobs", "1", *chosen],
                                cwd=ROOT, timeout=1800)
        produced = out / ROW / "results.json"
        if not produced.is_file():
            print(f"run_autograder: the engine wrote no results (exit {graded.returncode}); "
                  "see the log above. No results.json, so Gradescope reports an autograder error.",
                  file=sys.stderr)
            return 1
        tmp_result = results / "results.json.tmp"
        data = json.loads(produced.read_text(encoding="utf-8"))
        if notes:  # what the copy into the class of one left out, said where the student reads
            data["output"] = data.get("output", "") + "".join(f"\n- {note}" for note in notes)
        data["execution_time"] = round(time.monotonic() - start, 2)
        tmp_result.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp_result, results / "results.json")
    print(f"run_autograder: wrote {results / 'results.json'}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m grader.release.gradescope")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="grade <root>/submission into <root>/results/results.json")
    run.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    run.add_argument("--lesson", default=None, help="the lesson folder's path inside the unzipped kit (default: its only lesson)")
    build_cmd = sub.add_parser("build", help="write <out>/gradescope.zip")
    build_cmd.add_argument("--out", default="dist")
    build_cmd.add_argument("--lesson", default=None, help="the lesson (default: as `python -m grader`)")
    args = parser.parse_args()
    if args.command == "run":
        sys.exit(run_autograder(root=Path(args.root), lesson=args.lesson))
    from grader.lesson import load_lesson

    sys.exit(main(out=args.out, lesson=load_lesson(args.lesson)))  # an entry point

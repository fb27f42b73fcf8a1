"""Every version of a lesson's shipped files, kept so that a student's copy of an earlier release is still the kit's.

    python -m grader.devtools.shipped_history [--lesson NAME]           add the current versions to the record
    python -m grader.devtools.shipped_history [--lesson NAME] --check   exit 1 if a current version is not in it
    python -m grader.devtools.shipped_history [--lesson NAME] --from-git add every version git holds of their sources

The release ships files of the kit's beside the student's stubs (its tests, their shared _feedback package, the
tools: grader/release/student_release.py, `shipped_sources`). A student who hands in the whole repository hands
them back, and the static scan reads none that is the kit's. Its record (the lesson's shipped_history.txt, one
`sha256  path` a line) keeps the versions earlier releases shipped: when the visible tests change during a
course, a student who cloned before still hands back the old ones, which are no code of theirs to read or flag.
tests/engine/test_shipped_history.py runs --check: changing a shipped file means adding its new version here.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADER = ("# Every version of this lesson's shipped files (grader/release/student_release.py, shipped_sources) a release\n"
          "# has held: `sha256  path in the release`. Written by `python -m grader.devtools.shipped_history`.\n")


def current(lesson) -> set[tuple[str, str]]:
    """(digest, path) of each file the release ships now."""
    from grader.judging.source_scan import kit_digest
    from grader.release.student_release import shipped_sources

    return {(kit_digest(data), path) for path, data in shipped_sources(lesson=lesson).items()}


def from_git(lesson) -> set[tuple[str, str]]:
    """(digest, path) of every version git holds of the shipped files that are copied into the release as they are:
    the assignment's own (its tests, its tools) and the shared _feedback package."""
    from grader.judging.source_scan import kit_digest
    from grader.release.student_release import FEEDBACK_FOLDER, shipped_sources

    sources = {}
    for path in shipped_sources(lesson=lesson):
        if path.startswith(f"tests/{FEEDBACK_FOLDER}/"):
            sources[path] = ROOT / "grader" / "student" / Path(path).name
        elif (lesson.assignment / path).exists():
            sources[path] = lesson.assignment / path
    found = set()
    for path, source in sources.items():
        rel = source.relative_to(ROOT).as_posix()
        log = subprocess.run(["git", "-C", str(ROOT), "log", "--format=%H", "--", rel], capture_output=True, text=True)
        for commit in log.stdout.split():
            shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{rel}"], capture_output=True)
            if shown.returncode == 0:
                found.add((kit_digest(shown.stdout), path))
    return found


def read(path: Path) -> set[tuple[str, str]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return set()
    return {tuple(line.split("  ", 1)) for line in lines if line and not line.startswith("#")}


def write(path: Path, entries: set[tuple[str, str]]) -> None:
    path.write_text(HEADER + "".join(f"{digest}  {name}\n" for digest, name in sorted(entries, key=lambda e: (e[1], e[0]))),
                    encoding="utf-8")


def main(argv=None) -> int:
    from grader.lesson import lesson_option, load_lesson
    from grader.release.student_release import shipped_history_path

    parser = argparse.ArgumentParser(prog="python -m grader.devtools.shipped_history", description=__doc__.split("\n")[0])
    parser.add_argument("--lesson", type=lesson_option, default=None)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--from-git", action="store_true")
    args = parser.parse_args(argv)
    lesson = load_lesson(args.lesson)
    path = shipped_history_path(lesson)
    kept, now = read(path), current(lesson)
    if args.check:
        missing = sorted(name for _, name in now - kept)
        if missing:
            print(f"{path.relative_to(ROOT)} lacks the current version of {', '.join(missing)}: run "
                  f"`python -m grader.devtools.shipped_history --lesson {lesson.name}` and commit it", file=sys.stderr)
            return 1
        return 0
    entries = kept | now | (from_git(lesson) if args.from_git else set())
    write(path, entries)
    print(f"{path.relative_to(ROOT)}: {len(entries)} versions of {len({name for _, name in entries})} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())

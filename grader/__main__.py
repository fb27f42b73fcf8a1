"""Command line: `python -m grader COMMAND ...`. Each command only parses its arguments, builds the
lesson value once (from `--lesson NAME|PATH`; without it the only lesson under grader/, or the kit's
default) and calls one stage's keyword-only entry function with it as `lesson=`. Imports are lazy so
that `grade` can start the sandbox's zygote before anything secret (reference, hidden tests) is loaded."""
from __future__ import annotations

import argparse
import importlib
import sys


def _call(module: str, function: str, *, lesson, **kwargs) -> int:
    """Run one stage's entry function (`grader.<module>.<function>`) for the run's lesson."""
    entry = getattr(importlib.import_module(f"grader.{module}"), function)
    return int(entry(lesson=lesson, **kwargs) or 0)


RELEASES = ("now", "after_due_date", "published", "all")  # grader.results.feedback.RELEASES, without importing it


def _lesson_option(p) -> None:
    p.add_argument("--lesson", default=None, metavar="NAME|PATH",
                   help="the lesson: a folder's name under grader/ or the path of a folder holding a "
                        "lesson.toml (default: the only lesson under grader/, or of several the kit's "
                        "default_lesson in pyproject.toml)")


def _release_option(p) -> None:
    p.add_argument("--release", choices=RELEASES, default="after_due_date",
                   help="what feedback.md shows of each test, by the rubric's [visibility]: now (before the "
                        "due date), after_due_date (default), published, all (the teaching staff's view)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("grade", help="grade every submission in a folder (dirs, .zip, .ipynb)")
    p.add_argument("submissions", help="folder holding one entry per student")
    p.add_argument("--out", required=True, help="output folder (gradebook, feedback, report)")
    p.add_argument("--jobs", type=int, default=None, help="parallel submissions (default: number of cores)")
    p.add_argument("--force", action="store_true",
                   help="regrade every submission (by default only those whose content or grading inputs changed)")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="regrade these submissions (rows of grades.csv) and leave the others as they are")
    p.add_argument("--shard", default=None, metavar="K/N", help="grade only slice K of N (1-based)")
    p.add_argument("--overrides", default=None, metavar="FILE",
                   help="a person's decisions on points (default OUT/overrides.csv; see grader/admin/overrides.py)")
    p.add_argument("--roster", default=None, metavar="FILE",
                   help="who each submission belongs to (kept as OUT/roster.csv): grades.csv gets a row per "
                        "student, partners keep their own lateness and are never flagged as similar; see grader/intake/roster.py")
    p.add_argument("--seed", default=None, metavar="N",
                   help="the run's seed for the hidden tests' probes (default: the one kept in OUT, else a new one; "
                        "a different one regrades every submission)")
    _release_option(p)
    p.set_defaults(run=lambda a, lesson: _call(
        "running.grade", "main", lesson=lesson, submissions=a.submissions, out=a.out, jobs=a.jobs, force=a.force,
        only=a.only, shard=a.shard, overrides=a.overrides, release=a.release, roster=a.roster, seed=a.seed))

    p = sub.add_parser("merge", help="join the outputs of several shards into one gradebook and report")
    p.add_argument("shards", nargs="+", help="the --out folders of the shards")
    p.add_argument("--out", required=True)
    p.add_argument("--overrides", default=None, metavar="FILE", help="default: the merged folder's overrides.csv")
    _release_option(p)
    p.set_defaults(run=lambda a, lesson: _call(
        "admin.merge", "merge", lesson=lesson, shards=a.shards, out=a.out, overrides_path=a.overrides,
        release=a.release))

    p = sub.add_parser("review", help="a page on this machine to walk the class and set points by hand")
    p.add_argument("out", help="the --out folder of a grading run")
    p.add_argument("--submissions", default=None, help="the graded folder, to show each student's files")
    p.add_argument("--overrides", default=None, metavar="FILE", help="default: OUT/overrides.csv")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--by", default="", help="your name or initials, written with each decision")
    p.add_argument("--release", choices=RELEASES, default="all",
                   help="which tests' details the page shows (default all: the teaching staff's view)")
    p.set_defaults(run=lambda a, lesson: _call(
        "admin.review", "main", lesson=lesson, out=a.out, submissions=a.submissions, overrides_path=a.overrides,
        port=a.port, release=a.release, by=a.by))

    p = sub.add_parser("check", help="check one submission's deliverables (the files the lesson asks for besides its code)")
    p.add_argument("submission")
    p.set_defaults(run=lambda a, lesson: _call(
        "running.deliverables_process", "main", lesson=lesson, submission=a.submission))

    p = sub.add_parser("stubs", help="write the lesson's stubs into its student folder from its solutions' markers")
    p.add_argument("--check", action="store_true",
                   help="fail if the committed stubs differ from their solutions, or only some are committed")
    p.set_defaults(run=lambda a, lesson: _call(
        "release.stubs", "main", lesson=lesson, check=a.check))

    p = sub.add_parser("release", help="build the student release (dist/<lesson>, dist/<lesson>.zip)")
    p.add_argument("--out", default="dist")
    p.set_defaults(run=lambda a, lesson: _call(
        "release.student_release", "main", lesson=lesson, out=a.out))

    p = sub.add_parser("gradescope", help="build the Gradescope autograder zip")
    p.add_argument("--out", default="dist")
    p.set_defaults(run=lambda a, lesson: _call(
        "release.gradescope", "main", lesson=lesson, out=a.out))

    p = sub.add_parser("collect", help="clone or update student repositories at a deadline")
    p.add_argument("roster", help="text file of repository URLs/paths, or a GitHub Classroom export (.csv)")
    p.add_argument("--out", required=True, help="folder that receives one sub-folder per student")
    p.add_argument("--deadline", default=None, help="ISO time: take the last commit before it")
    p.set_defaults(run=lambda a, lesson: _call(
        "intake.collect", "main", lesson=lesson, roster=a.roster, out=a.out, deadline=a.deadline))

    p = sub.add_parser("similarity", help="compare every pair of submissions (code, texts, pictures)")
    p.add_argument("submissions", help="folder holding one entry per student")
    p.add_argument("--out", required=True, help="folder for similarity.csv and similarity.html")
    p.add_argument("--jobs", type=int, default=None, help="parallel readers (default: number of cores)")
    p.add_argument("--pair", nargs=2, metavar=("A", "B"), default=None,
                   help="draw these two submissions side by side in OUT/similarity-A-B.html instead (a pair the "
                        "class report does not draw)")
    p.set_defaults(run=_similarity)

    p = sub.add_parser("export", help="the final grades for the school's gradebook (Canvas, Moodle, Blackboard, CSV)")
    p.add_argument("out", help="the --out folder of a grading run (its grades.csv)")
    p.add_argument("--format", required=True, choices=("canvas", "moodle", "blackboard", "csv"))
    p.add_argument("--roster", default=None, help="CSV mapping submissions to students (a GitHub Classroom "
                                                  "roster works as it is); see grader/intake/roster.py")
    p.add_argument("--dest", default=None, help="file to write (default OUT/export-FORMAT.csv)")
    p.add_argument("--parts", action="store_true", help="each part's points too (csv format)")
    p.add_argument("--title", default=None, help="the assignment's name in the gradebook (default: the lesson's)")
    p.set_defaults(run=lambda a, lesson: _call(
        "admin.export", "main", lesson=lesson, out=a.out, format=a.format, roster=a.roster, dest=a.dest,
        parts=a.parts, title=a.title))

    p = sub.add_parser("killrate", help="grade every bug-catalogue mutant and correct variant; print the rates")
    p.set_defaults(run=lambda a, lesson: _call(
        "admin.killrate", "main", lesson=lesson))

    for command in sub.choices.values():
        _lesson_option(command)
    return parser


def _similarity(a, lesson) -> int:
    """Compare every pair; an OUT that holds a graded class (a merged one) gets its report rewritten
    with the similarity section, as `grade` writes it."""
    from pathlib import Path

    code = _call("admin.similarity", "main", lesson=lesson, submissions=a.submissions, out=a.out, jobs=a.jobs,
                 pair=tuple(a.pair) if a.pair else None)
    if code != 0 or a.pair or not (Path(a.out) / "grades.csv").is_file():
        return code
    from grader.results import classreport
    from grader.admin import overrides

    try:
        classreport.write_class(Path(a.out), lesson=lesson)
    except overrides.OverrideError as error:
        print(f"similarity: the class report was not rewritten: {error}", file=sys.stderr)
        return 1
    print(f"similarity: {Path(a.out) / 'report.html'} rewritten with the similarity section")
    return 0


def run(argv: list[str] | None = None) -> tuple[str, int]:
    """(the command, its exit code). A lesson that cannot be found, or whose declaration is wrong,
    ends the command with the lesson's own message (which lessons there are and how to choose one)."""
    from grader.lesson import LessonError, load_lesson

    args = build_parser().parse_args(argv)
    try:
        # Without --lesson, a command on a grading run's output folder takes the lesson that folder was graded for.
        lesson = load_lesson(args.lesson or _lesson_of_the_output(args))
        return args.command, args.run(args, lesson)
    except LessonError as error:
        print(f"python -m grader {args.command}: {error}", file=sys.stderr)
        return args.command, 2


# The commands that read a grading run's output folder. Not grade: a class graded into the wrong folder would
# then be graded as that folder's lesson (grade stops instead, saying which lesson the folder holds).
READS_AN_OUTPUT = ("review", "export", "merge", "similarity")


def _lesson_of_the_output(args) -> str | None:
    from grader.lesson import lesson_of_output

    if args.command not in READS_AN_OUTPUT:
        return None
    folders = [getattr(args, "out", None), *(getattr(args, "shards", None) or ())]
    return next((found for folder in folders if folder and (found := lesson_of_output(folder))), None)


def main(argv: list[str] | None = None) -> int:
    return run(argv)[1]


def _exit_now(code: int) -> None:
    """End the process once a command is done: exit handlers run (temporary folders, logging,
    multiprocessing), output is flushed, and the interpreter's teardown of torch and matplotlib
    (~0.6 s of freeing objects nothing will use) is skipped. Every result file is already written,
    synced and closed (storage.write_atomic)."""
    import atexit
    import os

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _command, _code = run()
    if _command == "grade":
        _exit_now(_code)
    sys.exit(_code)

"""`python -m grader.sandbox -`: the zygote, as Zygote starts it (its JSON request on stdin, never on the command
line, which every child inherits and can read).
`python -m grader.sandbox --check [--lesson NAME|PATH]`: which layers work on this machine, and the
start-up check's findings, as a grading run of the lesson (default: as `python -m grader`) would see them
(exit 1 when a run would refuse to grade)."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

from grader.sandbox import zygote
from grader.sandbox.confinement import is_root, landlock_abi


def check(*, lesson) -> dict:
    """Which layers work on this machine, and the start-up check's findings, as a grading run of
    `lesson` would see them."""
    found = {"root": is_root(), "landlock_abi": landlock_abi(),
             "pyseccomp": importlib.util.find_spec("pyseccomp") is not None, "python": sys.executable}
    start = time.monotonic()
    try:
        with zygote.Zygote(slots=1, lesson=lesson) as started:
            try:
                started.wait_ready()
            except zygote.SandboxRefused:
                pass
            found["child_view"] = started.view or {"refused": "the sandbox zygote did not start"}
    except zygote.SandboxUnavailable as exc:
        found["child_view"] = {"refused": str(exc)}
    found["zygote_start_seconds"] = round(time.monotonic() - start, 3)
    return found


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check"] and len(sys.argv) in (2, 4) and sys.argv[2:3] in ([], ["--lesson"]):
        from grader.lesson import LessonError, load_lesson

        try:
            the_lesson = load_lesson(sys.argv[3] if len(sys.argv) == 4 else None)  # an entry point
        except LessonError as error:
            print(f"python -m grader.sandbox --check: {error}", file=sys.stderr)
            sys.exit(2)
        report = check(lesson=the_lesson)
        print(json.dumps(report, indent=2))
        if report["child_view"]["refused"]:
            print(f"\nnot ready to grade: {report['child_view']['refused']}", file=sys.stderr)
            sys.exit(1)
    elif sys.argv[1:] == [zygote.SPEC_ON_STDIN]:
        zygote.main(zygote.read_spec())
        # No interpreter teardown: the attention kernels switched off in this process are Python
        # objects held by the dispatcher for good, which must not outlive the interpreter's own end.
        os._exit(0)
    else:
        print("usage: python -m grader.sandbox --check [--lesson NAME|PATH]  (a grading run starts the zygote itself)",
              file=sys.stderr)
        sys.exit(2)

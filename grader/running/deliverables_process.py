"""The deliverables checks of a grading run, in a process of their own with a memory and a time limit.

The checks (the lesson's, run by grader/judging/deliverables.py) parse a submission's images, SVG, PDF and
text with C decoders and regular expressions. Each has its own caps, but a file built against them
could still make the process that checks it allocate or compute far more than any honest file needs. So a grading run
never checks deliverables in its own process: each worker has a helper, started once (it imports
numpy and Pillow only), limited to the lesson's `memory_bytes` of address space, that checks one
folder at a time; the worker waits at most `seconds` for each answer. A helper that runs out of
memory, crashes or overruns is killed, the submission's deliverables fail with that reason, and the
next submission gets a fresh helper.

    python -m grader.running.deliverables_process SPEC     # the helper: SPEC is JSON built from the lesson value
                                      # ({"checks_module": ..., "lesson_folder": ...}); one folder path (JSON) per line in, one JSON
                                      # list of checks out
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time
from pathlib import Path

from grader.judging import deliverables
from grader.judging.deliverables import Check
from grader.lesson import PATH_PACKAGE_PREFIX, register_path_package
from grader.running.helper_process import LimitedHelper, cpu_seconds

MAX_ANSWER_BYTES = 1 << 20  # five checks' messages are a few KB


class LimitedChecker(LimitedHelper):
    """`run_checks(directory)` like grader.judging.deliverables.run_checks with the lesson's checks, done by a
    limited helper process. `checks_module` is the importable name of the module defining CHECKS
    (default: `lesson`'s; a lesson without deliverable checks gets none, and no helper)."""

    def __init__(self, *, memory_bytes: int, seconds: float, lesson, checks_module: str | None = None):
        super().__init__()
        self.memory_bytes, self.seconds = int(memory_bytes), float(seconds)
        self.max_answer_bytes = MAX_ANSWER_BYTES
        if checks_module is None:
            checks_module = lesson.deliverables_module
        self.checks_module = checks_module
        # A lesson found by path is importable only in a process that has found it (grader.lesson registers
        # its package there): the helper is told where, and finds it again before importing its checks.
        package = getattr(lesson, "package", "")
        self.lesson_folder = (str(lesson.folder) if checks_module and package.startswith(PATH_PACKAGE_PREFIX)
                              and checks_module.startswith(package + ".") else None)
        checks = importlib.import_module(self.checks_module).CHECKS if self.checks_module else ()
        self.check_ids = tuple(check_id for check_id, _ in checks)
        self._started, self._started_cpu, self._pending = 0.0, None, False

    def run_checks(self, directory) -> list[Check]:
        self.start(directory)
        return self.finish()

    def start(self, directory) -> None:
        """Send `directory` to the helper, which checks it while the caller does other work."""
        if self._pending:
            self.close()  # an answer nobody collected (the submission before failed): never hand it on
        if not self.check_ids:
            return  # nothing to check: finish() answers with no checks
        proc = self._helper()  # an OSError here is the engine's (no interpreter, no fork): it propagates
        self._started, self._started_cpu, self._pending = time.monotonic(), cpu_seconds(proc.pid), True
        try:
            os.write(proc.stdin.fileno(), json.dumps(os.fspath(directory)).encode() + b"\n")
        except OSError:
            pass  # the helper is gone: finish() says so

    def finish(self) -> list[Check]:
        """The checks of the folder given to start(), after at most `seconds` of the helper's CPU time (see
        helper_process: a busy machine never leaves a deliverable unchecked)."""
        if not self.check_ids:
            return []
        self._pending = False
        try:
            return self._answer(self._proc)
        except TimeoutError:
            self.close()
            return self._all_failed(f"checking these files took more than {self.seconds:g} s of CPU time, the limit for one "
                                    "submission's deliverables, so they were not checked. Save the images and "
                                    "texts again in an ordinary way (a plain PNG, a short Markdown file).")
        except (OSError, ValueError, KeyError, TypeError):
            self.close()
            return self._all_failed(f"checking these files needed more than the {self.memory_bytes >> 20} MB the "
                                    "checker may use for one submission, or crashed it, so they were not checked. "
                                    "Save smaller images (fewer pixels) and plain files.")

    def _command(self) -> list[str]:
        # What the helper needs of the lesson, as plain data: the module that defines its CHECKS (and the
        # folder of a lesson found by path, whose package only exists once found).
        spec = {"checks_module": self.checks_module, "lesson_folder": self.lesson_folder}
        return ["grader.running.deliverables_process", json.dumps(spec)]

    def _environment(self) -> dict[str, str]:
        return {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    def _answer(self, proc) -> list[Check]:
        data = self._read_line(proc, self.seconds, since_wall=self._started, since_cpu=self._started_cpu)
        items = json.loads(data)
        checks = [Check(str(i["id"]), bool(i["passed"]), str(i["message"]), str(i["title"])) for i in items]
        if [c.id for c in checks] != list(self.check_ids):
            raise ValueError("the helper's answer does not list the checks")
        return checks

    def _all_failed(self, reason: str) -> list[Check]:
        return [Check(check_id, False, reason, check_id) for check_id in self.check_ids]


def main(*, submission, lesson) -> int:
    """`python -m grader check`: the lesson's deliverables checklist for one folder, in this process."""
    return deliverables.main(submission=submission, checks=lesson.deliverable_checks())


def _serve(spec: str) -> None:
    # Loaded now, not on the first submission's first image.
    with contextlib.suppress(ImportError):
        from PIL import Image, JpegImagePlugin, PngImagePlugin  # noqa: F401
    spec = json.loads(spec)
    if spec.get("lesson_folder"):
        register_path_package(Path(spec["lesson_folder"]))  # its checks module is found below it
    checks = importlib.import_module(spec["checks_module"]).CHECKS
    for line in sys.stdin.buffer:
        checks_done = deliverables.run_checks(json.loads(line), checks)
        sys.stdout.write(json.dumps([{"id": c.id, "passed": c.passed, "message": c.message, "title": c.title}
                                     for c in checks_done]) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve(sys.argv[1])

"""Day 13's visible tests' evidence about mistakes (assignments/day13/tests/known_mistakes.json).

The builder is the engine's (grader/devtools/visible_fingerprints.py: any lesson's catalogue through its
visible tests); this module keeps Day 13's command and the recording the diagnostics audit runs:

    python -m grader.day13.visible_fingerprints            # rewrite the file
    python -m grader.day13.visible_fingerprints --check    # exit 1 when the file is out of date
"""
from __future__ import annotations

import argparse
import sys

from grader.lesson import load_lesson
from grader.devtools import visible_fingerprints as builder


def _day13():
    return load_lesson("day13")


def record_visible(plan: list[dict]) -> dict:
    """The visible tests run on each folder of `plan`, recorded (grader/devtools/visible_fingerprints.py)."""
    return builder.record_visible(plan, lesson=_day13())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.day13.visible_fingerprints",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the stored file instead of writing it")
    args = parser.parse_args(argv)
    return builder.main(lesson=_day13(), check=args.check)


if __name__ == "__main__":
    sys.exit(main())

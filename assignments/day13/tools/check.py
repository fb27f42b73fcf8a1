"""`make check`: the deliverables checklist for your folder (heatmap, analysis, diagram, README).

    make check                   # checks this folder
    python tools/check.py PATH   # checks another folder

The checks are the same code the grader scores the deliverables with. In the release they sit
beside this file (tools/deliverables.py runs the checks of tools/deliverable_checks.py); in the
course kit they are grader/judging/deliverables.py and grader/day13/deliverable_checks.py.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KIT = HERE.parent.parent.parent


def load_checker():
    """(the checker, the assignment's checks): from this folder in the release, else from the kit."""
    if (HERE / "deliverables.py").is_file() or (HERE / "deliverable_checks.py").is_file():
        if not ((HERE / "deliverables.py").is_file() and (HERE / "deliverable_checks.py").is_file()):
            raise FileNotFoundError("tools/deliverables.py or tools/deliverable_checks.py is missing: download "
                                    "the assignment's tools folder again.")
        where, names = HERE, ("deliverables", "deliverable_checks")
    elif (KIT / "grader" / "day13" / "deliverable_checks.py").is_file():
        where, names = KIT, ("grader.judging.deliverables", "grader.day13.deliverable_checks")
    else:
        raise FileNotFoundError("the deliverables checker (tools/deliverables.py) is missing: download the "
                                "assignment's tools folder again.")
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    checker, checks = (importlib.import_module(name) for name in names)
    return checker, checks.CHECKS


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0]) if argv else HERE.parent
    try:
        checker, checks = load_checker()
    except FileNotFoundError as error:
        print(f"make check: {error}", file=sys.stderr)
        return 2
    return checker.main(submission=str(folder), checks=checks)


if __name__ == "__main__":
    sys.exit(main())

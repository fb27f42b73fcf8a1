"""`make check`: the deliverables checklist for your folder (heatmap, analysis, diagram, README).

    make check                   # checks this folder
    python tools/check.py PATH   # checks another folder

The checker is the same code the grader scores the deliverables with. In the release it sits
beside this file (tools/deliverables.py); in the course kit it is grader/deliverables.py.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CANDIDATES = (HERE / "deliverables.py", HERE.parent.parent.parent / "grader" / "deliverables.py")


def load_checker():
    for path in CANDIDATES:
        if path.is_file():
            spec = importlib.util.spec_from_file_location("deliverables", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules["deliverables"] = module  # dataclasses look their module up by name
            spec.loader.exec_module(module)
            return module
    raise FileNotFoundError("the deliverables checker (tools/deliverables.py) is missing: download the "
                            "assignment's tools folder again.")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0]) if argv else HERE.parent
    try:
        checker = load_checker()
    except FileNotFoundError as error:
        print(f"make check: {error}", file=sys.stderr)
        return 2
    return checker.main(submission=str(folder))


if __name__ == "__main__":
    sys.exit(main())

"""The engine's layout as docs/architecture.md shows it, written from the packages' and modules' own docstrings.

    python -m grader.devtools.layout           rewrite the block between `<!-- layout -->` and
                                                `<!-- /layout -->` in docs/architecture.md
    python -m grader.devtools.layout --check   exit 1 when the block differs from what the packages say

Each package of grader/ is one stage of the pipeline or one of the instructor's tasks; its docstring says
which, and each module's docstring's first sentence says its one job. The block lists them in the
pipeline's order, so the folder list reads as the architecture and cannot drift from it: a module added,
moved or renamed changes the block, and tests/engine/test_layout.py fails until it is rewritten.
Lesson folders (a folder with a lesson.toml) are the lessons', not the engine's, and are not listed.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1]
ROOT = ENGINE.parent
DOCUMENT = ROOT / "docs" / "architecture.md"
BLOCK = re.compile(r"(<!-- layout -->\n)(?P<body>.*?)(<!-- /layout -->)", re.S)
# The packages in the order a submission meets them, then the instructor's tasks and the kit's tools.
PIPELINE = ("intake", "sandbox", "running", "judging", "results", "admin", "release", "student", "devtools",
            "templates")
# A folder that is no package says its job here (it has no docstring of its own).
FOLDER_JOBS = {"templates": "Files the release and the Gradescope and CI routes fill in with a lesson's values and "
                            "ship: the CI workflows (.yml), the feedback script and the notebook's test cell."}


def summary(path: Path) -> str:
    """The first sentence of a module's docstring (its one job), on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z`])", paragraph, maxsplit=1)[0]
    return sentence.replace("|", "\\|")


def packages(engine: Path = ENGINE) -> list[str]:
    """The engine's folders of modules (a lesson's folder is not one)."""
    return sorted(p.name for p in engine.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
                  and any(p.glob("*.py")) and not (p / "lesson.toml").is_file())


def render(engine: Path = ENGINE) -> str:
    """The block's Markdown: the top-level modules, then each package and its modules."""
    found = packages(engine)
    unknown = sorted(set(found) - set(PIPELINE))
    if unknown:
        raise SystemExit(f"layout: package(s) {', '.join(unknown)} have no place in PIPELINE "
                         f"(grader/devtools/layout.py): add each where a submission meets it")
    lines = ["| where | its one job |", "| --- | --- |"]
    for path in sorted(engine.glob("*.py")):
        if path.name != "__init__.py":
            lines.append(f"| `grader/{path.name}` | {summary(path)} |")
    for name in (p for p in PIPELINE if p in found):
        folder = engine / name
        init = folder / "__init__.py"
        lines.append(f"| **`grader/{name}/`** | **{summary(init) if init.is_file() else FOLDER_JOBS[name]}** |")
        for path in sorted(folder.glob("*.py")):
            if path.name != "__init__.py":
                lines.append(f"| `{name}/{path.name}` | {summary(path)} |")
    return "\n".join(lines) + "\n"


def rewritten(text: str, engine: Path = ENGINE) -> str:
    return BLOCK.sub(lambda m: m.group(1) + render(engine) + m.group(3), text, count=1)


def stale(document: Path = DOCUMENT, engine: Path = ENGINE) -> list[str]:
    """What is wrong with the document's block (nothing: [])."""
    text = document.read_text(encoding="utf-8")
    if not BLOCK.search(text):
        return [f"{document} has no <!-- layout --> ... <!-- /layout --> block"]
    if rewritten(text, engine) != text:
        return [f"{document}'s layout differs from the packages' and modules' docstrings"]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.devtools.layout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare only; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for problem in problems:
            print(f"layout: {problem}; run `python -m grader.devtools.layout` and commit it", file=sys.stderr)
        return 1 if problems else 0
    DOCUMENT.write_text(rewritten(DOCUMENT.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"layout: {DOCUMENT.relative_to(ROOT)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The folder list reads as the architecture: docs/architecture.md's layout is written from the packages'
and modules' own docstrings (grader/devtools/layout.py) and is current, and the README's layout row names
every package of the engine."""
from __future__ import annotations

import re
from pathlib import Path

from grader.devtools import layout

KIT = Path(__file__).resolve().parents[2]


def test_the_architecture_documents_layout_is_written_from_the_docstrings():
    assert layout.stale() == [], "run `python -m grader.devtools.layout` and commit docs/architecture.md"


def test_every_package_and_module_has_a_place_and_a_job():
    packages = layout.packages()
    assert set(packages) <= set(layout.PIPELINE), "a new package needs its place in layout.PIPELINE"
    assert {"intake", "sandbox", "running", "judging", "results", "admin", "release"} <= set(packages)
    for name in packages:
        folder = layout.ENGINE / name
        assert (folder / "__init__.py").is_file() or name in layout.FOLDER_JOBS, name
        for path in folder.glob("*.py"):
            assert layout.summary(path), f"grader/{name}/{path.name} has no docstring saying its job"
    table = layout.render()
    for path in layout.ENGINE.rglob("*.py"):
        relative = path.relative_to(layout.ENGINE)
        if relative.parts[0] in packages and path.name != "__init__.py":
            assert f"`{relative.as_posix()}`" in table, relative


def test_the_readme_layout_row_names_every_package():
    readme = (KIT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `grader/` |"))
    named = set(re.findall(r"`(\w+)/`", row)) - {"grader"}
    assert named == set(layout.packages()), (sorted(named), layout.packages())


def test_a_block_that_differs_is_found(tmp_path):
    document = tmp_path / "architecture.md"
    document.write_text("# A\n\n<!-- layout -->\n| old | table |\n<!-- /layout -->\n", encoding="utf-8")
    assert layout.stale(document) and "differs" in layout.stale(document)[0]
    document.write_text(layout.rewritten(document.read_text(encoding="utf-8")), encoding="utf-8")
    assert layout.stale(document) == []
    document.write_text("# A\n", encoding="utf-8")
    assert "no <!-- layout -->" in layout.stale(document)[0]

"""No import circles: the engine (grader/ and its subpackages) and every lesson package under it, read
from their source (imports at module level and inside functions alike; not those under
`if TYPE_CHECKING:`, which never run), form an import graph without a cycle.

A circle makes the import order matter (a half-initialised module, an attribute missing at first
use) and ties the two ends together for good: the engine can no longer be read, tested or shipped
without the lesson, which is what the lesson boundary (tests/engine/test_lesson.py) forbids."""
from __future__ import annotations

import ast
from pathlib import Path

from grader import lesson as lessons

ENGINE = Path(lessons.__file__).resolve().parent


def modules_of(root: Path, package: str) -> dict[str, Path]:
    """Importable name -> file, for the package at `root` and every subpackage (lessons, their tests)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if any(p.startswith(".") or p == "__pycache__" for p in parts):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join((package, *parts))] = path
    return found


def imports_of(name: str, path: Path, known) -> set[str]:
    """The known modules `name` imports anywhere in its source: `import a.b`, `from a import b`
    (a module b or a name of a) and relative imports."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    # An import under `if TYPE_CHECKING:` never runs: it names a type for annotations, not a circle.
    typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                   for stmt in node.body for inner in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import grader.x.y` where only grader.x is ours
                target = target.rpartition(".")[0]
            # A module's own packages are imported before it runs, so naming one adds no edge.
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def _is_type_checking(test) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    known = modules_of(root, package)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each sorted, as a sorted list."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []

    def visit(start):
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def test_the_engine_and_its_lessons_import_each_other_in_no_circle():
    graph = import_graph(ENGINE, ENGINE.name)
    assert f"{ENGINE.name}.judging.score" in graph and lessons.lesson_names(), "the graph would be checked on nothing"
    for name in lessons.lesson_names():
        assert any(m.startswith(f"{ENGINE.name}.{name}.") for m in graph), name
    found = cycles(graph)
    assert not found, "import circles (break each by moving the shared part down into the engine):\n" + "\n".join(
        " <-> ".join(group) for group in found)


def test_the_engine_imports_no_lesson_module():
    graph = import_graph(ENGINE, ENGINE.name)
    lesson_packages = tuple(f"{ENGINE.name}.{name}" for name in lessons.lesson_names())
    engine = [m for m in graph if not m.startswith(lesson_packages)]
    faults = sorted(f"{m} imports {t}" for m in engine for t in graph[m] if t.startswith(lesson_packages))
    assert not faults, "the engine reaches a lesson only through grader.lesson.load_lesson():\n" + "\n".join(faults)


def test_the_graph_sees_function_level_and_relative_imports_and_finds_a_circle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "lesson" / "tests").mkdir(parents=True)
    for folder in (pkg, pkg / "lesson", pkg / "lesson" / "tests"):
        (folder / "__init__.py").write_text("")
    (pkg / "engine.py").write_text("def main():\n    from pkg.lesson import data\n")
    (pkg / "lesson" / "data.py").write_text("from .tests import checks\n")
    (pkg / "lesson" / "tests" / "checks.py").write_text("import pkg.engine as e\n")
    (pkg / "other.py").write_text("from typing import TYPE_CHECKING\nfrom pkg import engine\n"
                                  "if TYPE_CHECKING:\n    from pkg.lesson.tests.checks import x\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.engine"] == {"pkg.lesson.data"} and graph["pkg.lesson.data"] == {"pkg.lesson.tests.checks"}
    assert graph["pkg.other"] == {"pkg.engine"}  # the typing-only import is no edge
    assert cycles(graph) == [["pkg.engine", "pkg.lesson.data", "pkg.lesson.tests.checks"]]
    (pkg / "lesson" / "tests" / "checks.py").write_text("import numpy\n")
    assert cycles(import_graph(pkg, "pkg")) == []

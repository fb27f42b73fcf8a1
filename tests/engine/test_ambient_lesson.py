"""The lesson is a value passed to each stage, never looked up (the lesson-as-a-value rule).

`load_lesson(` builds the value at an entry point (the command line, the nbgrader cell, the developer
tools, a test's fixture); every stage takes it as `lesson=`. While the engine moves to that,
`lesson_for_migration()` answers callers not converted yet, and some modules still fake constants with a
module-level `__getattr__`. This test counts the three in every module under grader/: a count may only
go down (CEILING below), and outside the entry points the goal is none.
"""
from __future__ import annotations

import ast
from pathlib import Path

GRADER = Path(__file__).resolve().parents[2] / "grader"
# Entry points build the value with load_lesson (never lesson_for_migration, never __getattr__).
ENTRY_POINTS = {"__main__.py", "release/hidden_cell.py", "sandbox/zygote.py", "running/torch_audit.py"}
ENTRY_FOLDERS = ("devtools/",)

# file (under grader/) -> the most ambient reads it may still hold. Lower a number when you convert;
# never raise one, never add a row.
CEILING = {
    "__main__.py": 1,
    "admin/export.py": 1,
    "admin/regrade.py": 1,
    "admin/similarity.py": 2,
    "day13/visible_fingerprints.py": 1,
    "intake/submissions.py": 1,
    "judging/totals.py": 1,  # was hidden behind results/feedback.rubric_path(); now said
    "release/nbgrader_autograde.py": 1,
    "release/notebook.py": 2,
    "release/student_release.py": 2,
    "results/feedback.py": 1,
    "running/deliverables_process.py": 2,
    "running/forbidden.py": 1,
    "running/grade.py": 1,
    "running/torch_audit.py": 1,
    "sandbox/zygote.py": 2,
}


def ambient_reads(path: Path) -> int:
    """Calls of load_lesson / lesson_for_migration, and a module-level __getattr__, in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    count = sum(1 for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in ("load_lesson", "lesson_for_migration"):
                count += 1
    return count


def _counts() -> dict[str, int]:
    found = {}
    for path in sorted(GRADER.rglob("*.py")):
        rel = path.relative_to(GRADER).as_posix()
        if rel == "lesson.py" or rel.endswith("/tests/conftest.py") or rel.startswith(ENTRY_FOLDERS):
            continue  # the definitions; a lesson's pytest fixtures and the developer tools are entry points
        n = ambient_reads(path)
        if n:
            found[rel] = n
    return found


def test_ambient_lesson_reads_only_go_down():
    counts = _counts()
    over = {f: (n, CEILING.get(f, 0)) for f, n in counts.items() if f not in ENTRY_POINTS and n > CEILING.get(f, 0)}
    assert not over, (
        "a module reads the lesson ambiently (load_lesson(), lesson_for_migration() or a module-level "
        "__getattr__) more often than before: take the value as a `lesson=` keyword argument from your "
        f"caller instead. file: (reads now, allowed): {over}")


def test_entry_points_build_the_value_and_never_read_it_ambiently():
    for rel in sorted(ENTRY_POINTS):
        path = GRADER / rel
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        migrating = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and getattr(node.func, "id", getattr(node.func, "attr", None)) == "lesson_for_migration"]
        getattrs = [node.lineno for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
        assert not getattrs, f"grader/{rel}: a module-level __getattr__ at line(s) {getattrs}"
        assert len(migrating) <= CEILING.get(rel, 0), f"grader/{rel}: lesson_for_migration() at line(s) {migrating}"


def test_the_counter_sees_each_kind_of_read(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from grader.lesson import load_lesson\n"
                      "def __getattr__(name):\n    return load_lesson()\n"
                      "class Proxy:\n    def __getattr__(self, name):\n        return 1\n"  # a class's: fine
                      "def f(lesson=None):\n    return lesson or lessons.lesson_for_migration()\n")
    assert ambient_reads(sample) == 3

"""The lesson is a value passed to each stage, never looked up (the lesson-as-a-value rule).

`load_lesson(` builds the value at an entry point (the command line, the zygote's parent, the nbgrader
step, a module's own `python -m` command, the developer tools, a test's fixture); every stage takes it as
`lesson=`. No module reads it by lookup: no other `load_lesson(` call, no module-level `__getattr__` that
fakes a constant, no variable of the environment naming the lesson, no module-global cache of lesson data.
"""
from __future__ import annotations

import ast
from pathlib import Path

from grader import lesson as lessons

GRADER = Path(__file__).resolve().parents[2] / "grader"
# file (under grader/) -> the entry point it is. Only these build the value with load_lesson; anything
# else takes `lesson=` from its caller.
ENTRY_POINTS = {
    "__main__.py": "the command line (python -m grader COMMAND --lesson ...)",
    "sandbox/__main__.py": "python -m grader.sandbox --check [--lesson ...]",
    "release/nbgrader_autograde.py": "nbgrader's autograde step (its config's HiddenTests.lesson)",
    "release/notebook.py": "python -m grader.release.notebook [--lesson ...]",
    "release/gradescope.py": "python -m grader.release.gradescope build [--lesson ...]",
    "running/torch_audit.py": "python -m grader.running.torch_audit [--lesson ...]",
    "admin/similarity.py": "python -m grader.admin.similarity --build-base ... [--lesson ...]",
    "day13/visible_fingerprints.py": "Day 13's own command for its known_mistakes.json",
    "day13/tolerances.py": "python -m grader.day13.tolerances (the measured spread of Day 13's variants)",
}
ENTRY_FOLDERS = ("devtools/",)  # the developer tools: each is a command of its own


def ambient_reads(path: Path) -> list[int]:
    """Lines of the calls of load_lesson / lesson_for_migration, and of a module-level __getattr__, in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = [node.lineno for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in ("load_lesson", "lesson_for_migration"):
                lines.append(node.lineno)
    return sorted(lines)


def _engine_files():
    for path in sorted(GRADER.rglob("*.py")):
        rel = path.relative_to(GRADER).as_posix()
        if rel == "lesson.py" or rel.endswith("/tests/conftest.py") or rel.startswith(ENTRY_FOLDERS):
            continue  # the definition; a lesson's pytest fixtures and the developer tools are entry points
        yield rel, path


def test_no_module_reads_the_lesson_outside_the_entry_points():
    found = {rel: lines for rel, path in _engine_files() if rel not in ENTRY_POINTS and (lines := ambient_reads(path))}
    assert not found, (
        "a module reads the lesson ambiently (load_lesson(), or a module-level __getattr__ faking a constant): "
        f"take the value as a `lesson=` keyword argument from your caller instead. file: lines {found}")


def test_entry_points_build_the_value_and_never_fake_a_constant():
    for rel in sorted(ENTRY_POINTS):
        tree = ast.parse((GRADER / rel).read_text(encoding="utf-8"))
        getattrs = [node.lineno for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
        assert not getattrs, f"grader/{rel}: a module-level __getattr__ at line(s) {getattrs}"
        assert ambient_reads(GRADER / rel), f"grader/{rel} builds no lesson any more: take it off ENTRY_POINTS"


def test_no_variable_names_the_lesson_and_no_fallback_is_left():
    assert not hasattr(lessons, "lesson_for_migration") and not hasattr(lessons, "LESSON_ENV")
    for path in sorted(GRADER.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "GRADER_LESSON" not in text, f"{path}: the lesson crosses as a value or an argument, never a variable"


def test_no_module_keeps_a_cache_of_lesson_data():
    """A module-level cache (functools.cache / lru_cache) outlives the lesson value it was computed for;
    what a stage derives from a lesson is kept on the value (Lesson.derived, cached properties)."""
    # Keyed by the files themselves, not a lesson: the engine's and the rubric's digests (regrade), read again
    # when a file changes (its mtime and size are in the key) or after current.cache_clear().
    allowed = {"admin/regrade.py"}
    found = {}
    for rel, path in _engine_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    if ast.unparse(target).split(".")[-1] in ("lru_cache", "cache") and rel not in allowed:
                        found.setdefault(rel, []).append(node.name)
    assert not found, f"module-level caches: {found}; keep what you derive from a lesson on the value (lesson.derived)"


def test_the_counter_sees_each_kind_of_read(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from grader.lesson import load_lesson\n"
                      "def __getattr__(name):\n    return load_lesson()\n"
                      "class Proxy:\n    def __getattr__(self, name):\n        return 1\n"  # a class's: fine
                      "def f(lesson=None):\n    return lesson or lessons.lesson_for_migration()\n")
    assert ambient_reads(sample) == [2, 3, 8]

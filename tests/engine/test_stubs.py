"""grader/release/stubs.py: the student stubs are generated from the reference, and nothing of the reference leaks."""
import ast
import re

import pytest

from grader.lesson import lesson_names, load_lesson
from grader.release import stubs

PAIRS = stubs.stub_pairs()


def _squeeze(text):
    return "".join(text.split())


@pytest.mark.parametrize("name", lesson_names())
def test_every_contract_module_of_a_lesson_has_a_stub(name):
    """Each lesson's student folder gets exactly one generated stub per contract module, and no other."""
    lesson = load_lesson(name)
    stubs_made = sorted(stub.name for _, stub in PAIRS if stub.parent == lesson.assignment)
    assert stubs_made == sorted(lesson.file_of.values())


@pytest.mark.parametrize("solution,stub", PAIRS, ids=[s.name for s, _ in PAIRS])
def test_committed_stub_is_regenerated_byte_for_byte(solution, stub):
    assert stub.exists(), f"{stub} is missing: run `make stubs`"
    regenerated = stubs.make_stub(solution.read_text(encoding="utf-8")).encode("utf-8")
    assert stub.read_bytes() == regenerated, f"{stub.name} differs from its solution: run `make stubs` and commit"


def test_check_mode_passes_on_the_committed_tree(capsys):
    assert stubs.main(check=True) == 0, capsys.readouterr().err


def test_no_solution_line_reaches_assignments():
    """Every non-trivial reference line is searched for in every text file under assignments/ (spaces ignored)."""
    texts = {path: _squeeze(path.read_text(encoding="utf-8"))
             for path in _assignment_files() if path.suffix in {".py", ".md", ".ini", ".txt", ""}}
    assert texts, "nothing to search: assignments/ is empty"
    leaks = []
    for solution, _ in PAIRS:
        for line in stubs.solution_lines(solution.read_text(encoding="utf-8")):
            leaks += [f"{path.name}: {line}" for path, text in texts.items() if _squeeze(line) in text]
    assert not leaks, "solution code found in assignments/:\n" + "\n".join(leaks)


def _assignment_files():
    # Every lesson's student folder. Caches (__pycache__, .pytest_cache) are written by test runs and never shipped.
    root = stubs.ASSIGNMENTS
    return sorted(p for p in root.rglob("*") if p.is_file()
                  and not any(part == "__pycache__" or part.startswith(".") for part in p.relative_to(root).parts))


@pytest.mark.parametrize("solution,stub", PAIRS, ids=[s.name for s, _ in PAIRS])
def test_stub_keeps_the_contract(solution, stub):
    """Same functions and classes with the same signatures and docstrings; each task body is TODO + raise."""
    ref, mine = ast.parse(solution.read_text(encoding="utf-8")), ast.parse(stub.read_text(encoding="utf-8"))

    def defs(tree):
        return {node.name: node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}

    ref_defs, stub_defs = defs(ref), defs(mine)
    assert ref_defs.keys() == stub_defs.keys()
    for name, node in ref_defs.items():
        assert ast.get_docstring(stub_defs[name]) == ast.get_docstring(node), f"{name}: docstring changed"
        if isinstance(node, ast.FunctionDef):
            assert ast.dump(stub_defs[name].args) == ast.dump(node.args), f"{name}: signature changed"
    source = solution.read_text(encoding="utf-8")
    tasks = re.findall(r"# BEGIN SOLUTION \((Task \d+ · [^)]+)\)", source)
    assert tasks, f"{solution.name} has no solution region"
    text = stub.read_text(encoding="utf-8")
    for task in tasks:
        assert f"# TODO {task}:" in text
        assert f'raise NotImplementedError("{task}: not implemented yet (handout §' in text
    if "super().__init__()" in source:
        assert text.count("super().__init__()") == source.count("super().__init__()")


def test_stub_bodies_raise_naming_the_task():
    """Run a generated stub: the function exists, and calling it raises NotImplementedError with its task."""
    source = (
        '"""Toy lesson (handout §2)."""\n'
        "def weighted_average(w, v):\n"
        '    """Σ w_i v_i (handout §2)."""\n'
        "    # BEGIN SOLUTION (Task 9 · weighted_average)\n"
        "    return sum(a * b for a, b in zip(w, v))\n"
        "    # END SOLUTION\n"
    )
    namespace = {}
    exec(compile(stubs.make_stub(source), "stub.py", "exec"), namespace)
    with pytest.raises(NotImplementedError, match=r"^Task 9 · weighted_average: not implemented yet \(handout §2\)$"):
        namespace["weighted_average"]([0.7, 0.3], [10, 20])
    exec(compile(source, "solution.py", "exec"), namespace)
    assert namespace["weighted_average"]([0.7, 0.3], [10, 20]) == pytest.approx(13.0)


def test_make_stub_keeps_indentation_and_the_text_around_regions():
    source = (
        "class A:\n"
        '    """Handout §7."""\n'
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        # BEGIN SOLUTION (Task 4 · A.__init__)\n"
        "        self.h = 2\n"
        "        # END SOLUTION\n"
        "\n"
        "    x = 1  # outside any region\n"
    )
    stub = stubs.make_stub(source)
    assert stub.splitlines() == [
        "class A:",
        '    """Handout §7."""',
        "    def __init__(self):",
        "        super().__init__()",
        "        # TODO Task 4 · A.__init__: replace these two lines with your code.",
        '        raise NotImplementedError("Task 4 · A.__init__: not implemented yet")',
        "",
        "    x = 1  # outside any region",
    ]


def test_section_comes_from_the_nearest_docstring_above():
    source = (
        "def f():\n"
        '    """(handout §3, §4)"""\n'
        "    # BEGIN SOLUTION (Task 1 · f)\n"
        "    pass\n"
        "    # END SOLUTION\n"
        "def g():\n"
        '    """handout §9–§12"""\n'
        "    # BEGIN SOLUTION (Task 2 · g)\n"
        "    pass\n"
        "    # END SOLUTION\n"
    )
    stub = stubs.make_stub(source)
    assert "Task 1 · f: not implemented yet (handout §3, §4)" in stub
    assert "Task 2 · g: not implemented yet (handout §9–§12)" in stub


def test_source_without_markers_is_unchanged():
    source = "import torch\n\n\ndef f(x):\n    return x + 1\n"
    assert stubs.make_stub(source) == source
    assert stubs.solution_lines(source) == []


@pytest.mark.parametrize("source,problem", [
    ("# BEGIN SOLUTION (Task 1 · f)\nx = 1\n", "never closed"),
    ("x = 1\n# END SOLUTION\n", "without a BEGIN"),
    ("# BEGIN SOLUTION (Task 1 · f)\n# BEGIN SOLUTION (Task 2 · g)\n# END SOLUTION\n", "inside the region"),
    ("# BEGIN SOLUTION task one\nx = 1\n# END SOLUTION\n", "Task N · name"),
])
def test_broken_markers_are_reported(source, problem):
    with pytest.raises(stubs.MarkerError, match=problem):
        stubs.make_stub(source)


def test_solution_lines_skip_comments_and_generic_lines():
    source = (
        "# BEGIN SOLUTION (Task 1 · f)\n"
        "# a comment only\n"
        "scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # (T, T)\n"
        "return x\n"
        "self.ffn = nn.Sequential(\n"
        "    nn.GELU(),\n"
        "s = '#not a comment' + weights_name\n"
        "# END SOLUTION\n"
        "outside_the_region = compute_something_long()\n"
    )
    assert stubs.solution_lines(source) == [
        "scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)",
        "s = '#not a comment' + weights_name",
    ]


def test_check_mode_reports_a_stale_stub(tmp_path, monkeypatch, capsys):
    solutions, assignments = tmp_path / "solutions", tmp_path / "assignments"
    (solutions / "day99").mkdir(parents=True)
    (solutions / "day99" / "toy.py").write_text(
        "def f():\n    # BEGIN SOLUTION (Task 1 · f)\n    return 42\n    # END SOLUTION\n", encoding="utf-8")
    monkeypatch.setattr(stubs, "SOLUTIONS", solutions)
    monkeypatch.setattr(stubs, "ASSIGNMENTS", assignments)
    assert stubs.main(check=True) == 1  # the stub does not exist yet
    assert "make stubs" in capsys.readouterr().err
    assert stubs.main() == 0
    stub = assignments / "day99" / "toy.py"
    assert 'raise NotImplementedError("Task 1 · f: not implemented yet")' in stub.read_text(encoding="utf-8")
    assert stubs.main(check=True) == 0
    stub.write_text(stub.read_text(encoding="utf-8") + "# hand edit\n", encoding="utf-8")
    assert stubs.main(check=True) == 1
    assert "-# hand edit" in capsys.readouterr().err  # the diff shows what regenerating would remove


def test_student_readme_lists_every_task_and_says_what_is_not_allowed():
    """Each lesson's student README has a task table that follows the markers, so a renumbered task cannot
    drift from it, and a "Not allowed" section (which calls it lists is the lesson's, tested with it)."""
    for solution, stub in PAIRS:
        readme = (stub.parent / "README.md").read_text(encoding="utf-8")
        for number, name in re.findall(r"# BEGIN SOLUTION \(Task (\d+) · ([\w.]+)\)", solution.read_text(encoding="utf-8")):
            row = re.search(rf"^\| {number} \| `{solution.name}` \|(.*)$", readme, re.M)
            assert row, f"README.md has no row for Task {number} in {solution.name}"
            assert name.split(".")[0] in row.group(1), f"Task {number}: README row does not name {name}"
        assert "## Not allowed" in readme, f"{stub.parent.name}/README.md says nothing of what is not allowed"

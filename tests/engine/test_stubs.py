"""grader/release/stubs.py: the student stubs are generated from the reference, and nothing of the reference leaks.

What is checked of every lesson goes over each lesson under grader/ and the fixture toy (found by its path):
each commits every stub, each equal to its solution's, or none (the release generates them)."""
import ast
import re
import shutil

import pytest

from engine_helpers import TOY
from grader.lesson import lesson_names, load_lesson
from grader.release import stubs

# Each lesson under grader/ by name, and the fixture toy by its path (which commits no stub: the release generates them).
LESSONS = [*lesson_names(), str(TOY)]
IDS = [*lesson_names(), "fixture-toy"]


@pytest.fixture(scope="module", params=LESSONS, ids=IDS)
def lesson(request):
    return load_lesson(request.param)


def _squeeze(text):
    return "".join(text.split())


def test_every_contract_module_of_a_lesson_has_a_stub(lesson):
    """Each lesson's student folder gets exactly one generated stub per contract module, and no other."""
    stubs_made = sorted(stub.name for _, stub in stubs.stub_pairs(lesson=lesson))
    assert stubs_made == sorted(lesson.file_of.values())
    assert all(stub.parent == lesson.assignment for _, stub in stubs.stub_pairs(lesson=lesson))


def test_a_lesson_commits_every_stub_byte_for_byte_or_none(lesson):
    pairs = stubs.stub_pairs(lesson=lesson)
    committed = [(solution, stub) for solution, stub in pairs if stub.exists()]
    assert not committed or len(committed) == len(pairs), (
        f"{lesson.name} commits {len(committed)} of its {len(pairs)} stubs: run `make stubs LESSON={lesson.ref}`")
    for solution, stub in committed:
        regenerated = stubs.make_stub(solution.read_text(encoding="utf-8")).encode("utf-8")
        assert stub.read_bytes() == regenerated, (
            f"{stub.name} differs from its solution: run `make stubs LESSON={lesson.ref}` and commit")


def test_check_mode_passes_on_the_committed_tree(lesson, capsys):
    assert stubs.main(lesson=lesson, check=True) == 0, capsys.readouterr().err


def test_no_solution_line_reaches_the_student_folder(lesson):
    """Every non-trivial reference line is searched for in every text file of the lesson's student folder (spaces ignored)."""
    texts = {path: _squeeze(path.read_text(encoding="utf-8"))
             for path in _assignment_files(lesson) if path.suffix in {".py", ".md", ".ini", ".txt", ""}}
    assert texts, f"nothing to search: {lesson.assignment} is empty"
    leaks = []
    for solution, _ in stubs.stub_pairs(lesson=lesson):
        lines = stubs.solution_lines(solution.read_text(encoding="utf-8"))
        assert lines, f"{solution.name}: no solution line to search for"
        for line in lines:
            leaks += [f"{path.name}: {line}" for path, text in texts.items() if _squeeze(line) in text]
    assert not leaks, f"solution code found in {lesson.assignment}:\n" + "\n".join(leaks)


def _assignment_files(lesson):
    # Caches (__pycache__, .pytest_cache) are written by test runs and never shipped.
    root = lesson.assignment
    return sorted(p for p in root.rglob("*") if p.is_file()
                  and not any(part == "__pycache__" or part.startswith(".") for part in p.relative_to(root).parts))


def test_stub_keeps_the_contract(lesson):
    """Same functions and classes with the same signatures and docstrings; each task body is TODO + raise.
    (What is committed equals what is generated: test_a_lesson_commits_every_stub_byte_for_byte_or_none.)"""
    for solution, _ in stubs.stub_pairs(lesson=lesson):
        _keeps_the_contract(solution, stubs.make_stub(solution.read_text(encoding="utf-8")))


def _keeps_the_contract(solution, text):
    ref, mine = ast.parse(solution.read_text(encoding="utf-8")), ast.parse(text)

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


def test_check_mode_passes_with_none_or_all_and_reports_a_partial_or_stale_set(tmp_path, capsys):
    """On a copy of the toy, found by its path: it commits no stub (check passes, the release generates them);
    `stubs` writes them all (check passes); a hand edit or a missing one fails, saying what to run."""
    copy = tmp_path / "toy"
    shutil.copytree(TOY, copy, ignore=shutil.ignore_patterns("__pycache__"))
    lesson = load_lesson(str(copy))
    assignment = lesson.assignment
    assert assignment.is_relative_to(copy) and not list(assignment.glob("*.py"))
    assert stubs.main(lesson=lesson, check=True) == 0
    assert "the release generates" in capsys.readouterr().out
    assert not list(assignment.glob("*.py")), "check mode wrote a stub"

    assert stubs.main(lesson=lesson) == 0
    written = sorted(p.name for p in assignment.glob("*.py"))
    assert written == sorted(lesson.file_of.values())
    for solution, stub in stubs.stub_pairs(lesson=lesson):
        assert stub.read_text(encoding="utf-8") == stubs.make_stub(solution.read_text(encoding="utf-8"))
    assert 'raise NotImplementedError("Task 1 · softmax: not implemented yet (handout §1)")' in (
        assignment / "activations.py").read_text(encoding="utf-8")
    capsys.readouterr()
    assert stubs.main(lesson=lesson, check=True) == 0
    assert stubs.main(lesson=lesson) == 0 and "wrote" not in capsys.readouterr().out  # nothing to rewrite

    stub = assignment / "activations.py"
    stub.write_text(stub.read_text(encoding="utf-8") + "# hand edit\n", encoding="utf-8")
    assert stubs.main(lesson=lesson, check=True) == 1
    said = capsys.readouterr().err
    assert "-# hand edit" in said  # the diff shows what regenerating would remove
    assert f"make stubs LESSON={copy}" in said

    stubs.main(lesson=lesson)
    (assignment / "classifier.py").unlink()
    assert stubs.main(lesson=lesson, check=True) == 1
    said = capsys.readouterr().err
    assert "classifier.py is missing" in said and f"make stubs LESSON={copy}" in said


def test_marker_errors_stop_the_generator_naming_the_file(tmp_path, capsys):
    copy = tmp_path / "toy"
    shutil.copytree(TOY, copy, ignore=shutil.ignore_patterns("__pycache__"))
    solution = copy / "solutions" / "activations.py"
    solution.write_text(solution.read_text(encoding="utf-8").replace("# END SOLUTION", "# the end"), encoding="utf-8")
    lesson = load_lesson(str(copy))
    for check in (True, False):
        assert stubs.main(lesson=lesson, check=check) == 2
        said = capsys.readouterr().err
        assert "activations.py" in said and "never closed" in said
    assert not list(lesson.assignment.glob("*.py"))


def test_student_readme_lists_every_task_and_says_what_is_not_allowed(lesson):
    """Each lesson's student README has a task table that follows the markers, so a renumbered task cannot
    drift from it, and a "Not allowed" section (which calls it lists is the lesson's, tested with it)."""
    readme = (lesson.assignment / "README.md").read_text(encoding="utf-8")
    for solution, _ in stubs.stub_pairs(lesson=lesson):
        for number, name in re.findall(r"# BEGIN SOLUTION \(Task (\d+) · ([\w.]+)\)", solution.read_text(encoding="utf-8")):
            row = re.search(rf"^\| {number} \| `{solution.name}` \|(.*)$", readme, re.M)
            assert row, f"README.md has no row for Task {number} in {solution.name}"
            assert name.split(".")[0] in row.group(1), f"Task {number}: README row does not name {name}"
    assert "## Not allowed" in readme, f"{lesson.assignment}/README.md says nothing of what is not allowed"

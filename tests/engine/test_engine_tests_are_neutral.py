"""The engine's tests go through neutral lessons: no file under tests/engine/ names a real lesson.

A real lesson is a folder under grader/ that declares itself with lesson.toml (grader.lesson.lesson_names());
its tests live with it (tests/<lesson>/). An engine test that needs a lesson uses a fixture lesson
(tests/fixtures/lessons/: the toy, words), whose names are free to use here, even when a copy of one sits
under grader/ (a lesson folder of a fixture's name whose lesson.toml is the fixture's): the engine's tests
load the fixture by its path, never the copy. What names a real lesson:

- its folder name, anywhere in the text (code, strings, comments): an import of its package, a path
  into its assignment or solutions, a `load_lesson(...)` of it;
- a contract module's name used as the module: an import part or an attribute equal to it, or a string
  that is the name, its file (`<module>.py`) or a dotted name in it. As an English word in a sentence
  or a local variable's name it is not the lesson's (several contract modules are ordinary words);
- a name the contract asks a module to define (lesson.graded_names), as a whole word anywhere but in
  comments.

The names come from the lessons themselves, so a lesson added later is checked without touching this
file. None is allowed: a test about the real lessons themselves lives outside tests/engine/, in tests/kit/
(the lessons side by side, the engine's boundary with them) or with its lesson (tests/<lesson>/).

A test can also grade a real lesson without naming it: the kit's default lesson is what `load_lesson()`
with neither a name nor an engine folder gives, what `python -m grader ...` without `--lesson` grades, and
what an nbgrader course config's `use_the_kit(c)` grades when it names no lesson (neither `lesson=` nor
`c.HiddenTests.lesson`). Each is caught, in code and in a string that is a script a test runs (an f-string
too, or one line of a config built line by line); DEFAULT_USERS lists the files that use the default on
purpose, with why.
"""
from __future__ import annotations

import ast
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from source_tokens import tokens  # noqa: E402

from grader import lesson as lessons

ENGINE_TESTS = Path(__file__).resolve().parent
FIXTURE_LESSONS = ENGINE_TESTS.parent / "fixtures" / "lessons"

# test file -> (uses of the kit's default lesson, why that is the point of the test). Only shrinks.
DEFAULT_USERS: dict[str, tuple[int, str]] = {
    'test_bench.py': (1, "`make bench` measures the kit's default lesson: its deliverables checker and bench mutants, "
        'which no fixture lesson has'),
}


@dataclass(frozen=True)
class Names:
    """What of one real lesson an engine test must not name."""

    lesson: str
    modules: tuple[str, ...]
    contract_names: tuple[str, ...]


def fixture_copy(folder: Path, fixtures: Path = FIXTURE_LESSONS) -> bool:
    """Whether a lesson folder is a copy of a fixture lesson: the fixture's name, and its declaration byte for
    byte (a lesson made from a fixture and then declared differently is a lesson of its own)."""
    fixture = fixtures / folder.name / lessons.DECLARATION
    return fixture.is_file() and fixture.read_bytes() == (folder / lessons.DECLARATION).read_bytes()


def real_lessons(engine: Path = lessons.ENGINE) -> list[Names]:
    """The lessons under `engine` (grader/) that are not copies of a fixture lesson, with what of each is theirs."""
    found = []
    for name in lessons.lesson_names(engine):
        if fixture_copy(engine / name):
            continue
        lesson = lessons.load_lesson(name, engine)
        contract = tuple(dict.fromkeys(n for names in lesson.graded_names.values() for n in names))
        found.append(Names(name, lesson.modules, contract))
    return found


def names_used(path: Path, names: Names) -> set[str]:
    """Every name of the lesson that `path` uses (the folder name, a module, a contract name)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    folder = re.compile(rf"(?<![A-Za-z0-9]){re.escape(names.lesson)}(?![A-Za-z0-9])", re.IGNORECASE)
    found = {names.lesson} if folder.search(text) else set()
    contract = re.compile(r"(?<!\w)(" + "|".join(map(re.escape, names.contract_names)) + r")(?!\w)")
    module_use = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, names.modules)) + r")(?:\.py\b|\.(?=[A-Za-z_]))")
    if path.suffix != ".py":
        return found | set(contract.findall(text)) | set(module_use.findall(text))
    for kind, token in tokens(ast.parse(text, str(path))):
        found |= set(contract.findall(token))
        if kind == "import":
            found |= {part for part in token.split(".") if part in names.modules}
        elif kind == "attribute" and token in names.modules:
            found.add(token)  # ref.<module>, lesson.<module>: the module as a name
        elif kind == "string":
            if token in names.modules:
                found.add(token)
            found |= set(module_use.findall(token))
    return found


def _is_grader_command(items: list[ast.expr]) -> bool:
    """A command line written out in full, `... -m grader[.module] ...` with no `--lesson` in it (a list
    that splices in arguments, `*args`, gets them from its caller, where they are looked for)."""
    if any(isinstance(item, ast.Starred) for item in items):
        return False
    words = [item.value if isinstance(item, ast.Constant) and isinstance(item.value, str) else None for item in items]
    runs_grader = any(a == "-m" and isinstance(b, str) and (b == "grader" or b.startswith("grader."))
                      for a, b in zip(words, words[1:]))
    return runs_grader and "--lesson" not in words


# str methods whose first argument is text looked for (or replaced away), never run:
# `config.replace("use_the_kit(c)\n", "")` leaves the kit's step out of a config.
LOOKED_FOR = frozenset({"replace", "count", "find", "rfind", "index", "rindex", "startswith", "endswith", "split",
                        "rsplit", "partition", "rpartition", "removeprefix", "removesuffix"})


def _callee(call: ast.Call) -> str | None:
    return getattr(call.func, "id", None) or getattr(call.func, "attr", None)


def _text(node: ast.AST) -> str | None:
    """The text of a string or an f-string, each `{...}` of an f-string read as a name (`_`), so that a
    script with values spliced in still parses as one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "_" for part in node.values)
    return None


def _names_its_lesson(call: ast.Call) -> bool:
    """`use_the_kit(c, lesson)` or `use_the_kit(c, lesson=...)`: a lesson is named unless it is None or empty
    (the default again). Arguments spliced in (`*args`, `**kwargs`) come from a caller, where they are looked for."""
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(k.arg is None for k in call.keywords):
        return True
    given = [*call.args[1:], *(k.value for k in call.keywords if k.arg == "lesson")]
    return any(not (isinstance(value, ast.Constant) and not value.value) for value in given)


def _sets_hidden_tests_lesson(tree: ast.AST) -> bool:
    """The config names its lesson by the trait itself: `c.HiddenTests.lesson = ...`."""
    return any(isinstance(target, ast.Attribute) and target.attr == "lesson"
               and getattr(target.value, "attr", None) == "HiddenTests"
               for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
               for target in (node.targets if isinstance(node, ast.Assign) else [node.target]))


def default_lesson_uses(source: str, where: str = "") -> list[str]:
    """Where `source` grades the kit's default lesson: a `load_lesson()` given neither a lesson nor an engine
    folder, a `-m grader` command line without `--lesson`, a course config's `use_the_kit(c)` that names no
    lesson; also inside a string (or an f-string) that is itself a script, or one line of a config."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # a string that is not a script (a message, bytes spelled out)
        return []
    # A list or a text compared with something is not run: `shlex.split(command)[:3] == ["python", "-m",
    # "grader"]`, `"use_the_kit(c)" in stderr`; nor is a text looked for or replaced away (LOOKED_FOR).
    compared = {id(side) for node in ast.walk(tree) if isinstance(node, ast.Compare)
                for side in (node.left, *node.comparators)}
    looked_for = {id(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args
                  and isinstance(node.func, ast.Attribute) and node.func.attr in LOOKED_FOR}
    # An f-string is read once, whole, not again piece by piece.
    pieces = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    lesson_set = _sets_hidden_tests_lesson(tree)
    found = []
    for node in ast.walk(tree):
        line = f"{where}line {node.lineno}" if hasattr(node, "lineno") else where
        text = None if id(node) in compared | looked_for | pieces else _text(node)
        if isinstance(node, ast.Call) and not node.args and not node.keywords and _callee(node) == "load_lesson":
            found.append(f"{line}: load_lesson() with no lesson")
        elif (isinstance(node, ast.Call) and _callee(node) == "use_the_kit" and not _names_its_lesson(node)
              and not lesson_set):
            found.append(f"{line}: use_the_kit(c) with no lesson")
        elif isinstance(node, (ast.List, ast.Tuple)) and id(node) not in compared and _is_grader_command(node.elts):
            found.append(f"{line}: a grader command without --lesson")
        elif text is not None and ("\n" in text or "use_the_kit(" in text):
            found += default_lesson_uses(text, f"{line}, in the script: ")
    return found


LESSONS = real_lessons()
FILES = sorted(str(p.relative_to(ENGINE_TESTS)) for p in ENGINE_TESTS.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".md", ".toml", ".txt", ".json"))


def used_in(relative: str) -> set[str]:
    return {f"{n.lesson}: {hit}" for n in LESSONS for hit in names_used(ENGINE_TESTS / relative, n)}


def test_the_lessons_give_names_to_look_for():
    assert LESSONS, "no lesson under grader/: nothing to keep out of the engine's tests"
    for names in LESSONS:
        assert names.modules and names.contract_names, names


def test_the_scan_finds_each_way_of_naming_a_lesson(tmp_path):
    """A file written with every way of naming the first lesson is caught in each; the same words as
    English in a sentence, or in a comment for the contract's names, are not. (A lesson whose contract
    names hold its folder name, as a `train_<lesson>` would, cannot tell the two hits apart: not that one.)"""
    names = next((n for n in LESSONS if not any(n.lesson in x.lower() for x in n.modules + n.contract_names)), None)
    if names is None:
        pytest.skip("every lesson's contract names hold its folder name")
    module, defined = names.modules[0], names.contract_names[0]
    cases = {
        f"from grader.{names.lesson} import x\n": {names.lesson},
        f"# graded like {names.lesson.upper()}\n": {names.lesson},
        f"import {module}\n": {module},
        f"x = ref.{module}\n": {module},
        f"x = '{module}'\n": {module},
        f"x = 'sub/{module}.py'\n": {module},
        f"x = '{module}.{defined}'\n": {module, defined},
        f"def f(): return {defined}\n": {defined},
        f"x = 'the {defined} of it'\n": {defined},
        f"x = 'a {module} of text'\n# {defined}\n{module} = 1\n": set(),
    }
    for number, (source, expected) in enumerate(cases.items()):
        path = tmp_path / f"case_{number}.py"
        path.write_text(source)
        assert names_used(path, names) == expected, source


def test_a_copy_of_a_fixture_lesson_is_no_real_lesson_but_a_lesson_made_from_one_is(tmp_path):
    """Beside a copy of the toy under an engine folder, the toy's names stay free; once the copy declares
    itself otherwise (another title) it is a lesson of its own, and its names are looked for."""
    engine = tmp_path / "grader"
    shutil.copytree(FIXTURE_LESSONS / "toy", engine / "toy", ignore=shutil.ignore_patterns("__pycache__"))
    assert lessons.lesson_names(engine) == ["toy"]
    assert fixture_copy(engine / "toy") and real_lessons(engine) == []
    declared = engine / "toy" / lessons.DECLARATION
    declared.write_text(declared.read_text(encoding="utf-8").replace('title = "', 'title = "Our own: ', 1),
                        encoding="utf-8")
    assert not fixture_copy(engine / "toy")
    (made,) = real_lessons(engine)
    toy = lessons.load_lesson(str(FIXTURE_LESSONS / "toy"))
    assert made.lesson == "toy" and made.modules == toy.modules and set(made.contract_names) == {
        n for names in toy.graded_names.values() for n in names}
    # The names are looked for again: a file using the toy's folder name and a contract module is caught.
    path = tmp_path / "case.py"
    path.write_text(f"from grader.toy import x\nimport {toy.modules[0]}\n")
    assert names_used(path, made) == {"toy", toy.modules[0]}


def test_this_guard_names_no_lesson():
    assert not used_in(Path(__file__).name)


@pytest.mark.parametrize("relative", FILES)
def test_engine_test_names_no_real_lesson(relative):
    used = used_in(relative)
    assert not used, (
        f"tests/engine/{relative} names a real lesson ({', '.join(sorted(used))}): an engine test uses a "
        f"fixture lesson (tests/fixtures/lessons/); a test about the lesson itself moves to tests/<lesson>/, "
        f"one about the real lessons together to tests/kit/")


def test_the_default_lesson_is_found_however_a_test_reaches_it():
    """Each way of grading the kit's default lesson is found, in code and in a script a test writes; a lesson
    or an engine folder given, `--lesson` on the line, a config that names its lesson, arguments spliced in
    from a caller, or a text only compared, looked for or replaced away, are not."""
    cases = {
        "from grader.lesson import load_lesson\nLESSON = load_lesson()\n": 1,
        "from grader import lesson as lessons\ndef f():\n    return lessons.load_lesson()\n": 1,
        "cmd = [sys.executable, '-m', 'grader', 'grade', 'subs', '--out', 'out']\n": 1,
        "cmd = (python, '-m', 'grader.release.notebook', '--out', 'x')\n": 1,
        "SCRIPT = '''\nimport grader.lesson\nrun(lesson=grader.lesson.load_lesson())\n'''\n": 1,
        "LESSON = load_lesson(str(TOY))\nmine = load_lesson(engine=tmp_path)\nnamed = load_lesson(name='x')\n": 0,
        "cmd = [sys.executable, '-m', 'grader', 'grade', 'subs', '--lesson', ref]\n": 0,
        "def run(*args):\n    return [sys.executable, '-m', 'grader', *args]\n": 0,
        "MESSAGE = 'reach it only through load_lesson():\\n' + faults\n": 0,
        "print('-m', 'grader')\n": 0,  # a call's arguments, not a command line: only lists and tuples are
        "assert shlex.split(line)[:3] == ['python', '-m', 'grader']\n": 0,  # compared, not run
        # An nbgrader course config whose kit step names no lesson: a script, an f-string, a line of one.
        "CONFIG = '''\nc = get_config()\nfrom grader.release.nbgrader_autograde import use_the_kit\nuse_the_kit(c)\n'''\n": 1,
        "CONFIG = (f'c.CourseDirectory.course_id = {name!r}\\n'\n          'use_the_kit(c)\\n'\n"
        "          f'c.HiddenTests.sandbox_uid_base = {uid}\\n')\n": 1,
        "CONFIG = f'use_the_kit(c)\\n{more}'\n": 1,  # once, not again for its first piece
        "lines = ['from grader.release.nbgrader_autograde import use_the_kit', 'use_the_kit(c)']\n": 1,
        "CONFIG = 'import grader.release.nbgrader_autograde as kit\\nkit.use_the_kit(c, lesson=None)\\n'\n": 1,
        "CONFIG = f'use_the_kit(c, lesson={ref!r})\\n'\n": 0,
        "CONFIG = 'use_the_kit(c, \"toy\")\\n'\n": 0,
        "CONFIG = 'use_the_kit(c)\\nc.HiddenTests.lesson = \"toy\"\\n'\n": 0,  # the trait names it
        "write(config.replace('use_the_kit(c)\\n', ''))\n": 0,  # the step left out of a config, not run
        "assert 'use_the_kit(c)' in stderr\n": 0,  # looked for in a message
    }
    for source, expected in cases.items():
        assert len(default_lesson_uses(source)) == expected, (source, default_lesson_uses(source))


@pytest.mark.parametrize("relative", [f for f in FILES if f.endswith(".py") and f != Path(__file__).name])
def test_engine_test_grades_no_default_lesson(relative):
    # (This file is left out: its self-test above is made of such uses, as samples that are never run.)
    uses = default_lesson_uses((ENGINE_TESTS / relative).read_text(encoding="utf-8"), f"{relative} ")
    allowed, why = DEFAULT_USERS.get(relative, (0, ""))
    assert len(uses) <= allowed, (
        "an engine test grades the kit's default lesson (a real one) without naming it:\n" + "\n".join(uses)
        + "\npass the fixture lesson it goes through (load_lesson(str(TOY)), --lesson <its path>)")
    assert len(uses) == allowed, (
        f"tests/engine/{relative} now uses the default lesson {len(uses)} times, not {allowed}: lower its count "
        "in DEFAULT_USERS (or remove the entry at 0); the list only shrinks")


def test_every_default_user_exists_and_says_why():
    for relative, (count, why) in DEFAULT_USERS.items():
        assert (ENGINE_TESTS / relative).is_file(), f"{relative} is gone: remove it from DEFAULT_USERS"
        assert count > 0 and why.strip(), relative

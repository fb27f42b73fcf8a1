"""The lesson boundary: every word and file name of a lesson comes from the lesson.

The engine (every module under grader/ outside a lesson folder, the templates the release fills in
included) names no lesson in its code or its strings (docstrings too; comments are not read). For every
lesson present (each folder under grader/ with a lesson.toml, and the fixture lessons under
tests/fixtures/lessons/), the check rejects:

- the lesson's folder name, anywhere in a string, an identifier or an import;
- a contract module's name used as a name: an import of it, or a string that is the name, the file
  (`positional.py`) or a dotted name in it (`self_attention.sdpa_masks`). As an English word ("a code
  block", "positional arguments") it is not the lesson's;
- a deliverable file's name (`lesson.deliverable_files()`), ignoring case, in a string;
- a word of the lesson's declared vocabulary (lesson.toml `vocabulary`), ignoring case, at the start of
  a word in a string or an identifier (`attention_components`, "Library attention").

A word the engine needs is a word the lesson gives it: a message, a title, a file name, read from the
lesson value. ALLOWED lists what other modules still hold while they are being converted; it may only
shrink (an entry no longer found fails the test, so a fixed file leaves the list).
"""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader import lesson as lessons

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from source_tokens import tokens  # noqa: E402

KIT = Path(__file__).resolve().parents[2]
ENGINE = KIT / "grader"
FIXTURE_LESSONS = KIT / "tests" / "fixtures" / "lessons"
# Files every released student folder has whatever the lesson (the engine writes or copies them): a
# lesson that also asks for one as a deliverable shares the name with every other lesson.
SHARED_FILES = frozenset({"readme.md", "readme", "readme.txt", "readme.markdown"})

# engine file (relative to grader/) -> the hits it may still hold, as "kind: text" (see faults()). Only shrinks.
# Owners (issue 23 point 3, this session): review.py, classreport.py, plots.py: documents; collect, submissions,
# deliverables, diagnose, score, source_scan, lesson.py, sandbox/*, torch_audit: core; calls, executor: executor;
# templates/notebook_tests.py: student (release).
ALLOWED: dict[str, set[str]] = {
    'intake/collect.py': {'day13: word: attention'},
    'judging/deliverables.py': {'day13: file: analysis.md', 'day13: file: analysis.txt'},
    'judging/diagnose.py': {'day13: word: attention', 'toy: word: softmax'},
    'judging/score.py': {'day13: word: attention'},
    'judging/source_scan.py': {'day13: word: attention'},
    'lesson.py': {'day13: module: block', 'day13: word: day 13'},
    'running/torch_audit.py': {'day13: word: attention', 'toy: word: softmax'},
    'sandbox/__init__.py': {'day13: word: attention'},
    'sandbox/startup.py': {'day13: word: attention', 'toy: word: softmax'},
    'sandbox/zygote.py': {'day13: word: attention'},
    'templates/notebook_tests.py': {'day13: module: multihead', 'day13: word: attention'},
}


@dataclass(frozen=True)
class Words:
    """What of one lesson the engine must not name."""

    lesson: str
    modules: tuple[str, ...]
    files: tuple[str, ...]
    vocabulary: tuple[str, ...]


def lesson_folders() -> list[Path]:
    return [ENGINE / name for name in lessons.lesson_names()] + sorted(
        p.parent for p in FIXTURE_LESSONS.glob(f"*/{lessons.DECLARATION}"))


def words_of(folder: Path) -> Words:
    lesson = lessons.load_lesson(folder.name if folder.parent == ENGINE else str(folder))
    declared = tomllib.loads((folder / lessons.DECLARATION).read_text(encoding="utf-8"))
    files = deliverable_files(lesson)
    return Words(lesson.name, lesson.modules, tuple(f for f in files if f.lower() not in SHARED_FILES),
                 tuple(str(w) for w in declared.get("vocabulary", ())))


def deliverable_files(lesson) -> tuple[str, ...]:
    """Every file name the lesson's deliverables accept (the one declaration its checks read too)."""
    return tuple(dict.fromkeys(name for entry in lesson.deliverable_files().values() for name in entry.names))


def engine_files() -> list[Path]:
    lesson_dirs = {p.parent for p in ENGINE.glob(f"*/{lessons.DECLARATION}")}
    return sorted(p for p in ENGINE.rglob("*.py") if not any(d in p.parents for d in lesson_dirs)
                  and "__pycache__" not in p.parts)


def faults(path: Path, words: Words) -> set[str]:
    """Every way `path` names the lesson, as "kind: text" (one entry per distinct hit)."""
    module_use = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, words.modules)) + r")(?:\.py\b|\.(?=[A-Za-z_]))") \
        if words.modules else None
    vocabulary = re.compile(r"(?i)(?<![a-z])(" + "|".join(map(re.escape, words.vocabulary)) + r")") \
        if words.vocabulary else None
    found = set()
    for kind, text in tokens(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if words.lesson in text:
            found.add(f"lesson name: {words.lesson}")
        if kind == "import":
            found |= {f"module: {part}" for part in text.split(".") if part in words.modules}
            continue
        if vocabulary:
            found |= {f"word: {m.group(1).lower()}" for m in vocabulary.finditer(text)}
        if kind != "string":
            continue
        if text in words.modules:
            found.add(f"module: {text}")
        if module_use:
            found |= {f"module: {m.group(1)}" for m in module_use.finditer(text)}
        lowered = text.lower()
        found |= {f"file: {name}" for name in words.files if name.lower() in lowered}
    return found


LESSONS = {folder.name: words_of(folder) for folder in lesson_folders()}
FILES = [str(p.relative_to(ENGINE)) for p in engine_files()]


def test_every_lesson_present_is_checked_with_words_to_check():
    assert "day13" in LESSONS and "toy" in LESSONS, sorted(LESSONS)
    for name, words in LESSONS.items():
        assert words.modules and words.vocabulary, f"{name} declares no vocabulary (lesson.toml `vocabulary`)"
    assert LESSONS["day13"].files, "Day 13's deliverable files were not found: the file check would check nothing"
    assert "templates/notebook_tests.py" in FILES and "running/forbidden.py" in FILES


@pytest.mark.parametrize("module", FILES)
def test_the_engine_names_no_word_of_any_lesson(module):
    path = ENGINE / module
    hits = {f"{lesson}: {fault}" for lesson, words in LESSONS.items() for fault in faults(path, words)}
    allowed = ALLOWED.get(module, set())
    new = sorted(hits - allowed)
    assert not new, (f"grader/{module} names a lesson's word; take it from the lesson value (a message, a title, a "
                     "file name the lesson declares):\n" + "\n".join(new))
    gone = sorted(allowed - hits)
    assert not gone, f"grader/{module} no longer holds {gone}: remove them from ALLOWED in this test"


def test_allowed_names_only_engine_files():
    assert set(ALLOWED) <= set(FILES), sorted(set(ALLOWED) - set(FILES))


def test_the_check_finds_each_kind_of_hit(tmp_path):
    words = Words("day99", ("positional", "block"), ("heat_map.png",), ("attention", "Day 99"))
    bad = tmp_path / "bad.py"
    bad.write_text(
        '"""Library Attention, for Day 99."""\n'
        "import positional\n"
        "from grader.day99 import standins\n"
        "def attention_components(x):\n"
        '    if x == "positional":\n'
        '        return "see block.py and positional.table, or HEAT_MAP.PNG"\n', encoding="utf-8")
    assert faults(bad, words) == {"word: attention", "word: day 99", "module: positional", "lesson name: day99",
                                  "module: block", "file: heat_map.png"}
    honest = tmp_path / "honest.py"
    honest.write_text('"""A code block; two positional arguments; the lesson\'s words."""\n'
                      "block = 1  # an identifier, not the module's name as a name\n"
                      'MESSAGE = "takes positional arguments in a block."\n', encoding="utf-8")
    assert faults(honest, words) == set()

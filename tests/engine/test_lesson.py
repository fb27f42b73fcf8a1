"""A lesson declares itself (grader/<name>/lesson.toml) and the engine finds it by name or path; that the
engine names no word of a lesson is tests/kit/test_lesson_boundary.py's."""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from grader import lesson as lessons
from grader.running.forbidden import POLICY_TABLES

from engine_helpers import TOY  # tests/fixtures, on the path by tests/engine/conftest.py

ENGINE = Path(lessons.__file__).resolve().parent
# A lesson under grader/ (whichever sorts first): what a name means. Tests that need a lesson with
# stand-ins take the first that has some.
A_LESSON = lessons.lesson_names()[0]
WITH_STANDINS = next(n for n in lessons.lesson_names() if lessons.load_lesson(n).standin_names)
# The kit's default lesson is one of them, but these tests never take it unasked (no `load_lesson()`): what
# they check holds for each lesson, or for the first that has what it needs.
WITH_DELIVERABLES = next(n for n in lessons.lesson_names() if lessons.load_lesson(n).deliverables_checks)

# Every engine module, wherever it sits under grader/ (the sandbox package, the templates the release
# fills in): a lesson package is a folder with a lesson.toml, and nothing else under grader/ may name one.
CONVERTED = sorted(str(p.relative_to(ENGINE)) for p in ENGINE.rglob("*.py")
                   if not any((ENGINE / part / lessons.DECLARATION).exists() for part in p.relative_to(ENGINE).parts[:1]))


@pytest.mark.parametrize("name", lessons.lesson_names())
def test_each_lesson_is_found_and_declares_what_the_engine_needs(name):
    lesson = lessons.load_lesson(name)
    assert lesson.name in lessons.lesson_names()
    for path in (lesson.contract, lesson.assignment, lesson.solutions, lesson.rubric_path,
                 lesson.forbidden_path, lesson.limits_path, lesson.tests_folder):
        assert path.exists(), path
    for module in lesson.modules:
        assert (lesson.solutions / f"{module}.py").is_file()
        assert (lesson.tests_folder / f"test_{module}.py").is_file()
        source = (lesson.solutions / f"{module}.py").read_text(encoding="utf-8")
        defined = {n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert set(lesson.graded_names[module]) <= defined, module
    assert lesson.contract_file_of == {name: f"{m}.py" for m, names in lesson.graded_names.items() for name in names}
    for folder in (lesson.variants, lesson.skeletons):  # what the kill rate grades, when declared
        assert folder is None or folder.is_dir(), folder
    assert set(lesson.skeleton_parts.values()) <= set(lesson.modules)
    from grader.judging.mutants import Catalogue

    assert set(lesson.bench_mutants) <= set(Catalogue.of(lesson).by_id), "make bench plants catalogue bugs only"
    assert all((lesson.solutions / picture).is_file() for picture in lesson.bench_pictures)


@pytest.mark.parametrize("name", lessons.lesson_names())
def test_components_and_points_come_from_the_rubric(name):
    lesson = lessons.load_lesson(name)
    rubric = tomllib.loads(lesson.rubric_path.read_text(encoding="utf-8"))
    graded_besides = [lesson.deliverables_component] if lesson.deliverables_component in rubric else []
    assert lesson.components == (*lesson.modules, *graded_besides)
    for component in lesson.components:
        expected = sum(e["points"] for e in rubric[component].values() if isinstance(e, dict) and "points" in e)
        assert lesson.points[component] == pytest.approx(expected)
    assert lesson.points[lesson.modules[0]] > 0


def test_the_deliverable_checks_and_the_example_course_are_the_lessons():
    lesson = lessons.load_lesson(WITH_DELIVERABLES)
    assert lesson.deliverables_checks.parent == lesson.folder and lesson.deliverables_checks.is_file()
    assert all(path.parent == lesson.folder and path.is_file() for path in lesson.deliverables_data)
    ids = [check_id for check_id, _ in lesson.deliverable_checks()]
    assert len(ids) == len(set(ids)) and set(ids) == set(lesson.rubric()[lesson.deliverables_component])
    assert lesson.example_course and lesson.example_feedback in lesson.example_course
    assert all((lesson.demo_class / folder).is_dir() for folder in lesson.example_course.values())


def _write_lesson(engine: Path, name: str, title: str) -> None:
    folder = engine / name
    folder.mkdir(parents=True)
    (folder / "lesson.toml").write_text(
        f'title = "{title}"\ncontract = "c.md"\nassignment = "a"\nsolutions = "s"\nnotebook_file = "n.ipynb"\n'
        '[modules]\nfirst = ["f"]\nsecond = ["G"]\n[always_standin]\nsecond = ["first"]\n', encoding="utf-8")
    (folder / "rubric.toml").write_text(
        '[meta]\nversion = 1\n[first.works]\npoints = 3\n[second.works]\npoints = 2\n[second.more]\npoints = 1.5\n'
        '[hints."x"]\ntext = "t"\n', encoding="utf-8")


def test_a_lesson_is_chosen_by_name_when_there_are_several(tmp_path):
    _write_lesson(tmp_path, "one", "One")
    only = lessons.load_lesson(engine=tmp_path)
    assert (only.name, only.title, only.components) == ("one", "One", ("first", "second"))
    assert only.points == {"first": 3.0, "second": 3.5}
    assert only.always_standin == {"second": ("first",)}
    _write_lesson(tmp_path, "two", "Two")
    with pytest.raises(lessons.LessonError, match="--lesson"):
        lessons.load_lesson(engine=tmp_path)
    assert lessons.load_lesson("two", engine=tmp_path).title == "Two"
    with pytest.raises(lessons.LessonError, match="no lesson 'three'"):
        lessons.load_lesson("three", engine=tmp_path)


def test_of_several_lessons_the_kits_default_is_chosen_and_without_one_the_message_says_how(tmp_path):
    engine = tmp_path / "grader"
    _write_lesson(engine, "one", "One")
    _write_lesson(engine, "two", "Two")
    settings = tmp_path / lessons.KIT_SETTINGS
    with pytest.raises(lessons.LessonError) as no_default:
        lessons.load_lesson(engine=engine)
    said = str(no_default.value)
    assert "(one, two)" in said and "no default" in said and "--lesson NAME" in said and "LESSON=NAME" in said
    settings.write_text('[project]\nname = "kit"\n[tool.grader]\ndefault_lesson = "two"\n', encoding="utf-8")
    assert lessons.default_lesson(engine) == "two"
    assert lessons.load_lesson(engine=engine).title == "Two"
    assert lessons.load_lesson("one", engine=engine).title == "One", "a name given beats the default"
    settings.write_text('[tool.grader]\ndefault_lesson = "three"\n', encoding="utf-8")
    with pytest.raises(lessons.LessonError, match="default_lesson = 'three' is none of them"):
        lessons.load_lesson(engine=engine)
    (engine / "two" / "lesson.toml").unlink()  # one lesson left: it is the one, whatever the default says
    assert lessons.load_lesson(engine=engine).title == "One"


def test_the_kits_default_lesson_is_a_lesson_of_the_kit():
    assert lessons.default_lesson() in lessons.lesson_names()


def test_the_hidden_tests_adapter_is_the_engines_with_the_lessons_requests(tmp_path):
    from grader.running import calls

    lesson = lessons.load_lesson(A_LESSON)
    adapter = lesson.adapter()
    assert issubclass(adapter, calls.Adapter) and adapter.__module__.startswith(lesson.package + ".")
    _write_lesson(tmp_path, "one", "One")
    assert lessons.load_lesson(engine=tmp_path).adapter() is calls.Adapter  # none declared: calls by hand
    path = tmp_path / "one" / "lesson.toml"
    path.write_text('adapter = "adapter.Adapter"\n' + path.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(lessons.LessonError, match="module:Class"):
        lessons.load_lesson(engine=tmp_path)


def test_a_lesson_without_deliverable_checks_has_none_and_a_declared_one_must_exist(tmp_path):
    _write_lesson(tmp_path, "one", "One")
    lesson = lessons.load_lesson(engine=tmp_path)
    assert lesson.deliverables_module is None and lesson.deliverable_checks() == ()
    path = tmp_path / "one" / "lesson.toml"
    path.write_text(path.read_text(encoding="utf-8") + '[deliverables]\nchecks = "mine"\n', encoding="utf-8")
    with pytest.raises(lessons.LessonError, match="mine"):
        lessons.load_lesson(engine=tmp_path)
    (tmp_path / "one" / "mine.py").write_text("CHECKS = ()\n", encoding="utf-8")
    found = lessons.load_lesson(engine=tmp_path)
    assert found.deliverables_module == f"{found.package}.mine"  # a lesson outside grader/ has its own package


def test_a_checks_module_lying_in_the_folder_is_no_deliverable_until_declared(tmp_path):
    # The toy keeps a deliverable_checks.py for the engine's tests of deliverables, and declares none: it must
    # not ship to its students nor run in their feedback (it did, as "deliverables" rows of 0 points).
    assert (TOY / "deliverable_checks.py").is_file()
    toy = lessons.load_lesson(str(TOY))
    assert toy.deliverables_checks is None and toy.deliverable_checks() == ()
    _write_lesson(tmp_path, "one", "One")
    (tmp_path / "one" / "deliverable_checks.py").write_text("CHECKS = ()\n", encoding="utf-8")
    assert lessons.load_lesson(engine=tmp_path).deliverables_checks is None
    path = tmp_path / "one" / "lesson.toml"
    path.write_text(path.read_text(encoding="utf-8") + '[deliverables]\ncomponent = "deliverables"\n', encoding="utf-8")
    assert lessons.load_lesson(engine=tmp_path).deliverables_checks == tmp_path / "one" / "deliverable_checks.py"


def test_a_declaration_naming_an_undeclared_module_is_refused(tmp_path):
    _write_lesson(tmp_path, "one", "One")
    path = tmp_path / "one" / "lesson.toml"
    path.write_text(path.read_text(encoding="utf-8") + '[sibling_imports]\nthird = ["first", "f"]\n', encoding="utf-8")
    with pytest.raises(lessons.LessonError, match="third"):
        lessons.load_lesson(engine=tmp_path)


def test_stand_ins_offer_contract_names_the_stand_ins_file_defines():
    lesson = lessons.load_lesson(WITH_STANDINS)
    source = (lesson.folder / (lesson.standins_module.rsplit(".", 1)[1] + ".py")).read_text(encoding="utf-8")
    defined = {n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert set(lesson.standin_names) >= {dep for deps in lesson.always_standin.values() for dep in deps}
    for module, names in lesson.standin_names.items():
        assert set(names) <= set(lesson.graded_names[module]), module
        assert set(names.values()) <= defined, module


def test_a_lesson_is_found_by_path_with_paths_relative_to_its_folder(tmp_path, monkeypatch):
    folder = tmp_path / "elsewhere" / A_LESSON  # the same name as a lesson under grader/, elsewhere
    _write_lesson(tmp_path / "elsewhere", A_LESSON, "Elsewhere")
    (folder / "c.md").write_text("contract\n", encoding="utf-8")
    (folder / "s").mkdir()
    (folder / "__init__.py").write_text("", encoding="utf-8")
    (folder / "catalogue.py").write_text("from . import helper\nBUGS = helper.BUGS\n", encoding="utf-8")
    (folder / "helper.py").write_text("BUGS = ('found',)\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert lessons.lesson_option(f"elsewhere/{A_LESSON}") == str(folder.resolve()), "a path is kept absolute"
    lesson = lessons.load_lesson(f"elsewhere/{A_LESSON}")
    assert (lesson.folder, lesson.title, lesson.ref) == (folder.resolve(), "Elsewhere", str(folder.resolve()))
    assert (lesson.contract, lesson.solutions) == (folder.resolve() / "c.md", folder.resolve() / "s")
    assert lesson.assignment == folder.resolve() / "a", "a path found nowhere is the lesson folder's"
    assert not lesson.package.startswith("grader") and lesson.package != lessons.load_lesson(A_LESSON).package
    assert __import__("importlib").import_module(lesson.catalogue_module).BUGS == ("found",)
    assert lessons.load_lesson(A_LESSON).folder == ENGINE / A_LESSON, "a name still means the folder under grader/"


def test_engine_modules_read_the_lesson_when_called_not_at_import():
    """Every engine module imports with the lesson loader switched off (no module reads a lesson at import);
    a stage called without the lesson value stops at once, naming the argument: it never looks one up."""
    import os
    import subprocess
    import sys

    modules = sorted(".".join(p.relative_to(ENGINE).with_suffix("").parts) for p in ENGINE.rglob("*.py")
                     if p.stem != "__main__" and str(p.relative_to(ENGINE)) in CONVERTED
                     and "templates" not in p.relative_to(ENGINE).parts)
    assert len(modules) > 40, "every engine module, in every stage package"
    code = ("import importlib, sys\nimport grader.lesson as lessons\n"
            "def refuse(*args, **kwargs):\n    raise SystemExit('a module read a lesson at import')\n"
            "lessons.load_lesson = lessons._load = refuse\n"
            "for m in sys.argv[1:]:\n    importlib.import_module('grader.' + m)\n")
    done = subprocess.run([sys.executable, "-c", code, *modules], cwd=ENGINE.parent, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    late = subprocess.run([sys.executable, "-c", "import grader.release.student_release as r; r.feedback_points()"],
                          cwd=ENGINE.parent, capture_output=True, text=True, timeout=300)
    assert "TypeError" in late.stderr and "'lesson'" in late.stderr, late.stderr[-2000:]


def test_the_feedback_script_is_written_with_the_lessons_parts():
    from grader.release import student_release as release

    lesson = lessons.load_lesson(str(TOY))
    text = release.ci_feedback_source(lesson=lesson)
    parts = tuple(c for c in lesson.components if c != lesson.deliverables_component)
    assert f"PARTS = ({', '.join(map(repr, parts))})".replace("'", '"') in text
    assert "@@" not in text and lesson.notebook in text
    template = (release.TEMPLATES / "ci_feedback.py").read_text(encoding="utf-8")
    assert lesson.name not in template and not any(f'"{p}"' in template for p in parts), "the template names no lesson"


def test_the_value_parses_each_lesson_file_once_and_a_replaced_value_reads_its_own(tmp_path):
    import dataclasses

    lesson = lessons.load_lesson(A_LESSON)
    assert lesson.rubric() is lesson.rubric() and lesson.limits is lesson.limits
    assert lesson.forbidden_policy is lesson.forbidden_policy and set(POLICY_TABLES) <= set(lesson.forbidden_policy)
    assert lessons.load_lesson(A_LESSON) is not lesson, "each entry point builds its own value: no module cache"
    edited = tmp_path / "rubric.toml"
    edited.write_text(lesson.rubric_path.read_text(encoding="utf-8") + '\n[late]\ngrace_minutes = 5\n'
                      'penalty_per_day = 10\nmax_days = 3\n', encoding="utf-8")
    other = dataclasses.replace(lesson, rubric_path=edited)
    assert other.late_policy.penalty_per_day == 10 and lesson.late_policy is None
    assert other.components == lesson.components and other.rubric() is not lesson.rubric()
    assert lesson.derived("a test's key", lambda: [1]) is lesson.derived("a test's key", lambda: [2])
    assert other.derived("a test's key", lambda: [2]) == [2], "a replaced value derives its own"


def test_a_broken_lesson_file_stops_the_entry_point_naming_the_file(tmp_path):
    _write_lesson(tmp_path, "one", "One")
    (tmp_path / "one" / "limits.toml").write_text("[replies\ncall_bytes = 1\n", encoding="utf-8")
    with pytest.raises(lessons.LessonError, match="limits.toml"):
        lessons.load_lesson(engine=tmp_path)
    (tmp_path / "one" / "limits.toml").unlink()
    (tmp_path / "one" / "rubric.toml").write_text("[first.works\n", encoding="utf-8")
    with pytest.raises(lessons.LessonError, match="rubric.toml"):
        lessons.load_lesson(engine=tmp_path)


def test_what_crosses_to_the_zygote_is_plain_data_without_stand_ins_or_rubric():
    import json

    lesson = lessons.load_lesson(WITH_STANDINS)
    spec = lesson.spec()
    text = json.dumps(spec.to_json())
    assert lessons.LessonSpec.from_json(json.loads(text)) == spec
    assert (spec.modules, spec.always_standin, spec.standin_names) == (lesson.modules, lesson.always_standin,
                                                                       lesson.standin_names)
    standins = (lesson.folder / (lesson.standins_module.rsplit(".", 1)[1] + ".py")).read_text(encoding="utf-8")
    bodies = [line.strip() for line in standins.splitlines() if line.strip().startswith("return ")]
    assert bodies and not any(body in text for body in bodies), "a child holds only the stand-ins a call lends it"
    assert not any(hint in text for hint in lesson.hints.values()), "no rubric words in the zygote"


def test_the_feedback_script_refuses_the_notebook_writes_the_grader_refuses(tmp_path, capsys):
    """A notebook's `%%writefile` of a contract file is skipped in CI as in grading, for every contract module:
    one that no rubric part scores too (the old script refused the parts' files only)."""
    import dataclasses
    import json
    import shutil
    import types

    from grader.intake.submissions import not_written_by_notebooks
    from grader.release import student_release as release

    toy = lessons.load_lesson(str(TOY))
    lesson = dataclasses.replace(toy, graded_names={**toy.graded_names, "helpers": ("helper",)})
    assert "helpers" not in lesson.components
    (tmp_path / "tools").mkdir()
    (tmp_path / "tests" / "_feedback").mkdir(parents=True)
    shutil.copy(ENGINE / "intake" / "magics.py", tmp_path / "tests" / "_feedback" / "magics.py")
    script = tmp_path / "tools" / "ci_feedback.py"
    script.write_text(release.ci_feedback_source(lesson=lesson), encoding="utf-8")
    feedback = types.ModuleType("ci_feedback_under_test")
    feedback.__file__ = str(script)
    exec(compile(script.read_text(encoding="utf-8"), str(script), "exec"), feedback.__dict__)  # noqa: S102
    assert feedback.NOT_WRITTEN == not_written_by_notebooks(lesson)
    cells = ["%%writefile helpers.py\nhelper = 'from the notebook'", "%%writefile mine.py\nMINE = 1",
             "import mine\nimport helpers"]
    notebook = tmp_path / lesson.notebook
    notebook.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": c} for c in cells],
                                    "metadata": {}, "nbformat": 4, "nbformat_minor": 5}), encoding="utf-8")
    results = feedback.run_notebook_tests(notebook)
    message = next(iter(results.values()))["message"]
    assert "No module named 'helpers'" in message and "mine" not in message, message
    assert "`%%writefile helpers.py` was not run" in capsys.readouterr().out

"""grader/__main__.py: the command line builds the lesson value once and hands it to every command's stage
as `lesson=`; a lesson that cannot be found ends the command with a message saying which lessons there are
and how to choose one, never a traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grader import __main__ as cli
from grader import lesson as lessons

KIT = Path(__file__).resolve().parents[2]
TOY = KIT / "tests" / "fixtures" / "lessons" / "toy"
# The fewest arguments each command parses with (none of them is run: the stage call is recorded).
ARGUMENTS = {"grade": ["subs", "--out", "o"], "merge": ["a", "--out", "o"], "review": ["o"], "check": ["s"],
             "collect": ["roster.txt", "--out", "o"], "similarity": ["subs", "--out", "o"],
             "export": ["o", "--format", "csv"]}


def _planned(*args: str) -> str:
    """What `make -n` would run, as the top-level make prints it: under `make test` the child make would
    otherwise count itself a sub-make and wrap its plan in "Entering/Leaving directory" lines."""
    return subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=KIT, capture_output=True, text=True,
                          check=True).stdout


def _commands() -> dict:
    return cli.build_parser()._subparsers._group_actions[0].choices


def test_every_command_takes_lesson_and_hands_its_stage_the_value(monkeypatch):
    called = []
    monkeypatch.setattr(cli, "_call", lambda module, function, *, lesson, **kwargs: called.append(
        (module, function, lesson)) or 0)
    for command in _commands():
        called.clear()
        assert cli.main([command, *ARGUMENTS.get(command, []), "--lesson", str(TOY)]) == 0, command
        assert called, f"{command} called no stage"
        for module, function, lesson in called:
            assert isinstance(lesson, lessons.Lesson) and lesson.folder == TOY, (command, module, lesson)


def test_a_command_on_an_output_folder_takes_the_lesson_it_was_graded_for(tmp_path, monkeypatch):
    called = {}
    monkeypatch.setattr(cli, "_call", lambda module, function, *, lesson, **kwargs: called.update(
        {module: lesson.folder.resolve()}) or 0)
    (tmp_path / lessons.OUT_LESSON_FILE).write_text(f"{TOY.resolve()}\n", encoding="utf-8")
    for command in (["export", str(tmp_path), "--format", "csv"], ["review", str(tmp_path)]):
        assert cli.main(command) == 0, command
    assert called == {"admin.export": TOY.resolve(), "admin.review": TOY.resolve()}
    # Not grade: a class graded into the wrong folder would be graded as that folder's lesson (grade stops instead).
    assert cli.main(["grade", str(tmp_path / "class"), "--out", str(tmp_path)]) == 0
    assert called["running.grade"] != TOY.resolve()


def test_an_unknown_lesson_stops_the_command_with_what_to_do_and_no_traceback(capsys):
    assert cli.main(["stubs", "--check", "--lesson", "no-such-lesson"]) == 2
    said = capsys.readouterr().err
    assert "no lesson 'no-such-lesson'" in said and "there are: " in said and "Traceback" not in said
    done = subprocess.run([sys.executable, "-m", "grader", "release", "--out", "nowhere", "--lesson", "no-such-lesson"],
                          cwd=KIT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no lesson 'no-such-lesson'" in done.stderr and "Traceback" not in done.stderr
    assert not (KIT / "nowhere").exists()


@pytest.mark.parametrize("command", ["grade", "review", "release", "gradescope", "stubs", "bench", "killrate"])
def test_every_instructor_target_of_the_makefile_passes_lesson(command):
    plain = _planned(command)
    chosen = _planned(command, "LESSON=elsewhere/toy")
    assert "--lesson" not in plain, "without LESSON= the command chooses (the only lesson, or the kit's default)"
    assert "--lesson elsewhere/toy" in chosen.splitlines()[-1], chosen


def test_make_grade_seed_pins_the_runs_seed():
    assert "--seed" not in _planned("grade").splitlines()[-1]  # unset: OUT's seed, or a new one
    for seed in ("0", "8675309"):
        assert f" --seed {seed} " in _planned("grade", f"SEED={seed}").splitlines()[-1]


def test_make_grade_with_a_lesson_grades_its_demo_class_into_its_own_out():
    for name in lessons.lesson_names():
        lesson = lessons.load_lesson(name)
        planned = _planned("grade", f"LESSON={name}").splitlines()[-1]
        demo = lesson.demo_class.relative_to(KIT).as_posix() if lesson.demo_class else ""
        assert f"grade {demo} --out out/{name} " in planned and planned.endswith(f"--lesson {name}"), planned
    toy = subprocess.run(["make", "grade", f"LESSON={TOY.relative_to(KIT)}"], cwd=KIT, capture_output=True, text=True)
    assert toy.returncode == 2 and "declares no demo class" in toy.stderr and "SUBMISSIONS=" in toy.stderr


def test_make_grade_passes_the_roster_beside_a_lessons_demo_class_and_none_for_another_class():
    """`make grade LESSON=x` grades x's demo class with the roster.csv of the folder holding it (its students'
    names in grades.csv); ROSTER= overrides it; a class of one's own gets no roster it did not ask for."""
    with_roster = 0
    for name in lessons.lesson_names():
        lesson = lessons.load_lesson(name)
        if lesson.demo_class is None:
            continue
        beside = lesson.demo_class.parent / "roster.csv"
        planned = _planned("grade", f"LESSON={name}").splitlines()[-1]
        if beside.is_file():
            with_roster += 1
            assert f" --roster {beside.relative_to(KIT).as_posix()} " in planned, planned
        else:
            assert "--roster" not in planned, planned
        assert " --roster mine.csv " in _planned("grade", f"LESSON={name}", "ROSTER=mine.csv").splitlines()[-1]
        assert "--roster" not in _planned("grade", f"LESSON={name}", "SUBMISSIONS=elsewhere").splitlines()[-1]
    assert with_roster, "no lesson's demo class has a roster beside it: nothing was checked"


def test_a_stage_gets_the_value_itself_and_no_variable_names_the_lesson(monkeypatch):
    """The command's stage is handed the value; nothing in the environment names the lesson during the call
    (a stage that looked one up there would grade whatever lesson the variable named). Every stage takes
    `lesson=`, so one without it is an error, not a stage called without the lesson."""
    import types

    toy = lessons.load_lesson(str(TOY))
    before = dict(__import__("os").environ)
    got = {}

    def stage(*, out, lesson):
        got.update(out=out, lesson=lesson, environ=dict(__import__("os").environ))
        return 0

    module = types.ModuleType("grader.a_stage")
    module.main, module.unlessoned = stage, lambda *, out: 0
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert cli._call("a_stage", "main", lesson=toy, out="o") == 0
    assert got["lesson"] is toy and got["out"] == "o"
    assert got["environ"] == before, "the command line set a variable for its stage"
    assert not [name for name in got["environ"] if "LESSON" in name.upper()]
    with pytest.raises(TypeError, match="lesson"):
        cli._call("a_stage", "unlessoned", lesson=toy, out="o")

"""grader/admin/regrade.py: a rerun regrades exactly what changed, rescores a change of rubric points or
words from the records, and --force / --only / make FORCE=1 ONLY=... choose by hand."""
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import KIT, TOY, kept_zygotes, make_submission, shared_config  # noqa: E402

from grader.admin import regrade
from grader.lesson import load_lesson

from grader.running import grade as run  # noqa: E402
from grader.results.records import SubmissionResult
from grader.results.records import TestResult as Outcome  # noqa: E402

LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage: the toy's

CONFIG = shared_config(call_timeout=3.0)


def record(out: Path, name: str) -> dict:
    return json.loads((out / name / "record.json").read_text())


def grades(out: Path) -> dict[str, list[str]]:
    lines = (out / "grades.csv").read_text().splitlines()
    header = lines[0].split(",")
    return {line.split(",")[0]: dict(zip(header, line.split(","))) for line in lines[1:]}


@pytest.fixture(scope="module")
def graded():
    root = Path(tempfile.mkdtemp(prefix="toy-regrade-"))
    subs = root / "subs"
    make_submission(subs / "alice", solutions=LESSON.solutions)
    # A softmax twice too large: a wrong number no catalogue bug names, so its feedback carries the
    # rubric's hint (a crash's does not).
    doubled = (LESSON.solutions / "activations.py").read_text().replace("    return exps / exps.sum(",
                                                                        "    return 2 * exps / exps.sum(")
    make_submission(subs / "bob", {"activations.py": doubled}, solutions=LESSON.solutions)
    out = root / "out"
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    yield root, subs, out
    shutil.rmtree(root, ignore_errors=True)


def _no_sandbox(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("no student code may run for this rerun")

    monkeypatch.setattr(run, "Zygote", refuse)


def test_a_record_keeps_the_digests_of_its_submission_and_inputs(graded):
    _, subs, out = graded
    digests = record(out, "alice")["digests"]
    assert digests == {"submission": regrade.submission_digest(subs / "alice"), **regrade.current(lesson=LESSON)}
    assert record(out, "bob")["digests"]["submission"] != digests["submission"]


def test_a_rerun_with_nothing_changed_runs_nothing(graded, monkeypatch, capsys):
    _, subs, out = graded
    _no_sandbox(monkeypatch)
    before = {n: (out / n / "record.json").stat().st_mtime_ns for n in ("alice", "bob")}
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    assert "2 already graded and unchanged; 0 to grade" in capsys.readouterr().out
    assert before == {n: (out / n / "record.json").stat().st_mtime_ns for n in ("alice", "bob")}


def test_a_changed_submission_is_regraded_and_named_and_nothing_else(graded, capsys):
    root, subs, out = graded
    work = root / "subs2"
    shutil.copytree(subs, work)
    (work / "bob" / "activations.py").write_text((LESSON.solutions / "activations.py").read_text())
    alice_before = (out / "alice" / "record.json").stat().st_mtime_ns
    copy = root / "out2"
    shutil.copytree(out, copy)
    # Decisions made on the version bob handed in first: one row with its version, one written by hand without.
    version = record(out, "bob")["digests"]["submission"][:12]
    (copy / "overrides.csv").write_text("submission,test,points,comment,by,at,version\n"
                                        f"bob,classifier,1,,ta,,{version}\n"
                                        "bob,*,2,for the write-up,ta,,\n"
                                        f"alice,*,1,,ta,,{record(out, 'alice')['digests']['submission'][:12]}\n")
    assert run.main(submissions=work, out=copy, jobs=1, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    printed = capsys.readouterr().out
    assert "1 already graded and unchanged; 1 to grade" in printed
    assert "regrade 1 (the submission changed): bob" in printed
    assert "graded 1/1 bob" in printed and "alice:" not in printed
    assert (copy / "alice" / "record.json").stat().st_mtime_ns == alice_before
    assert float(grades(copy)["bob"]["activations"]) == 6 > float(grades(out)["bob"]["activations"])
    told = [line for line in printed.splitlines() if "earlier version" in line]
    assert len(told) == 1 and "bob classifier, bob *" in told[0] and "alice" not in told[0], printed
    assert "review" in told[0]  # what to do next
    assert "classifier 4->1 (made for an earlier version; set aside" in grades(copy)["bob"]["overrides"]
    # Said again on every run while the rows stand: the hand-written one too, which the first run stamped with the
    # version graded when it was written (held-out s61: it was said once, then never again).
    assert run.main(submissions=work, out=copy, jobs=1, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    again = [line for line in capsys.readouterr().out.splitlines() if "earlier version" in line]
    assert len(again) == 1 and "bob classifier, bob *" in again[0], again
    assert "* +2 (capped to +0) (made for an earlier version)" in grades(copy)["bob"]["overrides"], grades(copy)["bob"]


def test_a_change_of_points_and_hints_rescores_from_the_records(graded, tmp_path, monkeypatch, capsys):
    _, subs, out = graded
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    rubric = regrade.rubric_path(lesson=LESSON).read_text()
    bob_hint = record(out, "bob")["tests"]
    failed = next(t for t in bob_hint if t["status"] == "failed" and t["component"] == "activations")
    section = failed["name"].split(".")[1]
    import tomllib

    entry = tomllib.loads(rubric)["activations"][section]
    old_points = f"[activations.{section}]\npoints = {entry['points']}\n"
    assert old_points in rubric
    changed = rubric.replace(old_points, f"[activations.{section}]\npoints = {entry['points'] + 5}\n")
    changed = changed.replace(entry["hint"], "A brand new hint for the table.")
    edited = tmp_path / "rubric.toml"
    edited.write_text(changed)
    lesson = dataclasses.replace(LESSON, rubric_path=edited)  # the instructor's edited rubric
    regrade.current.cache_clear()
    try:
        _no_sandbox(monkeypatch)
        assert run.main(submissions=subs, out=copy, jobs=2, config=CONFIG, lesson=lesson, zygotes=kept_zygotes()) == 0
        printed = capsys.readouterr().out
        assert "rescore 2 from their records (rubric points, words or policy changed): alice, bob" in printed
        assert "0 to grade" in printed
        bob = record(copy, "bob")
        test = next(t for t in bob["tests"] if t["name"] == failed["name"])
        assert test["max_score"] == entry["points"] + 5 and test["score"] == 0
        assert test["output"] == failed["output"]  # the words are not in the record: no text is edited
        assert "A brand new hint for the table." in (copy / "bob" / "results.json").read_text()
        assert bob["max_total"] == record(out, "bob")["max_total"] + 5
        assert record(copy, "alice")["total"] == record(out, "alice")["total"] + 5  # alice passed it
        assert bob["digests"]["rubric"] == regrade.current(lesson=lesson)["rubric"] != record(out, "bob")["digests"]["rubric"]
        assert bob["digests"]["inputs"] == record(out, "bob")["digests"]["inputs"]
        assert "A brand new hint for the table." in (copy / "bob" / "feedback.md").read_text()
        assert float(grades(copy)["bob"]["max_total"]) == float(grades(out)["bob"]["max_total"]) + 5
    finally:
        regrade.current.cache_clear()


def test_a_change_of_rubric_structure_regrades(graded, tmp_path, monkeypatch):
    _, subs, out = graded
    rubric = regrade.rubric_path(lesson=LESSON).read_text() + "\n[classifier.extra]\npoints = 1\ntitle = \"new\"\n"
    edited = tmp_path / "rubric.toml"
    edited.write_text(rubric)
    regrade.current.cache_clear()
    try:
        plan = regrade.plan(run.intake.discover(subs), out, lesson=dataclasses.replace(LESSON, rubric_path=edited))
        assert sorted(s.name for s in plan.grade) == ["alice", "bob"] and not plan.rescore
        assert list(plan.reasons) == ["the grading code, tests, reference or rubric structure changed"]
    finally:
        regrade.current.cache_clear()


def test_force_and_only(graded, tmp_path, capsys):
    _, subs, out = graded
    found = run.intake.discover(subs)
    assert [s.name for s in regrade.plan(found, out, force=True, lesson=LESSON).grade] == ["alice", "bob"]
    only = regrade.plan(found, out, only={"bob"}, lesson=LESSON)
    assert [s.name for s in only.grade] == ["bob"] and only.unchanged == ["alice"]
    assert run.main(submissions=subs, out=tmp_path / "o", only=["bob", "zed"], config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 2
    assert "--only names no submission: zed" in capsys.readouterr().err
    # The others are not looked at, so none is said to be unchanged (held-out s61: a changed one was).
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    assert run.main(submissions=subs, out=copy, only=["bob"], jobs=1, config=CONFIG, lesson=LESSON,
                    zygotes=kept_zygotes()) == 0
    printed = capsys.readouterr().out
    assert "1 not named with --only, left as they are" in printed and "unchanged" not in printed, printed


def test_make_passes_force_and_only_on():
    done = subprocess.run(["make", "--no-print-directory", "-n", "grade", "FORCE=1", "ONLY=alice bob"], cwd=KIT, capture_output=True,
                          text=True, check=True)
    line = next(l for l in done.stdout.splitlines() if "-m grader grade" in l)
    words = line.split()
    assert words[words.index("--force"):words.index("--force") + 4] == ["--force", "--only", "alice", "bob"]
    plain = subprocess.run(["make", "--no-print-directory", "-n", "grade"], cwd=KIT, capture_output=True, text=True, check=True).stdout
    assert "--force" not in plain and "--only" not in plain


def test_rescore_keeps_verdicts_and_refuses_a_structure_change():
    result = SubmissionResult(submission="x", tests=[
        Outcome(name="a.one", component="activations", score=2, max_score=2, status="passed"),
        Outcome(name="a.two", component="activations", score=0, max_score=3, status="failed",
                output="got 1", advice="numbers")])
    old = {"a": {"one": {"points": 2}, "two": {"points": 3, "hint": "old words", "section": "§3"}}}
    new = {"a": {"one": {"points": 4}, "two": {"points": 1, "hint": "new words", "section": "§4"}}}
    assert regrade.rescore(result, old, new)
    assert [(t.score, t.max_score) for t in result.tests] == [(4, 4), (0, 1)]
    assert result.tests[1].output == "got 1"  # its words are chosen from the rubric when the files are written
    assert not regrade.rescore(result, old, {"a": {"one": {"points": 1}}})


def test_submission_digest_follows_content_not_time(tmp_path):
    folder = make_submission(tmp_path / "s", reference=False, files={"a.py": "x = 1\n"})
    first = regrade.submission_digest(folder)
    (folder / "a.py").write_text("x = 1\n")
    assert regrade.submission_digest(folder) == first
    (folder / "a.py").write_text("x = 2\n")
    assert regrade.submission_digest(folder) != first
    (folder / "a.py").write_text("x = 1\n")
    (folder / "b.py").write_text("")
    assert regrade.submission_digest(folder) != first


def test_a_rubric_change_an_override_no_longer_fits_stops_before_any_record_changes(graded, tmp_path, monkeypatch,
                                                                                    capsys):
    """The overrides are checked against the points the rubric now gives: a refused run rescores nothing, so putting
    the rubric back grades as before (a run that rescored first left every later run refused)."""
    _, subs, out = graded
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    (copy / "overrides.csv").write_text("submission,test,points,comment,by,at\nalice,activations,6,,ta,\n")
    rubric = regrade.rubric_path(lesson=LESSON).read_text()
    import tomllib

    parsed = tomllib.loads(rubric)["activations"]
    section, entry = next((k, v) for k, v in parsed.items() if isinstance(v, dict) and v.get("points", 0) >= 2)
    old = f"[activations.{section}]\npoints = {entry['points']}\n"
    assert old in rubric
    edited = tmp_path / "rubric.toml"
    edited.write_text(rubric.replace(old, f"[activations.{section}]\npoints = {entry['points'] - 1}\n"))
    lesson = dataclasses.replace(LESSON, rubric_path=edited)
    before = {n: (copy / n / "record.json").read_bytes() for n in ("alice", "bob")}
    regrade.current.cache_clear()
    try:
        _no_sandbox(monkeypatch)
        assert run.main(submissions=subs, out=copy, jobs=2, config=CONFIG, lesson=lesson, zygotes=kept_zygotes()) == 2
        err = capsys.readouterr().err
        assert "overrides.csv:2" in err and "outside 0..5" in err, err
        assert before == {n: (copy / n / "record.json").read_bytes() for n in ("alice", "bob")}
        regrade.current.cache_clear()
        assert run.main(submissions=subs, out=copy, jobs=2, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    finally:
        regrade.current.cache_clear()

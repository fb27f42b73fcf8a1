"""grader/admin/merge.py: the --out folders of several shards joined into one gradebook."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grader.results import classreport

from grader.results import feedback
from grader.admin.merge import merge

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from report_records import CLASS, LESSON, class_files, grade_class, make_record  # noqa: E402


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_class(tmp_path_factory.mktemp("out"))


def test_merge_of_two_shards_equals_one_full_run(graded, tmp_path, capsys):
    shard1, shard2 = tmp_path / "s1", tmp_path / "s2"
    for i, r in enumerate(CLASS):
        feedback.write_submission(shard1 if i % 2 else shard2, r, lesson=LESSON)
    classreport.write_class(shard1, lesson=LESSON)  # shards also write their own class files: merge must not copy them
    assert merge(shards=[str(shard1), str(shard2)], out=str(tmp_path / "all"), lesson=LESSON) == 0
    merged = tmp_path / "all"
    assert class_files(merged) == class_files(graded)
    for r in CLASS:
        for name in ("results.json", "feedback.md", "record.json"):
            assert (merged / r.submission / name).read_bytes() == (graded / r.submission / name).read_bytes()
    assert "5 submissions from 2 shards" in capsys.readouterr().out


def test_merge_refuses_a_submission_graded_differently_in_two_shards(tmp_path, capsys):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    feedback.write_submission(a, make_record("nia"), lesson=LESSON)
    feedback.write_submission(b, make_record("nia", buggy=True), lesson=LESSON)
    assert merge(shards=[str(a), str(b)], out=str(out), lesson=LESSON) == 1
    assert "nia" in capsys.readouterr().err
    assert not out.exists()


def test_merge_keeps_an_identical_duplicate_once_and_says_so(tmp_path, capsys):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    feedback.write_submission(a, make_record("oli", execution_time=1.0), lesson=LESSON)
    feedback.write_submission(b, make_record("oli", execution_time=2.0), lesson=LESSON)
    assert merge(shards=[str(a), str(b)], out=str(out), lesson=LESSON) == 0
    assert "duplicate kept once: oli" in capsys.readouterr().err
    assert (out / "grades.csv").read_text().count("\noli,") == 1


def test_merge_reports_ungraded_folders_and_missing_shards(tmp_path, capsys):
    a, out = tmp_path / "a", tmp_path / "out"
    feedback.write_submission(a, make_record("pat"), lesson=LESSON)
    (a / "quin").mkdir()  # killed before its record.json was written
    assert merge(shards=[str(a)], out=str(out), lesson=LESSON) == 1
    err = capsys.readouterr().err
    assert "quin" in err and "Re-run" in err
    assert (out / "pat" / "record.json").is_file()
    assert merge(shards=[str(tmp_path / "nope")], out=str(out), lesson=LESSON) == 2
    assert "does not exist" in capsys.readouterr().err


def test_merge_is_wired_to_the_command_line(tmp_path):
    from grader.__main__ import main

    a, out = tmp_path / "a", tmp_path / "out"
    feedback.write_submission(a, make_record("ray"), lesson=LESSON)
    assert main(["merge", str(a), "--out", str(out), "--lesson", LESSON.ref]) == 0
    assert (out / "grades.csv").read_text().splitlines()[1].startswith("ray,10,10,")


def test_merge_into_one_of_the_shards(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    feedback.write_submission(a, make_record("tia"), lesson=LESSON)
    feedback.write_submission(b, make_record("uma", buggy=True), lesson=LESSON)
    assert merge(shards=[str(a), str(b)], out=str(a), lesson=LESSON) == 0
    rows = (a / "grades.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["tia", "uma"]
    assert (b / "uma" / "record.json").is_file()  # the other shard is copied, not moved



def test_merge_and_the_report_say_loudly_when_a_shard_had_fewer_layers(tmp_path, capsys):
    # A shard graded as the runner's own user (no namespaces, no uid drop) beside shards graded as root.
    full, weak, out = tmp_path / "root", tmp_path / "user", tmp_path / "out"
    feedback.write_submission(full, make_record("ama"), lesson=LESSON)
    unconfined = make_record("obi")
    unconfined.isolation = {"landlock": 7, "rlimits": True, "seccomp": True, "netns": False, "pidns": False}
    feedback.write_submission(weak, unconfined, lesson=LESSON)
    assert merge(shards=[str(full), str(weak)], out=str(out), lesson=LESSON) == 0
    err = capsys.readouterr().err
    assert "WARNING" in err and "without the `netns` layer" in err and "without the `pidns` layer" in err
    assert "fewer sandbox layers" in err and "netns, pidns, uid" in err and "obi" in err and "ama" not in err
    for page in ("summary.md", "report.html"):
        text = (out / page).read_text()
        assert "Sandbox layers missing in this run" in text and "obi" in text.split("missing in this run")[1][:600]


def test_no_layer_warning_when_every_shard_had_every_layer(tmp_path, capsys):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    feedback.write_submission(a, make_record("ama"), lesson=LESSON)
    feedback.write_submission(b, make_record("obi"), lesson=LESSON)
    assert merge(shards=[str(a), str(b)], out=str(out), lesson=LESSON) == 0
    assert "WARNING" not in capsys.readouterr().err
    assert "Sandbox layers missing" not in (out / "summary.md").read_text()


def test_merge_keeps_the_roster_and_the_lesson_the_shards_were_graded_with(tmp_path, capsys):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    roster = "identifier,submission\nnia@x,nia\nrex@x,rex\nsol@x,rex\n"
    for shard, name in ((a, "nia"), (b, "rex")):
        feedback.write_submission(shard, make_record(name), lesson=LESSON)
        (shard / "roster.csv").write_text(roster, encoding="utf-8")
        (shard / "_lesson").write_text("a_lesson\n", encoding="utf-8")
    assert merge(shards=[str(a), str(b)], out=str(out), lesson=LESSON) == 0
    assert (out / "roster.csv").read_text(encoding="utf-8") == roster
    assert (out / "_lesson").read_text(encoding="utf-8") == "a_lesson\n"
    students = [line.split(",")[1] for line in (out / "grades.csv").read_text().splitlines()[1:]]
    assert sorted(students) == ["nia@x", "rex@x", "sol@x"]  # a row per student, as each shard's gradebook has
    (b / "roster.csv").write_text(roster + "tam@x,tam\n", encoding="utf-8")
    assert merge(shards=[str(a), str(b)], out=str(tmp_path / "other"), lesson=LESSON) == 2
    assert "the shards hold different roster.csv files" in capsys.readouterr().err

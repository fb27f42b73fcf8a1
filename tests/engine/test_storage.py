"""grader/results/storage.py: records on disk, atomic writes, names that cannot leave OUT."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from grader.results import classreport

from grader.results import feedback

from grader.results import storage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from report_records import CLASS, EXPECTED_W, LESSON, grade_class, make_record  # noqa: E402


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_class(tmp_path_factory.mktemp("out"))


def test_same_record_gives_byte_identical_files_except_timing(tmp_path):
    first, second, slower = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    feedback.write_submission(first, make_record("eve", buggy=True, execution_time=0.5), lesson=LESSON)
    feedback.write_submission(second, make_record("eve", buggy=True, execution_time=0.5), lesson=LESSON)
    feedback.write_submission(slower, make_record("eve", buggy=True, execution_time=7.25), lesson=LESSON)
    for name in ("results.json", "feedback.md", "record.json"):
        assert (first / "eve" / name).read_bytes() == (second / "eve" / name).read_bytes()
    assert (first / "eve" / "feedback.md").read_bytes() == (slower / "eve" / "feedback.md").read_bytes()
    for name in ("results.json", "record.json"):
        a = json.loads((first / "eve" / name).read_text())
        c = json.loads((slower / "eve" / name).read_text())
        assert a.pop("execution_time") != c.pop("execution_time")
        assert a == c


def test_record_json_round_trips_to_the_same_record(graded):
    for r in CLASS:
        back = storage.record_from_json(json.loads((graded / r.submission / "record.json").read_text()))
        assert back == r


def test_unsafe_submission_names_are_refused(tmp_path):
    for name in ("../escape", "a/b", ".hidden", "", "_plots", "grades.csv"):
        with pytest.raises(ValueError, match="cannot be used as a folder"):
            feedback.write_submission(tmp_path, make_record(name), lesson=LESSON)
    assert list(tmp_path.iterdir()) == []


def test_nan_in_student_evidence_still_gives_valid_json(tmp_path):
    record = make_record("nan", buggy=True,
                         evidence={"test": "part.worked_example",
                                   "expected": EXPECTED_W, "got": [[float("nan")] * 3] * 3})
    feedback.write_submission(tmp_path, record, lesson=LESSON)
    data = json.loads((tmp_path / "nan" / "record.json").read_text())
    assert data["evidence"]["got"][0][0] == "nan"


def test_a_crash_before_replace_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    feedback.write_submission(tmp_path, make_record("fay"), lesson=LESSON)
    before = {p.name: p.read_bytes() for p in (tmp_path / "fay").iterdir()}

    def crash(src, dst):
        raise KeyboardInterrupt("killed between the temp write and the rename")

    monkeypatch.setattr(storage.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        feedback.write_submission(tmp_path, make_record("fay", buggy=True), lesson=LESSON)
    after = {p.name: p.read_bytes() for p in (tmp_path / "fay").iterdir()}
    assert after == before  # old content intact, no temp file left


def test_a_crash_during_the_first_write_leaves_no_record_so_resume_regrades(tmp_path, monkeypatch):
    real_replace, calls = storage.os.replace, []

    def crash_on_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(storage.os, "replace", crash_on_second)
    with pytest.raises(OSError):
        feedback.write_submission(tmp_path, make_record("gil"), lesson=LESSON)
    files = sorted(p.name for p in (tmp_path / "gil").iterdir())
    assert files == ["results.json"]  # record.json, the "complete" marker, is written last


def test_temp_files_left_by_kill_9_are_ignored(tmp_path):
    feedback.write_submission(tmp_path, make_record("hal"), lesson=LESSON)
    (tmp_path / "hal" / ".record.json.x1.tmp").write_text('{"submission": "hal", "tes')
    stray = tmp_path / ".ivy.abc"  # a half-copied folder from an interrupted merge
    stray.mkdir()
    (stray / "record.json").write_text(json.dumps(storage.record_to_json(make_record("ivy"))))
    records, problems = storage.load_records(tmp_path)
    assert [r.submission for r in records] == ["hal"] and problems == []


def test_an_unreadable_record_is_reported_not_silently_dropped(tmp_path):
    feedback.write_submission(tmp_path, make_record("jay"), lesson=LESSON)
    (tmp_path / "kim").mkdir()
    (tmp_path / "kim" / "record.json").write_text("{not json")
    classreport.write_class(tmp_path, lesson=LESSON)
    assert "kim: record.json unreadable" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "grades.csv").read_text().count("\n") == 2


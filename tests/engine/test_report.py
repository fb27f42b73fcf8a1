"""grader/report.py: the files a grading run leaves behind, built from records made here.

No sandbox and no scoring: every SubmissionResult is constructed in the test, so these
tests pin the output formats, determinism, atomicity, escaping and `merge` on their own.
"""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from grader import report
from grader import records
from grader.records import COMPONENTS, SubmissionResult

EXPECTED_W = [[0.4, 0.2, 0.4], [0.2, 0.4, 0.4], [0.25, 0.25, 0.5]]  # handout §4
UNSCALED_W = [[0.4223, 0.1554, 0.4223], [0.1554, 0.4223, 0.4223], [0.1554, 0.1554, 0.6892]]
HINT = "The scores were not divided by √d_k (handout §3, step 2)."


def _test(name, score, max_score, output="", hint_id=None, title=""):
    return records.TestResult(name=name, component=name.split(".")[0], score=score, max_score=max_score,
                      status="passed" if score == max_score else "failed", output=output,
                      hint_id=hint_id, title=title or name)


def make_record(name, *, buggy=False, status="ok", notes=(), execution_time=0.5, evidence=None, source=None):
    """A plausible record: the full rubric shape, with an unscaled-attention bug when `buggy`."""
    sdpa_out = ""
    if buggy:
        sdpa_out = (f"weights on the handout §4 example\nexpected: {EXPECTED_W}\ngot:      {UNSCALED_W}\n"
                    f"max abs error 0.1892 at [2, 2]\nHint: {HINT}")
    tests = [
        _test("self_attention.sdpa_worked_example", 0 if buggy else 10, 10, sdpa_out,
              "missing_sqrt_dk" if buggy else None, "softmax(QKᵀ/√d_k)V on the handout example"),
        _test("self_attention.causal_mask", 5, 5),
        _test("self_attention.module", 0 if buggy else 15, 15, "same bug as above" if buggy else "",
              "missing_sqrt_dk" if buggy else None),
        _test("multihead.forward", 25, 25),
        _test("positional.table", 15, 15),
        _test("block.post_ln", 12.5, 12.5),
        _test("block.pre_ln", 7.5, 7.5),
        _test("deliverables.readme", 4, 4),
        _test("deliverables.heatmap_png", 0 if buggy else 6, 6, "attention_heatmap.png is blank" if buggy else ""),
    ]
    source = f"{name}/" if source is None else source
    if evidence is None and buggy:
        evidence = {"test": "self_attention.sdpa_worked_example", "expected": EXPECTED_W, "got": UNSCALED_W}
    return SubmissionResult(submission=name, tests=tests, status=status, notes=list(notes), source=source,
                            isolation={"netns": True, "uid": True}, execution_time=execution_time,
                            evidence=evidence or {})


CLASS = [
    make_record("zoe", source="zoe.zip"),
    make_record("Adam", buggy=True),
    make_record("bob_timeout", status="timeout", notes=["multihead.py: forward ran past the 2 s limit"]),
    make_record("carol", buggy=True, evidence={"x": "not a matrix", "y": [[1, 2], [3]]}),
    make_record("dan"),
]


def _class_files(out: Path) -> dict[str, bytes]:
    names = ["grades.csv", "summary.md", "report.html"]
    names += sorted(str(p.relative_to(out)) for p in (out / report.PLOTS).glob("*.png"))
    return {n: (out / n).read_bytes() for n in names}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    for r in CLASS:
        report.write_submission(out, r)
    report.write_class(out)
    return out


# ---------------------------------------------------------------- grades.csv


def test_grades_csv_has_the_agreed_columns_one_row_each_sorted_by_name(graded):
    with open(graded / "grades.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["submission", "total", "max_total", "self_attention", "multihead",
                       "positional", "block", "deliverables", "status", "source", "overrides", "late_days", "penalty"]
    assert [r[0] for r in rows[1:]] == sorted(r.submission for r in CLASS)
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["Adam"] == ["Adam", "69", "100", "5", "25", "15", "20", "4", "ok", "Adam/", "", "", ""]
    assert by_name["zoe"] == ["zoe", "100", "100", "30", "25", "15", "20", "10", "ok", "zoe.zip", "", "", ""]
    assert by_name["bob_timeout"][rows[0].index("status")] == "timeout"
    # Component columns always add up to the total.
    for row in rows[1:]:
        assert sum(float(x) for x in row[3:8]) == pytest.approx(float(row[1]))


def test_grades_csv_defuses_spreadsheet_formulas_in_names():
    text = report.grades_csv([make_record("=HYPERLINK(1)", source="@SUM(1).zip")])
    assert "\n'=HYPERLINK(1)," in text and text.endswith(",ok,'@SUM(1).zip,,,\n")


def test_rows_not_named_as_submitted_are_listed_in_the_class_report(tmp_path):
    records = [make_record("ann_lee"), make_record("Ann_Lee-4871ff", source="Ann Lee.zip"),
               make_record("x", source="<i>x|y</i>.ipynb")]
    for r in records:
        report.write_submission(tmp_path, r)
    report.write_class(tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    html = (tmp_path / "report.html").read_text()
    assert "| Ann_Lee-4871ff | Ann Lee.zip |" in summary and "\\<i>x\\|y\\</i>.ipynb" in summary
    assert "<td>Ann_Lee-4871ff</td><td><code>Ann Lee.zip</code></td>" in html and "&lt;i&gt;x|y" in html
    # A row that kept its name but was flagged by intake (a collision) is listed too, with the reason.
    flagged = make_record("bo", notes=["row name bo: 'bo/' and 1 other submission would all be named bo"])
    stats = report.class_stats([flagged], {})
    assert stats["renamed"] == [("bo", "bo/", flagged.notes[0])]
    assert "| ann_lee |" not in summary and "<td>ann_lee</td><td><code>" not in html


# ---------------------------------------------------------------- results.json


def test_results_json_has_the_gradescope_fields(graded):
    data = json.loads((graded / "Adam" / "results.json").read_text())
    assert data["score"] == 69
    assert isinstance(data["execution_time"], (int, float))
    assert data["output"].startswith("Score 69/100")
    assert len(data["tests"]) == 9
    for t in data["tests"]:
        assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(t)
        assert t["status"] in ("passed", "failed")
        assert t["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
    assert sum(t["score"] for t in data["tests"]) == pytest.approx(data["score"])
    failed = [t for t in data["tests"] if t["status"] == "failed"]
    assert [t["score"] for t in failed] == [0, 0, 0]
    assert "max abs error" in failed[0]["output"]


def test_same_record_gives_byte_identical_files_except_timing(tmp_path):
    first, second, slower = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    report.write_submission(first, make_record("eve", buggy=True, execution_time=0.5))
    report.write_submission(second, make_record("eve", buggy=True, execution_time=0.5))
    report.write_submission(slower, make_record("eve", buggy=True, execution_time=7.25))
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
        back = report.record_from_json(json.loads((graded / r.submission / "record.json").read_text()))
        assert back == r


def test_unsafe_submission_names_are_refused(tmp_path):
    for name in ("../escape", "a/b", ".hidden", "", "_plots", "grades.csv"):
        with pytest.raises(ValueError, match="cannot be used as a folder"):
            report.write_submission(tmp_path, make_record(name))
    assert list(tmp_path.iterdir()) == []


def test_nan_in_student_evidence_still_gives_valid_json(tmp_path):
    record = make_record("nan", buggy=True,
                         evidence={"test": "self_attention.sdpa_worked_example",
                                   "expected": EXPECTED_W, "got": [[float("nan")] * 3] * 3})
    report.write_submission(tmp_path, record)
    data = json.loads((tmp_path / "nan" / "record.json").read_text())
    assert data["evidence"]["got"][0][0] == "nan"


# ---------------------------------------------------------------- atomic writes


def test_a_crash_before_replace_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    report.write_submission(tmp_path, make_record("fay"))
    before = {p.name: p.read_bytes() for p in (tmp_path / "fay").iterdir()}

    def crash(src, dst):
        raise KeyboardInterrupt("killed between the temp write and the rename")

    monkeypatch.setattr(report.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        report.write_submission(tmp_path, make_record("fay", buggy=True))
    after = {p.name: p.read_bytes() for p in (tmp_path / "fay").iterdir()}
    assert after == before  # old content intact, no temp file left


def test_a_crash_during_the_first_write_leaves_no_record_so_resume_regrades(tmp_path, monkeypatch):
    real_replace, calls = report.os.replace, []

    def crash_on_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(report.os, "replace", crash_on_second)
    with pytest.raises(OSError):
        report.write_submission(tmp_path, make_record("gil"))
    files = sorted(p.name for p in (tmp_path / "gil").iterdir())
    assert files == ["results.json"]  # record.json, the "complete" marker, is written last


def test_temp_files_left_by_kill_9_are_ignored(tmp_path):
    report.write_submission(tmp_path, make_record("hal"))
    (tmp_path / "hal" / ".record.json.x1.tmp").write_text('{"submission": "hal", "tes')
    stray = tmp_path / ".ivy.abc"  # a half-copied folder from an interrupted merge
    stray.mkdir()
    (stray / "record.json").write_text(json.dumps(report.record_to_json(make_record("ivy"))))
    records, problems = report.load_records(tmp_path)
    assert [r.submission for r in records] == ["hal"] and problems == []


def test_an_unreadable_record_is_reported_not_silently_dropped(tmp_path):
    report.write_submission(tmp_path, make_record("jay"))
    (tmp_path / "kim").mkdir()
    (tmp_path / "kim" / "record.json").write_text("{not json")
    report.write_class(tmp_path)
    assert "kim: record.json unreadable" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "grades.csv").read_text().count("\n") == 2


# ---------------------------------------------------------------- feedback.md


def test_feedback_shows_expected_got_hint_and_faults_grouped_by_component(graded):
    text = (graded / "Adam" / "feedback.md").read_text()
    assert "**Score: 69 / 100**" in text
    assert "| self_attention | 5 / 30 | 1 / 3 |" in text
    assert f"expected: {EXPECTED_W}" in text and f"got:      {UNSCALED_W}" in text
    assert HINT in text
    assert "## self_attention: 5 / 30" in text and "## deliverables: 4 / 10" in text
    assert "attention_heatmap.png is blank" in text
    headings = re.findall(r"^## (\w+):", text, flags=re.M)
    assert headings == list(COMPONENTS)

    timeout = (graded / "bob_timeout" / "feedback.md").read_text()
    assert "status: timeout" in timeout
    assert "multihead.py: forward ran past the 2 s limit" in timeout


def test_feedback_adds_the_rubric_hint_when_the_output_lacks_it():
    record = make_record("lee")
    record.tests[0] = _test("self_attention.sdpa_worked_example", 0, 10, "expected 0.4, got 0.5", "wrong_axis")
    text = report.feedback_markdown(record, {"wrong_axis": "Softmax ran over the query axis (handout §3)."})
    assert "**Hint:** Softmax ran over the query axis (handout §3)." in text


def test_student_text_cannot_break_out_of_the_feedback_fence():
    record = make_record("mo")
    record.tests[0] = _test("self_attention.sdpa_worked_example", 0, 10, "```\n# Injected heading\n")
    text = report.feedback_markdown(record)
    assert "````text\n```\n# Injected heading\n````" in text


def test_rubric_hints_are_found_whatever_the_table_layout(tmp_path):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text('[self_attention.sdpa]\npoints = 10\nhint = "scale it"\n\n'
                      '[[catalogue]]\nid = "wrong_axis"\nhint = "softmax over keys"\n\n'
                      '[hints."blk.swap_ln"]\ntext = "Post-LN normalises after the add"\n'
                      '[hints]\nflat = "a plain string also works"\n')
    hints = report._hint_texts(rubric)
    assert hints["self_attention.sdpa"] == "scale it"
    assert hints["wrong_axis"] == "softmax over keys"
    assert hints["blk.swap_ln"] == "Post-LN normalises after the add"
    assert hints["flat"] == "a plain string also works"
    assert report._hint_texts(tmp_path / "missing.toml") == {}


def test_the_kit_rubric_gives_a_text_for_every_catalogue_hint():
    import tomllib

    rubric = Path(report.__file__).parent / "day13" / "rubric.toml"
    if not rubric.is_file():
        pytest.skip("grader/day13/rubric.toml not written yet")
    ids = tomllib.loads(rubric.read_text()).get("hints", {})
    hints = report._hint_texts()
    assert ids and all(hints.get(i) for i in ids)


# ---------------------------------------------------------------- class report


def test_summary_and_report_show_histogram_pass_rates_misconceptions_heatmaps(graded):
    summary = (graded / "summary.md").read_text()
    page = (graded / "report.html").read_text()
    images = re.findall(r'src="([^"]+\.png)"', page)
    assert "_plots/histogram.png" in images and "_plots/pass_rates.png" in images
    heatmaps = [i for i in images if "heatmap-" in i]
    assert len(heatmaps) == 1 and "Adam" in heatmaps[0]  # carol's evidence is garbage: skipped, no crash
    for rel in images:
        assert (graded / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({rel})" in summary
    assert "| `missing_sqrt_dk` | 2 |" in summary  # Adam and carol, counted once each
    assert report._md_inline(HINT) in summary and report.html.escape(HINT) in page
    assert "| `self_attention.sdpa_worked_example` | self_attention | 3 / 5 | 60% |" in summary
    assert "**bob_timeout**: timeout" in summary and "<b>bob_timeout</b>: timeout" in page


def test_heatmap_only_for_failing_attention_tests():
    passing = make_record("ok", evidence={"test": "self_attention.sdpa_worked_example",
                                          "expected": EXPECTED_W, "got": EXPECTED_W})
    other = make_record("pe", buggy=True, evidence={"test": "positional.table",
                                                    "expected": EXPECTED_W, "got": UNSCALED_W})
    nested = make_record("deep", buggy=True, evidence={"self_attention.sdpa_worked_example": {
        "expected": [[EXPECTED_W]], "got": [[UNSCALED_W]]}})
    picked = report._heatmap_candidates([passing, other, nested])["picked"]
    assert [(p["submission"], p["got"]) for p in picked] == [("deep", UNSCALED_W)]


def test_student_text_is_escaped_in_the_html_report(tmp_path):
    evil = "<img src=x onerror=alert(1)>"
    report.write_submission(tmp_path, make_record(evil, buggy=True, status="crashed",
                                                  notes=["<script>alert('x')</script>"]))
    report.write_class(tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "<script>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert len(re.findall(r"<img ", page)) == 3  # histogram, pass rates, one heatmap: ours only


def test_class_files_are_deterministic_png_included(graded, tmp_path):
    again = tmp_path / "again"
    for r in reversed(CLASS):  # another grading order, other timings
        r2 = report.record_from_json(report.record_to_json(r))
        r2.execution_time += 1.0
        report.write_submission(again, r2)
    report.write_class(again)
    assert _class_files(again) == _class_files(graded)


# ---------------------------------------------------------------- merge


def test_merge_of_two_shards_equals_one_full_run(graded, tmp_path, capsys):
    shard1, shard2 = tmp_path / "s1", tmp_path / "s2"
    for i, r in enumerate(CLASS):
        report.write_submission(shard1 if i % 2 else shard2, r)
    report.write_class(shard1)  # shards also write their own class files: merge must not copy them
    assert report.merge(shards=[str(shard1), str(shard2)], out=str(tmp_path / "all")) == 0
    merged = tmp_path / "all"
    assert _class_files(merged) == _class_files(graded)
    for r in CLASS:
        for name in ("results.json", "feedback.md", "record.json"):
            assert (merged / r.submission / name).read_bytes() == (graded / r.submission / name).read_bytes()
    assert "5 submissions from 2 shards" in capsys.readouterr().out


def test_merge_refuses_a_submission_graded_differently_in_two_shards(tmp_path, capsys):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    report.write_submission(a, make_record("nia"))
    report.write_submission(b, make_record("nia", buggy=True))
    assert report.merge(shards=[str(a), str(b)], out=str(out)) == 1
    assert "nia" in capsys.readouterr().err
    assert not out.exists()


def test_merge_keeps_an_identical_duplicate_once_and_says_so(tmp_path, capsys):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    report.write_submission(a, make_record("oli", execution_time=1.0))
    report.write_submission(b, make_record("oli", execution_time=2.0))
    assert report.merge(shards=[str(a), str(b)], out=str(out)) == 0
    assert "duplicate kept once: oli" in capsys.readouterr().err
    assert (out / "grades.csv").read_text().count("\noli,") == 1


def test_merge_reports_ungraded_folders_and_missing_shards(tmp_path, capsys):
    a, out = tmp_path / "a", tmp_path / "out"
    report.write_submission(a, make_record("pat"))
    (a / "quin").mkdir()  # killed before its record.json was written
    assert report.merge(shards=[str(a)], out=str(out)) == 1
    err = capsys.readouterr().err
    assert "quin" in err and "Re-run" in err
    assert (out / "pat" / "record.json").is_file()
    assert report.merge(shards=[str(tmp_path / "nope")], out=str(out)) == 2
    assert "does not exist" in capsys.readouterr().err


def test_merge_is_wired_to_the_command_line(tmp_path):
    from grader.__main__ import main

    a, out = tmp_path / "a", tmp_path / "out"
    report.write_submission(a, make_record("ray"))
    assert main(["merge", str(a), "--out", str(out)]) == 0
    assert (out / "grades.csv").read_text().splitlines()[1].startswith("ray,100,100,")


def test_a_huge_test_output_is_cut_and_says_so(tmp_path):
    record = make_record("sam")
    record.tests[0] = _test("self_attention.sdpa_worked_example", 0, 10, "x" * 50_000)
    report.write_submission(tmp_path, record)
    output = json.loads((tmp_path / "sam" / "results.json").read_text())["tests"][0]["output"]
    assert len(output) < 7000 and output.endswith("more characters cut)")
    assert "more characters cut)" in (tmp_path / "sam" / "feedback.md").read_text()


def test_student_text_cannot_make_links_or_html_in_the_markdown(tmp_path):
    report.write_submission(tmp_path, make_record("[click](http:evil)", status="crashed",
                                                  notes=["![x](http:evil) <b>loud</b> | cell"]))
    report.write_class(tmp_path)
    for text in ((tmp_path / "summary.md").read_text(),
                 (tmp_path / "[click](http:evil)" / "feedback.md").read_text()):
        assert "[click](http:evil)" not in text and "\\[click\\](http:evil)" in text
        assert "![x](http:evil)" not in text and "\\<b>loud\\</b> \\| cell" in text


def test_an_empty_output_folder_still_gets_class_files(tmp_path):
    report.write_class(tmp_path)
    assert (tmp_path / "grades.csv").read_text() == ",".join(report.GRADES_COLUMNS) + "\n"
    assert "0 submissions graded" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_merge_into_one_of_the_shards(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    report.write_submission(a, make_record("tia"))
    report.write_submission(b, make_record("uma", buggy=True))
    assert report.merge(shards=[str(a), str(b)], out=str(a)) == 0
    rows = (a / "grades.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["tia", "uma"]
    assert (b / "uma" / "record.json").is_file()  # the other shard is copied, not moved


def test_feedback_shows_one_crash_once_and_points_with_two_decimals():
    record = make_record("kim")
    crash = "scaled_dot_product_attention raised RuntimeError: shapes cannot be multiplied\n  at self_attention.py:19"
    record.tests[0] = _test("self_attention.sdpa_worked_example", 0, 10, crash, title="worked example")
    record.tests[2] = _test("self_attention.module", 0, 15, crash, title="SelfAttention module")
    record.tests[3] = _test("multihead.forward", 25 * 2 / 3, 25)  # 16.6666...
    text = report.feedback_markdown(record)
    assert text.count("shapes cannot be multiplied") == 1, text
    assert "### ✗ worked example, SelfAttention module (the same message for 2 tests)" in text
    assert "16.67 / 25" in text
    assert not re.search(r"\d\.\d{3}", text), "points with more than two decimals"


def test_notes_of_a_submission_graded_as_usual_are_not_an_alarm():
    """A correct notebook's note ("graded the code cells of day13.ipynb") is how it was read, not a fault."""
    record = make_record("nb", notes=["graded the code cells of day13.ipynb"])
    text = report.feedback_markdown(record)
    assert "## Notes on grading" in text and "graded the code cells of day13.ipynb" in text
    assert "What went wrong" not in text
    broken = make_record("crash", status="crashed", notes=["multihead.py crashed its process"])
    assert "## What went wrong while grading" in report.feedback_markdown(broken)

"""grader/results/classreport.py (and the plots it draws): grades.csv, summary.md, report.html, from records made here."""
from __future__ import annotations

import csv
import html
import os
import re
import sys
from pathlib import Path

import pytest

from grader.results import classreport

from grader.results import feedback

from grader.results import plots

from grader.results import storage
from grader.results.document import md_inline

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from report_records import (CLASS, COLUMNS_W, EXPECTED_W, HINT, HINT_ID, LESSON, class_files, grade_class,  # noqa: E402
                            make_record)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_class(tmp_path_factory.mktemp("out"))


def test_grades_csv_has_the_agreed_columns_one_row_each_sorted_by_name(graded):
    with open(graded / "grades.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["submission", "total", "max_total", "activations", "classifier",
                       "status", "source", "overrides", "late_days", "penalty"]
    assert [r[0] for r in rows[1:]] == sorted(r.submission for r in CLASS)
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["Adam"] == ["Adam", "3", "10", "2", "1", "ok", "Adam/", "", "", ""]
    assert by_name["zoe"] == ["zoe", "10", "10", "6", "4", "ok", "zoe.zip", "", "", ""]
    assert by_name["bob_timeout"][rows[0].index("status")] == "timeout"
    # Component columns always add up to the total.
    for row in rows[1:]:
        assert sum(float(x) for x in row[3:5]) == pytest.approx(float(row[1]))


def test_grades_csv_defuses_spreadsheet_formulas_in_names():
    text = classreport.grades_csv([make_record("=HYPERLINK(1)", source="@SUM(1).zip")], lesson=LESSON)
    assert "\n'=HYPERLINK(1)," in text and text.endswith(",ok,'@SUM(1).zip,,,\n")


def test_rows_not_named_as_submitted_are_listed_in_the_class_report(tmp_path):
    records = [make_record("ann_lee"), make_record("Ann_Lee-4871ff", source="Ann Lee.zip"),
               make_record("x", source="<i>x|y</i>.ipynb")]
    for r in records:
        feedback.write_submission(tmp_path, r, lesson=LESSON)
    classreport.write_class(tmp_path, lesson=LESSON)
    summary = (tmp_path / "summary.md").read_text()
    html = (tmp_path / "report.html").read_text()
    assert "| Ann_Lee-4871ff | Ann Lee.zip |" in summary and "\\<i>x\\|y\\</i>.ipynb" in summary
    assert "<td>Ann_Lee-4871ff</td><td><code>Ann Lee.zip</code></td>" in html and "&lt;i&gt;x|y" in html
    # A row that kept its name but was flagged by intake (a collision) is listed too, with the reason.
    flagged = make_record("bo", notes=["row name bo: 'bo/' and 1 other submission would all be named bo"])
    stats = classreport.class_stats([flagged], {}, lesson=LESSON)
    assert stats["renamed"] == [("bo", "bo/", flagged.notes[0])]
    assert "| ann_lee |" not in summary and "<td>ann_lee</td><td><code>" not in html


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
    assert f"| `{HINT_ID}` | 2 |" in summary  # Adam and carol, counted once each
    # A misconception's words come from the rubric by its id, never read back out of a test's output (this
    # made-up id has none in the rubric, so its output's "Hint:" line must not reach the report).
    assert md_inline(HINT) not in summary and html.escape(HINT) not in page
    assert "| `activations.worked_values` | activations | 3 / 5 | 60% |" in summary
    assert "**bob_timeout**: timeout" in summary and "<b>bob_timeout</b>: timeout" in page


def test_evidence_drawn_only_for_failing_tests_of_the_lessons_evidence_parts():
    passing = make_record("ok", evidence={"test": "activations.worked_values",
                                          "expected": EXPECTED_W, "got": EXPECTED_W})
    other = make_record("pe", buggy=True, evidence={"test": "classifier.reference",
                                                    "expected": EXPECTED_W, "got": COLUMNS_W})
    nested = make_record("deep", buggy=True, evidence={"activations.worked_values": {
        "expected": [[EXPECTED_W]], "got": [[COLUMNS_W]]}})
    # `other` failed too, in a part whose evidence is not drawn.
    picked = plots.evidence_candidates([passing, other, nested], ("activations",))["picked"]
    assert [(p["submission"], p["got"]) for p in picked] == [("deep", COLUMNS_W)]
    # The parts are the lesson's (lesson.toml [report] evidence_components), none named by the engine.
    assert [p["submission"] for p in plots.evidence_candidates([other], ("classifier",))["picked"]] == ["pe"]
    assert plots.evidence_candidates([nested], ("classifier",))["picked"] == []
    assert plots.evidence_candidates([nested], ())["picked"] == []


def test_the_evidence_section_speaks_the_lessons_words(graded):
    words = LESSON.evidence
    assert f"## {md_inline(words.title)}" in (graded / "summary.md").read_text()
    assert f"<h2>{html.escape(words.title)}</h2>" in (graded / "report.html").read_text()
    assert f'alt="{html.escape(words.picture)}"' in (graded / "report.html").read_text()


def test_grades_csv_keeps_the_stored_precision_and_pages_show_two_decimals(tmp_path):
    """grades.csv is read by spreadsheets and scripts: the records' four decimals; a person reads two."""
    record = make_record("sev")
    record.tests[2] = feedback_test = type(record.tests[2])("activations.reference", "activations", 2 * 2 / 3, 2, "failed")
    feedback.write_submission(tmp_path, record, lesson=LESSON)
    classreport.write_class(tmp_path, lesson=LESSON)
    row = next(csv.DictReader((tmp_path / "grades.csv").open()))
    assert row["activations"] == "5.3333" and row["total"] == "9.3333"
    for name in ("summary.md", "report.html", "sev/feedback.md", "sev/feedback.html"):
        text = (tmp_path / name).read_text()
        assert "9.33" in text and "5.3333" not in text and "9.3333" not in text, name
    assert feedback_test.score == 2 * 2 / 3


def test_student_text_is_escaped_in_the_html_report(tmp_path):
    evil = "<img src=x onerror=alert(1)>"
    feedback.write_submission(tmp_path, make_record(evil, buggy=True, status="crashed",
                                                  notes=["<script>alert('x')</script>"]), lesson=LESSON)
    classreport.write_class(tmp_path, lesson=LESSON)
    page = (tmp_path / "report.html").read_text()
    assert "<script>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert len(re.findall(r"<img ", page)) == 3  # histogram, pass rates, one heatmap: ours only


def test_class_files_are_deterministic_png_included(graded, tmp_path):
    again = tmp_path / "again"
    for r in reversed(CLASS):  # another grading order, other timings
        r2 = storage.record_from_json(storage.record_to_json(r))
        r2.execution_time += 1.0
        feedback.write_submission(again, r2, lesson=LESSON)
    classreport.write_class(again, lesson=LESSON)
    assert class_files(again) == class_files(graded)


def test_student_text_cannot_make_links_or_html_in_the_markdown(tmp_path):
    feedback.write_submission(tmp_path, make_record("[click](http:evil)", status="crashed",
                                                  notes=["![x](http:evil) <b>loud</b> | cell"]), lesson=LESSON)
    classreport.write_class(tmp_path, lesson=LESSON)
    for text in ((tmp_path / "summary.md").read_text(),
                 (tmp_path / "[click](http:evil)" / "feedback.md").read_text()):
        assert "[click](http:evil)" not in text and "\\[click\\](http:evil)" in text
        assert "![x](http:evil)" not in text and "\\<b>loud\\</b> \\| cell" in text


def test_an_empty_output_folder_still_getsclass_files(tmp_path):
    classreport.write_class(tmp_path, lesson=LESSON)
    assert (tmp_path / "grades.csv").read_text() == ",".join(classreport.grades_columns(LESSON.components)) + "\n"
    assert "0 submissions graded" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")



def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_big_class_gets_the_same_files_with_its_students_written_beside_the_report(tmp_path, monkeypatch):
    """From BESIDE_AT records on, a forked child writes the students' files while this process draws the plots
    and the report: every file is what writing them one by one gives. A child that fails before writing any
    leaves the parent to write them all."""
    size = classreport.BESIDE_AT
    records = [make_record(f"s{i:02d}", buggy=i % 3 == 0) for i in range(size)]

    def run(out: Path, beside_at: int) -> dict[str, bytes]:
        for r in records:
            feedback.keep_record(out, r)  # what a grading run's worker writes: the record alone
        monkeypatch.setattr(classreport, "BESIDE_AT", beside_at)
        classreport.write_class(out, lesson=LESSON)
        return _files(out)

    one_by_one = run(tmp_path / "one_by_one", size + 1)
    assert sum(name.endswith("/feedback.html") for name in one_by_one) == size
    assert run(tmp_path / "beside", size) == one_by_one

    def child_that_dies(work):
        pid = os.fork()
        if pid == 0:
            os._exit(1)
        return pid

    monkeypatch.setattr(classreport, "_beside", child_that_dies)
    assert run(tmp_path / "died", size) == one_by_one

"""feedback.html: each student's feedback as a page (the class report links to it), rendered from
feedback.md with every student-derived character escaped."""
from grader import classreport, feedback
from grader.records import SubmissionResult
from grader.records import TestResult as Outcome

HOSTILE = "<script>alert(1)</script> **bold** `code` [x](javascript:alert(2)) <img src=x onerror=alert(3)>"


def _result() -> SubmissionResult:
    return SubmissionResult(submission="zed", source="zed/", notes=[HOSTILE], tests=[
        Outcome(name="deliverables.analysis", component="deliverables", score=0, max_score=2, status="failed",
                output="```\n" + HOSTILE + "\n```", title="analysis " + HOSTILE)])


def test_the_page_renders_the_markdown_and_escapes_student_text(tmp_path):
    feedback.write_submission(tmp_path, _result())
    page = (tmp_path / "zed" / "feedback.html").read_text()
    assert "<h1>" in page and "<table>" in page and "<strong>Score: 0 / 2</strong>" in page
    assert "<pre>" in page  # the test's output, fenced, as preformatted text
    for live in ("<script>", "<img src=x", 'href="javascript'):
        assert live not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "default-src 'none'" in page  # and nothing could run even if something slipped through


def test_the_class_report_links_to_the_pages_and_overrides_reach_them(tmp_path):
    feedback.write_submission(tmp_path, _result())
    (tmp_path / "overrides.csv").write_text("submission,test,points,comment,by,at\nzed,deliverables.analysis,1,fair,ta,\n")
    classreport.write_class(tmp_path)
    assert 'href="zed/feedback.html"' in (tmp_path / "report.html").read_text()
    page = (tmp_path / "zed" / "feedback.html").read_text()
    assert "Reviewed by your instructor" in page and "fair" in page

"""feedback.html: each student's feedback as a page (the class report links to it), rendered from the
same Document as feedback.md (grader/results/document.py), every student-derived character escaped."""
from grader.results import classreport
from grader.results import feedback
from grader.results.records import SubmissionResult
from grader.results.records import TestResult as Outcome
from grader.lesson import load_lesson

from engine_helpers import TOY

LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage: the toy's

HOSTILE = "<script>alert(1)</script> **bold** `code` [x](javascript:alert(2)) <img src=x onerror=alert(3)>"


def _result() -> SubmissionResult:
    return SubmissionResult(submission="zed", source="zed/", notes=[HOSTILE], tests=[
        Outcome(name="activations.reference", component="activations", score=0, max_score=2, status="failed",
                output="```\n" + HOSTILE + "\n```", title="softmax " + HOSTILE)])


def test_the_page_renders_the_document_and_escapes_student_text(tmp_path):
    feedback.write_submission(tmp_path, _result(), lesson=LESSON)
    page = (tmp_path / "zed" / "feedback.html").read_text()
    assert "<h1>" in page and "<table>" in page and "<b>Score: 0 / 2</b>" in page
    assert "<pre>```\n&lt;script&gt;" in page  # the test's output, as preformatted text, its fence text too
    for live in ("<script>", "<img src=x", 'href="javascript'):
        assert live not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "default-src 'none'" in page  # and nothing could run even if something slipped through


def test_the_page_and_the_text_come_from_one_document_never_from_each_other(tmp_path, monkeypatch):
    """feedback.html is not made from feedback.md: a change of the Markdown renderer leaves the page as it is."""
    feedback.write_submission(tmp_path / "a", _result(), lesson=LESSON)
    monkeypatch.setattr(feedback, "to_markdown", lambda doc: "# replaced\n")
    feedback.write_submission(tmp_path / "b", _result(), lesson=LESSON)
    assert (tmp_path / "b" / "zed" / "feedback.md").read_text() == "# replaced\n"
    assert (tmp_path / "a" / "zed" / "feedback.html").read_text() == (tmp_path / "b" / "zed" / "feedback.html").read_text()


def test_the_class_report_links_to_the_pages_and_overrides_reach_them(tmp_path):
    feedback.write_submission(tmp_path, _result(), lesson=LESSON)
    (tmp_path / "overrides.csv").write_text("submission,test,points,comment,by,at\nzed,activations.reference,1,fair,ta,\n")
    classreport.write_class(tmp_path, lesson=LESSON)
    assert 'href="zed/feedback.html"' in (tmp_path / "report.html").read_text()
    page = (tmp_path / "zed" / "feedback.html").read_text()
    assert "Reviewed by your instructor" in page and "fair" in page


def test_the_page_fits_a_1280_pixel_window_in_a_browser(tmp_path):
    """A long line without a space (a hint, an error, a path, a student's name) wraps instead of
    widening the page: the feedback page of a real class was 1757 px wide in a 1280 px window."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_review_browser import ARGS, _browser, _playwright

    executable, sync_playwright = _browser(), _playwright()
    unbroken = "softmax(QK^T/sqrt(d_k))·V_" * 40
    long_line = "Hint: " + " ".join(["the weights of each query must sum to one over the keys,"] * 30)
    result = SubmissionResult(submission="w" * 200, source="zed/", notes=[unbroken], tests=[
        Outcome(name="activations.reference", component="activations", score=0, max_score=2, status="failed",
                output=long_line + "\n" + unbroken + "\n    " + "x = torch.zeros(" * 30, title=unbroken)])
    feedback.write_submission(tmp_path, result, lesson=LESSON)
    page_file = tmp_path / ("w" * 200) / "feedback.html"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(page_file.as_uri())
        width = page.evaluate("document.documentElement.scrollWidth")
        assert page.locator("pre").count() >= 1 and page.locator("h1").count() == 1
        browser.close()
    assert width <= 1280, f"feedback.html is {width} px wide in a 1280 px window"

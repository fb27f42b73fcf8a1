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


def _inline_one_character_at_a_time(text: str) -> str:
    """The inline rules as written first, one character at a time: the specification the run-at-a-time
    renderer must keep (code spans, **bold**, backslash escapes; everything else escaped)."""
    import html

    out, i, strong = [], 0, False
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and not text[i + 1].isalnum():
            out.append(html.escape(text[i + 1]))
            i += 2
        elif ch == "`":
            end = text.find("`", i + 1)
            out.append("`" if end < 0 else f"<code>{html.escape(text[i + 1:end])}</code>")
            i = i + 1 if end < 0 else end + 1
        elif text.startswith("**", i):
            out.append("</strong>" if strong else "<strong>")
            strong, i = not strong, i + 2
        else:
            out.append(html.escape(ch))
            i += 1
    return "".join(out) + ("</strong>" if strong else "")


def test_inline_markup_is_rendered_as_one_character_at_a_time_would():
    import random

    pieces = list("ab1 é\\`*<>&\"'") + ["**", "\\*", "``", "\\a", "<script>", HOSTILE]
    rng = random.Random(13)
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert feedback._inline_html(text) == _inline_one_character_at_a_time(text), text

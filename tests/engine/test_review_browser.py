"""The review page in a real browser (Debian's Chromium driven by Playwright), as a grader uses it on
a graded class: the class list, filtered to who is not reviewed yet; a student's code with its diff
from the stub; a comment on a line for the student and a note for the staff; points typed wrong, then
right, without losing what was typed; a regrade request decided; the keyboard to the next student not
reviewed. After `grade` runs again (regrading nothing), grades.csv, the report and the student's
feedback show the decisions, the comment at its line, never the staff note. Student files planted
with script (a README, an SVG diagram, the code itself) run nothing and write nothing.

The class is the toy lesson's, with its deliverables (a README and a plot, shown on the page).

Screenshots at 1280x800 of the class list, a student's code and similarity.html go to
$REVIEW_SCREENSHOTS when it is set (the issue's closing note shows them), else to the test's
temporary folder; on each page nothing is wider than the window."""
import csv
import io
import os
import shutil
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY, kept_zygotes, make_submission, shared_config  # noqa: E402

from grader.admin import review

from grader.running import grade as run  # noqa: E402

REFERENCE = TOY / "solutions"

CONFIG = shared_config(call_timeout=3.0)
BROWSERS = ("/usr/bin/chromium", "/usr/lib/chromium/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-default-apps", "--disable-extensions", "--disable-sync",
        "--metrics-recording-only", "--no-first-run", "--disable-dev-shm-usage"]
PLANTED = "<script>window.__pwned = 1; fetch('/s/amy/override', {method: 'POST'});</script>"
SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="300" height="200" onload="top.__pwned = 2">'
       '<script>top.__pwned = 3</script><rect width="300" height="200" fill="#39c"/>'
       '<text x="20" y="100">softmax</text></svg>\n')
CORRECT = "return exps / exps.sum(dim=dim, keepdim=True)"
DOUBLED = "return 2 * exps / exps.sum(dim=dim, keepdim=True)  # </td><script>window.__pwned = 4</script>"
WINDOW = {"width": 1280, "height": 800}


def _browser() -> str:
    found = next((b for b in BROWSERS if os.access(b, os.X_OK)), None)
    if found is None:
        message = "Debian's chromium is not installed (apt-get install chromium; .ci/run does it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("playwright is not installed (pyproject's dev extra installs it)")
        pytest.skip("playwright is not installed")
    return sync_playwright


def _grades(out: Path) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


def _class(subs: Path) -> None:
    """amy: the reference; ben: a softmax twice too large (his code carries a script in a comment); cara:
    ben's code and amy's README (a similar pair of each kind)."""
    readme = "# My softmax\n" + PLANTED + "\nrows of probabilities sum to one " * 30
    make_submission(subs / "amy", {"README.md": readme}, solutions=REFERENCE)
    make_submission(subs / "ben", {"README.md": "# Ben\n" + PLANTED + "\n"}, solutions=REFERENCE)
    make_submission(subs / "cara", {"README.md": readme}, solutions=REFERENCE)
    for name in ("ben", "cara"):
        path = subs / name / "activations.py"
        text = path.read_text()
        assert CORRECT in text
        path.write_text(text.replace(CORRECT, DOUBLED))
    for name in ("amy", "ben", "cara"):
        (subs / name / "softmax_plot.svg").write_text(SVG)


def _fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_a_grader_reviews_the_class_in_a_real_browser(tmp_path, toy_with_deliverables):
    lesson = toy_with_deliverables
    executable, sync_playwright = _browser(), _playwright()
    shots = Path(os.environ.get("REVIEW_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    subs, out = tmp_path / "subs", tmp_path / "out"
    _class(subs)
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=lesson, zygotes=kept_zygotes()) == 0
    before = _grades(out)["ben"]
    assert float(before["activations"]) < lesson.points["activations"] == 6
    asked = (datetime.now(timezone.utc) - timedelta(hours=1)).replace(microsecond=0).isoformat()
    (out / "regrade_requests.csv").write_text(
        f"student,test,reason,time\nben,activations.worked_values,I think my softmax is right,{asked}\n")

    server = review.ReviewServer(review.Review(out, subs, None, "all", "ta-jo", lesson=lesson))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    dialogs = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=ARGS, headless=True)
            page = browser.new_page(viewport=WINDOW)
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            # The class list: what is left, and a filter to it.
            page.goto(server.url)
            assert "0 of 3 reviewed · 3 left" in page.locator("h1").inner_text()
            assert _fits(page)
            page.screenshot(path=str(shots / "class-list.png"))
            page.click("text=not reviewed (3)")
            page.wait_for_url("**/?show=not-reviewed")
            assert page.locator("#students tr[data-name]").count() == 3
            page.click('#students a:text-is("ben")')
            page.wait_for_url("**/s/ben")
            assert page.evaluate("window.__pwned === undefined")
            # His code: coloured, the failing test at its definition, the diff from the stub.
            code = page.locator("#file-0")
            assert code.locator("summary").first.inner_text().startswith("activations.py")
            assert code.locator(".failing").first.is_visible()
            diff = code.locator("details.diff")
            assert not diff.locator("table").is_visible()
            diff.locator("summary").click()
            assert diff.locator("tr.add").first.is_visible() and diff.locator("tr.del").first.is_visible()
            assert "window.__pwned = 4" in diff.inner_text()  # the student's script, shown as text
            # A comment on the doubling line for ben, a note for the staff.
            line = code.locator("table.code:not(.diff) tr", has_text="return 2 * exps / exps.sum(dim=dim, keepdim=True)  #")
            number = line.locator("a.ln").inner_text()
            line.locator("a.ln").click()
            assert page.input_value("#c-line") == number and page.input_value("#c-file") == "activations.py"
            page.fill("#c-comment", "each row sums to 1 without the 2 × here (handout §1)")
            page.fill("#c-note", "STAFF-NOTE same edit as cara")
            page.click("#c-save")
            page.wait_for_url("**/s/ben")
            assert "to the student: each row sums to 1 without the 2 × here" in page.content()
            page.locator(".said").first.scroll_into_view_if_needed()
            assert _fits(page)
            page.screenshot(path=str(shots / "student-code.png"))
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(shots / "student-top.png"))
            # Points typed wrong, then right: what was typed survives the refusal.
            page.select_option("#test", "activations")
            page.fill("#points", "70")
            page.fill("#comment", "a factor of 2 too many; the rest is right")
            page.click("#save")
            assert "between 0 and 6" in page.locator("#message").inner_text()
            assert page.input_value("#points") == "70"
            assert page.input_value("#comment") == "a factor of 2 too many; the rest is right"
            assert page.input_value("#test") == "activations"
            page.fill("#points", "3")
            page.fill("#staff_note", "STAFF-NOTE part mark agreed with the other TA")  # two fields, two readers
            page.click("#save")
            page.wait_for_url("**/s/ben")
            assert "agreed with the other TA" in page.locator(".staff-note").first.inner_text()
            # His regrade request, decided beside it.
            page.fill("#r-points-0", "1")
            page.fill("#r-comment-0", "partial credit: only the factor is wrong")
            page.click("#r-accept-0")
            page.wait_for_url("**/s/ben")
            assert "regrade request (accepted)" in page.content()
            # On with the keyboard to the next student not reviewed.
            page.locator("h1").click()
            page.keyboard.press("n")
            page.wait_for_url("**/s/cara")
            assert page.evaluate("window.__pwned === undefined")
            page.keyboard.press("l")
            page.wait_for_url(server.url)
            assert "1 of 3 reviewed · 2 left" in page.locator("h1").inner_text()
            # similarity.html: the pair side by side, code readable.
            page.goto((out / "similarity.html").as_uri())
            page.locator("details summary", has_text="ben ↔ cara: code").first.click()  # their shared code
            page.locator("details[open] .pair").first.evaluate("e => e.scrollIntoView()")
            assert _fits(page)
            # Room under every highlighted line: the next line's highlight never covers its underscores
            # (at .8em and the default line height they touched, and d_k read as "d k").
            gaps = page.evaluate("""() => { const gaps = [];
              for (const pre of document.querySelectorAll('details[open] pre')) {
                const boxes = [...pre.querySelectorAll('mark')].map(m => m.getBoundingClientRect());
                for (let i = 1; i < boxes.length; i++) {
                  if (boxes[i].top > boxes[i - 1].top) { gaps.push(boxes[i].top - boxes[i - 1].bottom); } } }
              return gaps; }""")
            assert gaps and min(gaps) >= 2, gaps
            page.screenshot(path=str(shots / "similarity.png"))
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    assert dialogs == []

    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=lesson, zygotes=kept_zygotes()) == 0  # nothing regraded: applies them
    after = _grades(out)["ben"]
    # The part's 3 points go to its other tests; the accepted request gives worked_values its own 1.
    assert after["activations"] == "4" and "activations.worked_values 0->1" in after["overrides"]
    summary = (out / "summary.md").read_text()
    assert "## Regrade requests" in summary and "1 accepted" in summary
    feedback = (out / "ben" / "feedback.md").read_text()
    assert "## Comments on your code" in feedback
    said = feedback[feedback.index("## Comments on your code"):].split("\n## ")[0]
    quoted = " ".join(f"{DOUBLED} # each slice sums to 1".split())  # the line as it was, its own comment too
    assert f"- `activations.py` line {number}: `{quoted}` (ta-jo): each row sums to 1 without the 2 × here" in said, said
    assert "**accepted** (1 points): partial credit: only the factor is wrong" in feedback
    for name in ("feedback.md", "feedback.html", "results.json"):
        assert "STAFF-NOTE" not in (out / "ben" / name).read_text()
    assert "<script>window.__pwned" not in (out / "ben" / "feedback.html").read_text()
    shutil.rmtree(tmp_path, ignore_errors=True)

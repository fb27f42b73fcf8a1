"""The review page in a real browser (Debian's Chromium driven by Playwright): on a graded class, move
to a student with the keyboard, enter points and a comment, reload, and find the decision in
grades.csv and feedback.md after `grade` runs again (regrading nothing). Student files planted with
script (a README, an SVG diagram) run nothing and write nothing."""
import csv
import io
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import make_submission, uid_base_for_tests  # noqa: E402

from grader import review, run  # noqa: E402
from grader.sandbox import SandboxConfig  # noqa: E402

CONFIG = SandboxConfig(call_timeout=3.0, uid_base=uid_base_for_tests(8))
BROWSERS = ("/usr/bin/chromium", "/usr/lib/chromium/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-default-apps", "--disable-extensions", "--disable-sync",
        "--metrics-recording-only", "--no-first-run", "--disable-dev-shm-usage"]
PLANTED = "<script>window.__pwned = 1; fetch('/s/amy/override', {method: 'POST'});</script>"
SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="300" height="200" onload="top.__pwned = 2">'
       '<script>top.__pwned = 3</script><rect width="300" height="200" fill="#39c"/>'
       '<text x="20" y="100">block</text></svg>\n')


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


def test_a_ta_reviews_a_student_in_a_real_browser(tmp_path):
    executable, sync_playwright = _browser(), _playwright()
    subs, out = tmp_path / "subs", tmp_path / "out"
    make_submission(subs / "amy", {"README.md": "# Q, K and V\n" + PLANTED + "\nqueries keys values " * 30})
    (subs / "amy" / "transformer_block.svg").write_text(SVG)
    make_submission(subs / "ben", {"README.md": "# Ben\n" + PLANTED + "\n"})
    (subs / "ben" / "transformer_block.svg").write_text(SVG)
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG) == 0
    before = _grades(out)["ben"]

    server = review.ReviewServer(review.Review(out, subs, None, "all", "ta-jo"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    dialogs = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=ARGS, headless=True)
            page = browser.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(server.url)
            assert page.url.endswith("/s/amy")
            assert page.locator("pre").first.inner_text().count("<script>") == 1  # shown as text
            page.wait_for_timeout(300)
            assert page.evaluate("window.__pwned === undefined")
            page.keyboard.press("ArrowRight")
            page.wait_for_url("**/s/ben")
            diagram = page.locator('img[alt="diagram of ben"]')
            assert diagram.evaluate("img => img.complete && img.naturalWidth") == 300  # drawn, as an image
            assert page.evaluate("window.__pwned === undefined")
            page.select_option("#test", "deliverables")
            page.fill("#points", "4")
            page.fill("#comment", "diagram traced from the handout")
            page.fill("#staff_note", "same strokes as amy's diagram")  # two fields, two readers
            page.click("#save")
            page.wait_for_url("**/s/ben")
            page.reload()
            assert "diagram traced from the handout" in page.content()
            assert "same strokes as amy" in page.locator(".staff-note").first.inner_text()
            assert page.locator("h1").inner_text().startswith("ben: ")
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    assert dialogs == []
    rows = (out / "overrides.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith(
        "ben,deliverables,4,diagram traced from the handout,same strokes as amy's diagram,ta-jo,")

    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG) == 0  # nothing regraded: applies it
    after = _grades(out)["ben"]
    assert after["deliverables"] == "4" and float(after["total"]) == float(before["total"]) - \
        float(before["deliverables"]) + 4
    assert after["overrides"].startswith("deliverables ")
    feedback = (out / "ben" / "feedback.md").read_text()
    assert "## Reviewed by your instructor" in feedback and "diagram traced from the handout" in feedback
    assert "same strokes" not in feedback and "amy" not in feedback  # the staff note stays with the staff
    shutil.rmtree(tmp_path, ignore_errors=True)

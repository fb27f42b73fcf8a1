"""grader/review.py: the review page serves hostile student files as inert text and images, refuses
writes without the token or from another Host or site, and writes only valid decisions."""
import http.client
import threading
import urllib.parse
from pathlib import Path

import pytest

from grader import feedback, overrides, review
from grader.records import SubmissionResult
from grader.records import TestResult as Outcome

SCRIPT_README = ("# My README\n<script>document.title='pwned'; fetch('/s/mallory/override', {method:'POST'})</script>\n"
                 "<img src=x onerror=\"alert(1)\">\n[click](javascript:alert(2))\n"
                 "<form method=post action=/s/mallory/override><input name=points value=99></form>\n")
SCRIPT_SVG = ('<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="200" height="200" '
              'onload="alert(3)"><script>alert(4)</script><rect width="200" height="200" fill="red"/></svg>\n')


def _result(name: str) -> SubmissionResult:
    return SubmissionResult(submission=name, source=f"{name}/", flags=["uses exec() (a reflective construct)"],
                            tests=[
        Outcome(name="self_attention.worked_values", component="self_attention", score=0, max_score=4,
                status="failed", output="expected 0.2689 got <b>0.5</b>", title="worked values"),
        Outcome(name="deliverables.readme", component="deliverables", score=2, max_score=2, status="passed"),
        Outcome(name="deliverables.diagram", component="deliverables", score=2, max_score=2, status="passed"),
    ])


@pytest.fixture
def served(tmp_path):
    out, subs = tmp_path / "out", tmp_path / "subs"
    for name in ("mallory", "nina"):
        feedback.write_submission(out, _result(name))
        (subs / name).mkdir(parents=True)
    (subs / "mallory" / "README.md").write_text(SCRIPT_README)
    (subs / "mallory" / "transformer_block.svg").write_text(SCRIPT_SVG)
    (subs / "mallory" / "analysis.md").write_text("</pre><script>alert(5)</script>")
    server = review.ReviewServer(review.Review(out, subs, None, "all", "ta"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, out
    server.shutdown()
    server.server_close()


def _request(server, method, path, body=None, headers=None):
    port = server.server_address[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = {"Host": f"127.0.0.1:{port}", **(headers or {})}
    if body is not None:
        body = urllib.parse.urlencode(body)
        sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
    connection.request(method, path, body=body, headers=sent)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response, data.decode("utf-8", "replace")


def test_student_text_is_escaped_and_the_page_locked_down(served):
    server, _ = served
    response, page = _request(server, "GET", "/s/mallory")
    assert response.status == 200
    policy = response.getheader("Content-Security-Policy")
    assert "default-src 'none'" in policy and "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "<script>document.title" not in page and "&lt;script&gt;document.title=&#x27;pwned&#x27;" in page
    assert "<img src=x" not in page and "</pre><script>alert(5)" not in page
    assert "<b>0.5</b>" not in page and "&lt;b&gt;0.5&lt;/b&gt;" in page
    assert page.count("<script") == 1 and '<script src="/app.js" defer></script>' in page
    assert "uses exec()" in page  # the integrity flag is shown
    # The SVG only as an image, served with a sandboxing policy should someone open it directly.
    assert '<img alt="diagram of mallory" src="/f/mallory/diagram">' in page
    image, body = _request(server, "GET", "/f/mallory/diagram")
    assert image.getheader("Content-Type") == "image/svg+xml"
    assert "sandbox" in image.getheader("Content-Security-Policy")
    assert image.getheader("X-Content-Type-Options") == "nosniff"
    missing, _ = _request(server, "GET", "/f/nina/diagram")
    assert missing.status == 404


def test_writes_need_the_token_the_host_and_this_site(served):
    server, out = served
    good = {"token": server.token, "test": "deliverables.readme", "points": "1", "comment": "copied", "by": "ta"}
    for body, headers in [
        ({**good, "token": ""}, {}),
        ({**good, "token": "guess"}, {}),
        (good, {"Host": "evil.example:80"}),
        (good, {"Host": "attacker.test"}),
        (good, {"Origin": "http://evil.example"}),
    ]:
        response, _ = _request(server, "POST", "/s/mallory/override", body, headers)
        assert response.status == 403
    assert not (out / "overrides.csv").exists()
    response, _ = _request(server, "GET", "/s/mallory", headers={"Host": "rebound.example:1234"})
    assert response.status == 403


def test_a_valid_decision_is_appended_and_shown(served):
    server, out = served
    body = {"token": server.token, "test": "deliverables.readme", "points": "0.5", "comment": "explains K/V only",
            "by": "jo"}
    response, _ = _request(server, "POST", "/s/mallory/override", body,
                           {"Origin": f"http://127.0.0.1:{server.server_address[1]}"})
    assert response.status == 303 and response.getheader("Location") == "/s/mallory"
    rows = overrides.read(out / "overrides.csv")
    assert [(r.submission, r.test, r.points, r.comment, r.by) for r in rows] == [
        ("mallory", "deliverables.readme", 0.5, "explains K/V only", "jo")]
    _, page = _request(server, "GET", "/s/mallory")
    assert "mallory: 2.5 / 8" in page and "explains K/V only" in page


@pytest.mark.parametrize("test, points, says", [
    ("deliverables.readme", "3", "outside 0..2"),
    ("deliverables.nothing", "1", "has no test or part"),
    ("deliverables.readme", "many", "is not a number"),
])
def test_an_impossible_decision_is_refused_and_nothing_written(served, test, points, says):
    server, out = served
    response, page = _request(server, "POST", "/s/mallory/override",
                              {"token": server.token, "test": test, "points": points, "comment": "", "by": "ta"})
    assert response.status == 400 and says in page
    assert not (out / "overrides.csv").exists()


def test_navigation_links_walk_the_class(served):
    server, _ = served
    response, _ = _request(server, "GET", "/")
    assert response.status == 303 and response.getheader("Location") == "/s/mallory"
    _, first = _request(server, "GET", "/s/mallory")
    assert '<a rel="next" href="/s/nina">' in first and '<a rel="prev"' not in first
    _, script = _request(server, "GET", "/app.js")
    assert "ArrowRight" in script

"""grader/admin/review.py: the review page serves hostile student files as inert text and images, refuses
writes without the token or from another Host or site, and writes only valid decisions. Through the toy
lesson with its deliverables (a plot, notes, a README), which the page shows beside the code."""
import csv
import html
import http.client
import io
import json
import re
import threading
import urllib.parse
from pathlib import Path

import pytest

from grader.results import classreport

from grader.results import feedback

from grader.admin import linecomments

from grader.admin import overrides

from grader.admin import review
from grader.results.records import SubmissionResult
from grader.results.records import TestResult as Outcome

SCRIPT_README = ("# My README\n<script>document.title='pwned'; fetch('/s/mallory/override', {method:'POST'})</script>\n"
                 "<img src=x onerror=\"alert(1)\">\n[click](javascript:alert(2))\n"
                 "<form method=post action=/s/mallory/override><input name=points value=99></form>\n")
SCRIPT_SVG = ('<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="200" height="200" '
              'onload="alert(3)"><script>alert(4)</script><rect width="200" height="200" fill="red"/></svg>\n')


HOSTILE_CODE = ('import torch\n\n\ndef softmax(x, dim=-1):\n'
                '    """</td></tr></table><script>alert(6)</script>"""\n'
                '    shifted = x - x.amax(dim=dim, keepdim=True)  # <img src=x onerror=alert(7)>\n'
                '    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)\n')


HOSTILE_NAME = 'h"><img src=y onerror=alert(8)>.py'


def _result(name: str) -> SubmissionResult:
    return SubmissionResult(submission=name, source=f"{name}/", flags=["uses exec() (a reflective construct)"],
                            tests=[
        Outcome(name="activations.worked_values", component="activations", score=0, max_score=2,
                status="failed", output="expected 0.2689 got <b>0.5</b>", title="worked values"),
        Outcome(name="classifier.shape", component="classifier", score=1, max_score=1, status="passed"),
        Outcome(name="classifier.reference", component="classifier", score=3, max_score=3, status="passed"),
    ])


@pytest.fixture
def lesson(toy_with_deliverables):
    return toy_with_deliverables


@pytest.fixture
def served(tmp_path, lesson):
    out, subs = tmp_path / "out", tmp_path / "subs"
    for name in ("mallory", "nina"):
        feedback.write_submission(out, _result(name), lesson=lesson)
        (subs / name).mkdir(parents=True)
    (subs / "mallory" / "README.md").write_text(SCRIPT_README)
    (subs / "mallory" / "softmax_plot.svg").write_text(SCRIPT_SVG)
    (subs / "mallory" / "notes.md").write_text("</pre><script>alert(5)</script>")
    (subs / "mallory" / "activations.py").write_text(HOSTILE_CODE)
    (subs / "mallory" / HOSTILE_NAME).write_text("x = 1\n")
    (out / "similarity.csv").write_text("a,b,kind,score,flagged,detail\n"
                                        "mallory,nina,code,0.910,yes,code: 40 shared fingerprints\n")
    server = review.ReviewServer(review.Review(out, subs, None, "all", "ta", lesson=lesson))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
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
    assert "&lt;/pre&gt;&lt;script&gt;alert(5)" in page  # the notes are shown, as text
    assert "<b>0.5</b>" not in page and "&lt;b&gt;0.5&lt;/b&gt;" in page
    assert page.count("<script") == 1 and '<script src="/app.js" defer></script>' in page
    assert "uses exec()" in page  # the integrity flag is shown
    # The SVG only as an image, served with a sandboxing policy should someone open it directly.
    assert '<img src="/f/mallory/plot" alt="plot of mallory">' in page
    image, body = _request(server, "GET", "/f/mallory/plot")
    assert image.getheader("Content-Type") == "image/svg+xml"
    assert "sandbox" in image.getheader("Content-Security-Policy")
    assert image.getheader("X-Content-Type-Options") == "nosniff"
    missing, _ = _request(server, "GET", "/f/nina/plot")
    assert missing.status == 404


def test_writes_need_the_token_the_host_and_this_site(served):
    server, out = served
    good = {"token": server.token, "test": "classifier.shape", "points": "1", "comment": "copied", "by": "ta"}
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
    body = {"token": server.token, "test": "classifier.shape", "points": "0.5", "comment": "keeps one leading dim only",
            "by": "jo"}
    response, _ = _request(server, "POST", "/s/mallory/override", body,
                           {"Origin": f"http://127.0.0.1:{server.server_address[1]}"})
    assert response.status == 303 and response.getheader("Location") == "/s/mallory"
    rows = overrides.read(out / "overrides.csv")
    assert [(r.submission, r.test, r.points, r.comment, r.by) for r in rows] == [
        ("mallory", "classifier.shape", 0.5, "keeps one leading dim only", "jo")]
    _, page = _request(server, "GET", "/s/mallory")
    assert "mallory: 3.5 / 6" in page and "keeps one leading dim only" in page


@pytest.mark.parametrize("test, points, says", [
    ("classifier.reference", "4", "must be between 0 and 3 (its maximum); you typed 4"),
    ("classifier", "7", "part classifier must be between 0 and 4"),
    ("classifier.nothing", "1", "Choose what to set from the list"),
    ("classifier.shape", "many", "“many” is not a number"),
    ("similarity:nina", "1", "can only be marked reviewed: leave points empty"),
])
def test_an_impossible_decision_is_refused_in_words_keeping_what_was_typed(served, test, points, says):
    server, out = served
    response, page = _request(server, "POST", "/s/mallory/override",
                              {"token": server.token, "test": test, "points": points,
                               "comment": "typed <b>before</b> the error", "by": "ta"})
    assert response.status == 400 and says in page, page
    assert "this form:" not in page and "outside 0.." not in page
    # What was typed is still in the form: the points, the comment and the choice.
    assert f'id="points" inputmode="decimal" placeholder="empty: mark reviewed" value="{points}"' in page
    assert 'value="typed &lt;b&gt;before&lt;/b&gt; the error"' in page
    if test != "classifier.nothing":
        assert f'<option value="{test}" selected>' in page
    assert not (out / "overrides.csv").exists()


def test_navigation_links_walk_the_class(served):
    server, _ = served
    _, first = _request(server, "GET", "/s/mallory")
    assert '<a rel="next" href="/s/nina">' in first and '<a rel="prev"' not in first
    assert '<a rel="index" href="/">class list</a>' in first
    assert '<a rel="next-unreviewed" href="/s/nina">next not reviewed (2 left)</a>' in first
    _, script = _request(server, "GET", "/app.js")
    assert "ArrowRight" in script and "next-unreviewed" in script


def test_the_class_list_counts_filters_and_sorts(served):
    server, out = served
    response, page = _request(server, "GET", "/")
    assert response.status == 200 and "0 of 2 reviewed · 2 left" in page
    assert '<tr data-name="mallory">' in page and '<tr data-name="nina">' in page
    assert "not reviewed (2)" in page and "similar pair to look at (2)" in page
    _request(server, "POST", "/s/mallory/override",
             {"token": server.token, "test": "classifier.reference", "points": "1", "comment": "", "by": "ta"})
    _, page = _request(server, "GET", "/?show=not-reviewed")
    assert "1 of 2 reviewed · 1 left" in page
    assert '<tr data-name="nina">' in page and '<tr data-name="mallory">' not in page
    _, page = _request(server, "GET", "/?sort=total")  # mallory 2 after her decision, nina 4
    assert page.index('data-name="mallory"') < page.index('data-name="nina"')
    _, page = _request(server, "GET", "/?sort=total-desc")
    assert page.index('data-name="nina"') < page.index('data-name="mallory"')
    _, page = _request(server, "GET", "/?show=failing&part=classifier")
    assert '<tr data-name="mallory">' in page and '<tr data-name="nina">' not in page
    _, mallory = _request(server, "GET", "/s/mallory")
    assert '<a rel="next-unreviewed" href="/s/nina">next not reviewed (1 left)</a>' in mallory


def test_the_code_is_shown_coloured_numbered_and_inert(served):
    server, _ = served
    response, page = _request(server, "GET", "/s/mallory")
    assert response.status == 200
    assert "<script>alert(6)" not in page and "&lt;script&gt;alert(6)&lt;/script&gt;" in page
    assert "<img src=x onerror=alert(7)>" not in page and page.count("<script") == 1
    assert "<img src=y" not in page and 'data-file="h&quot;&gt;&lt;img src=y onerror=alert(8)&gt;.py"' in page
    assert '<span class="k">def</span> <span class="d">softmax</span>' in page
    assert 'data-file="activations.py" data-line="4">4</a>' in page
    assert "diff from the released stub" in page
    # The failing test sits under the definition it tests.
    at = page.index('data-line="4">4</a>')
    assert at < page.index("✗ activations.worked_values") < page.index('data-line="5">5</a>')


TEXTS = ['x = "unterminated\n  def f(:\n', "'" * 3 + "open\nstring", "\tif a <b> & c:\n\t\tpass  # é",
         "def f():\n    return 1\n", "%%bash\necho </pre>", "\x00\x7f", "class A:\n  def g(self): return f'{1}'"]


@pytest.mark.parametrize("text", TEXTS)
def test_highlighting_keeps_every_character_of_any_text(text):
    from grader.admin import codeview

    from grader.results.document import inline_html, visible

    painted = [inline_html(line) for line in codeview.highlight(text)]
    assert len(painted) == len(text.split("\n"))
    plain = [html.unescape(re.sub(r"<[^>]+>", "", line)) for line in painted]
    assert plain == [visible(line) for line in text.split("\n")]  # a control character shown as its escape
    assert all("<" not in re.sub(r'</?span( class="[a-z]")?>', "", line) for line in painted)


def test_a_line_comment_is_stored_with_its_line_and_shown(served):
    server, out = served
    bad, page = _request(server, "POST", "/s/mallory/comment",
                         {"token": server.token, "file": "activations.py", "line": "99",
                          "comment": "exp once, not twice", "staff_note": "", "by": "jo"})
    assert bad.status == 400 and "from 1 to 8" in page and 'value="exp once, not twice"' in page
    assert not (out / "comments.csv").exists()
    good, _ = _request(server, "POST", "/s/mallory/comment",
                       {"token": server.token, "file": "activations.py", "line": "6",
                        "comment": "=exp once, not twice", "staff_note": "same line as nina's", "by": "jo"})
    assert good.status == 303
    rows = linecomments.read(out / "comments.csv")
    assert [(r.file, r.line, r.code.strip(), r.comment, r.staff_note) for r in rows] == [
        ("activations.py", 6, "shifted = x - x.amax(dim=dim, keepdim=True)  # <img src=x onerror=alert(7)>",
         "=exp once, not twice", "same line as nina's")]
    assert "'=exp" in (out / "comments.csv").read_text()  # no formula for a spreadsheet
    _, page = _request(server, "GET", "/s/mallory")
    assert "to the student: =exp once, not twice" in page and "staff only: same line as nina&#x27;s" in page


def test_reviewing_a_similar_pair_marks_it_for_both(served):
    server, out = served
    response, _ = _request(server, "POST", "/s/mallory/override",
                           {"token": server.token, "test": "similarity:nina", "points": "",
                            "comment": "both followed the handout", "by": "jo"})
    assert response.status == 303
    rows = overrides.read(out / "overrides.csv")
    assert {(r.submission, r.test, r.points) for r in rows} == {("mallory", "similarity:nina", None),
                                                                ("nina", "similarity:mallory", None)}
    _, page = _request(server, "GET", "/")
    # The pair is reviewed for both; neither student's own work is, yet.
    assert "0 of 2 reviewed · 2 left" in page and "similar pair to look at (0)" in page
    assert "<td>nina ✓</td>" in page and "<td>mallory ✓</td>" in page
    _, nina = _request(server, "GET", "/s/nina")
    assert "pair reviewed ✓" in nina


def test_a_regrade_request_round_trips_to_the_gradebook_report_and_feedback(served, lesson):
    server, out = served
    (out / "regrade_requests.csv").write_text(
        "student,test,reason,time\n"
        "mallory,activations.worked_values,My softmax is along dim=-1 as §1 says,2026-12-01T10:00:00+00:00\n"
        "nina,classifier.shape,please look again,2026-12-01T10:05:00Z\n")
    _, page = _request(server, "GET", "/s/mallory")
    assert "regrade request (open): My softmax is along dim=-1 as §1 says" in page
    refused, page = _request(server, "POST", "/s/mallory/regrade",
                             {"token": server.token, "request": "0", "decision": "accept", "points": "9",
                              "comment": "right", "by": "jo"})
    assert refused.status == 400 and "between 0 and 2" in page
    response, _ = _request(server, "POST", "/s/mallory/regrade",
                           {"token": server.token, "request": "0", "decision": "accept", "points": "1.5",
                            "comment": "your shift is right; the test's tolerance was too tight", "by": "jo"})
    assert response.status == 303
    _request(server, "POST", "/s/nina/regrade", {"token": server.token, "request": "0", "decision": "decline",
                                                 "points": "", "comment": "the shapes are right", "by": "jo"})
    _, page = _request(server, "GET", "/s/mallory")
    assert "regrade request (accepted)" in page
    classreport.write_class(out, release="all", lesson=lesson)
    grades = {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}
    assert grades["mallory"]["activations"] == "1.5"
    assert "activations.worked_values 0->1.5" in grades["mallory"]["overrides"]
    assert grades["nina"]["classifier"] == "4"
    summary = (out / "summary.md").read_text()
    assert "## Regrade requests" in summary and "0 open, 1 accepted, 1 declined." in summary
    mallory = (out / "mallory" / "feedback.md").read_text()
    assert "## Your regrade requests" in mallory
    assert "**accepted** (0 → 1.5 points): your shift is right; the test's tolerance was too tight" in mallory
    assert "**declined**: the shapes are right" in (out / "nina" / "feedback.md").read_text()
    assert "declined" in (out / "nina" / "feedback.html").read_text()
    told = json.loads((out / "mallory" / "results.json").read_text())["output"]  # what Gradescope shows
    assert "activations.worked_values (asked 2026-12-01T10:00:00+00:00): accepted (0 → 1.5 points): your shift" in told


def test_a_request_is_decided_only_by_a_row_on_its_test_written_after_it():
    from grader.admin import regrade_requests

    asked = regrade_requests.Request("amy", "classifier.shape", "why?", "2026-12-01T12:00:00")
    earlier = overrides.Override("amy", "classifier.shape", 2.0, "", at="2026-12-01T11:59:59+00:00")
    part = overrides.Override("amy", "classifier", 10.0, "", at="2026-12-01T12:30:00+00:00")
    later = overrides.Override("amy", "classifier.shape", None, "checked", at="2026-12-01T13:00:00+01:00")  # 12:00 UTC
    assert [s.state for s in regrade_requests.standings([asked], [earlier, part])] == ["open"]
    found = regrade_requests.standings([asked], [earlier, part, later])
    assert [s.state for s in found] == ["declined"] and found[0].for_student()["answer"] == "checked"


def test_the_feedback_shows_line_comments_for_the_student_and_never_the_note(served, lesson):
    server, out = served
    _request(server, "POST", "/s/mallory/comment",
             {"token": server.token, "file": "activations.py", "line": "6", "comment": "exp once, not twice, here",
              "staff_note": "STAFF-ONLY compare with nina", "by": "jo"})
    _request(server, "POST", "/s/mallory/comment",
             {"token": server.token, "file": "activations.py", "line": "7", "comment": "",
              "staff_note": "STAFF-ONLY second note", "by": "jo"})
    classreport.write_class(out, release="all", lesson=lesson)
    for name in ("feedback.md", "feedback.html", "results.json"):
        assert "STAFF-ONLY" not in (out / "mallory" / name).read_text()
    said = json.loads((out / "mallory" / "results.json").read_text())["output"]
    assert "Comments on your code:\n- activations.py line 6: exp once, not twice, here" in said
    text = (out / "mallory" / "feedback.md").read_text()
    assert "## Comments on your code" in text
    assert ("- `activations.py` line 6: `shifted = x - x.amax(dim=dim, keepdim=True) # <img src=x onerror=alert(7)>` "
            "(jo): exp once, not twice, here") in text
    page = (out / "mallory" / "feedback.html").read_text()
    assert "<img src=x" not in page and "exp once, not twice, here" in page


def test_a_bad_row_in_the_page_s_files_is_said_on_the_list_and_the_page(served):
    server, out = served
    (out / "regrade_requests.csv").write_text("student,test,reason,time\nmallory,classifier.shape,why,yesterday\n")
    (out / "comments.csv").write_text("submission,file,line,code,comment,staff_note,by,at\nmallory,a.py,zero,,x,,,\n")
    for path in ("/", "/s/mallory"):
        response, page = _request(server, "GET", path)
        assert response.status == 200
        assert "regrade_requests.csv:2: time &#x27;yesterday&#x27; is not an ISO 8601 time" in page
        assert "comments.csv:2: line &#x27;zero&#x27; is not a line number" in page


def test_the_student_page_shows_the_group_from_the_roster(served):
    server, out = served
    (out / "roster.csv").write_text("identifier,submission,name,group\nm@x,mallory,Mal <Lory>,duo\n"
                                    "p@x,mallory,Pat,duo\nn@x,nina,Nina,\n")
    _, page = _request(server, "GET", "/s/mallory")
    assert "group duo: Mal &lt;Lory&gt;, Pat" in page and "<Lory>" not in page
    _, page = _request(server, "GET", "/s/nina")
    assert 'class="group"' not in page  # one student's own submission: no group line


def test_a_failing_test_is_placed_by_what_it_called_never_by_its_output():
    """Where a failing test sits in the code view comes from data: the graded names it called (the record
    keeps them), else its rubric title; never from the words of its output."""
    from grader.admin import codeview
    from grader.results.records import TestResult

    names = ("first_fn", "SecondClass")
    test = TestResult(name="p.t", component="p", score=0, max_score=1, status="failed",
                      output="first_fn gave 2, expected 1", title="the values", called=["helper", "SecondClass"])
    assert codeview.tested_name(test, names) == "SecondClass"
    old = TestResult(name="p.t", component="p", score=0, max_score=1, status="failed",
                     output="SecondClass gave 2", title="first_fn on the worked example")
    assert codeview.tested_name(old, names) == "first_fn"
    assert codeview.tested_name(TestResult(name="p.t", component="p", score=0, max_score=1, status="failed",
                                           output="first_fn gave 2", title="values"), names) is None


def test_accepting_a_request_with_fewer_points_asks_first_and_every_file_says_it_lowered(served, lesson):
    server, out = served
    (out / "regrade_requests.csv").write_text(
        "student,test,reason,time\nmallory,classifier.reference,I think it deserves a look,2026-12-01T10:00:00Z\n")
    refused, page = _request(server, "POST", "/s/mallory/regrade",
                             {"token": server.token, "request": "0", "decision": "accept", "points": "1",
                              "comment": "the reference test passed by chance", "by": "jo"})
    assert refused.status == 400 and "lowers mallory&#x27;s classifier.reference from 3 to 1" in page
    assert not (out / "overrides.csv").exists()
    response, _ = _request(server, "POST", "/s/mallory/regrade",
                           {"token": server.token, "request": "0", "decision": "accept", "points": "1", "lower": "yes",
                            "comment": "the reference test passed by chance", "by": "jo"})
    assert response.status == 303
    classreport.write_class(out, release="all", lesson=lesson)
    mallory = (out / "mallory" / "feedback.md").read_text()
    assert "**accepted** (3 → 1 points): the reference test passed by chance" in mallory
    told = json.loads((out / "mallory" / "results.json").read_text())["output"]
    assert "accepted (3 → 1 points): the reference test passed by chance" in told
    assert "1 points (was 3: lowered)" in (out / "summary.md").read_text()


def test_the_class_list_states_the_lateness_every_other_output_states(tmp_path, lesson):
    """An extension in the roster: the page says what grades.csv and the feedback say (on time), not the class
    deadline's lateness that late.json measured."""
    from dataclasses import replace

    from grader.admin import regrade

    rubric = tmp_path / "rubric.toml"
    rubric.write_text(regrade.rubric_path(lesson=lesson).read_text()
                      + "\n[late]\ngrace_minutes = 0\npenalty_per_day = 10\nmax_days = 3\n")
    lesson = replace(lesson, rubric_path=rubric)
    out = tmp_path / "out"
    for name in ("dev", "eve"):
        feedback.write_submission(out, _result(name), lesson=lesson)
        (out / name / "late.json").write_text(json.dumps(
            {"late_days": 1, "deadline": "2026-02-10T12:00:00+00:00", "measured_from": "push time",
             "handed_in": "2026-02-11T08:00:00+00:00"}))
    (out / "roster.csv").write_text("identifier,submission,name,group,deadline\n"
                                    "dev@uni.edu,dev,Dev,,2026-02-12T12:00:00+00:00\neve@uni.edu,eve,Eve,,\n")
    page = review.Review(out, None, None, "all", "ta", lesson=lesson)
    late = {s["name"]: s["late"] for s in review.statuses(page, page.records()[0])}
    assert late == {"dev": 0, "eve": 1}


def test_a_class_folder_given_for_the_gradebook_is_told_which_folder_goes_where(tmp_path, capsys, lesson):
    """Held-out s61: `review CLASS` (the submissions, by mistake) said to run `grade SUBMISSIONS --out CLASS`, which
    grade refuses. It says which folder is which instead."""
    (tmp_path / "class" / "amy").mkdir(parents=True)
    assert review.main(out=str(tmp_path / "class"), lesson=lesson) == 2
    said = capsys.readouterr().err
    assert f"python -m grader review OUT {tmp_path / 'class'}" in said
    assert f"python -m grader grade {tmp_path / 'class'} --out OUT" in said
    assert f"--out {tmp_path / 'class'}" not in said

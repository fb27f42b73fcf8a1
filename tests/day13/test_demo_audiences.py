"""The demo class, graded once, seen by its two audiences.

- Privacy: with staff notes, similarity decisions and integrity flags that name classmates, no
  student-facing file of any student (feedback.md, feedback.html, results.json) holds another
  student's submission name or roster id as a whole word, or any staff note.
- The cheater (noah_cheater plants results.json, prints "30 passed", calls sys.exit at import): the
  report's integrity section and the review page (in Chromium) say what was seen; his own feedback
  says only that block.py could not be imported, and no other student's files mention it.
- A late-policy edit rescores the class from its records: no child starts.
"""
import json
import re
import shutil
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "fixtures"))
sys.path.insert(0, str(HERE.parent / "engine"))
from engine_helpers import KIT, kept_zygotes, shared_config  # noqa: E402
from test_review_browser import ARGS, _browser, _playwright  # noqa: E402

from grader.results import feedback

from grader.admin import regrade

from grader.admin import review

from grader.running import grade as run  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage

# mia_infinite_loop waits out this limit on each call it loops in (four of them: 12 s of a 15 s grading at 3 s);
# an honest call takes milliseconds, so 2 s (the nbgrader autograde test's) proves the same sooner.
CONFIG = shared_config(call_timeout=2.0)
STUDENT_FILES = ("feedback.md", "feedback.html", "results.json")
DUE = "2026-12-01T20:00:00+00:00"
# Roster ids as a Classroom export gives them: each must stay out of every other student's files.
ROSTER = {"ada_reference": "ada-lovelace-42", "ben_einsum": "bbenson", "chloe_no_scale": "chloe-k",
          "noah_cheater": "noah-w", "leo_syntax_error": "leo-ortiz", "mia_infinite_loop": "mia-m"}
LATE = {"dev_softmax_axis": 2}
STAFF_NOTES = {
    "noah_cheater": ["heatmap identical to ada_reference; student admitted copying",
                     "planted results.json; README copied like chloe_no_scale's"],
    "ben_einsum": ["compare with chloe_no_scale's README before the meeting"],
    "leo_syntax_error": ["discussed with mia_infinite_loop (mia-m) in office hours"],
    "dev_softmax_axis": ["independent of emil_heads_no_transpose: different bugs"],
}
OVERRIDES = (
    "submission,test,points,comment,staff_note,by,at\n"
    # The row: a similarity decision whose comment names a classmate (staff-only as a whole).
    "noah_cheater,similarity:ada_reference,,heatmap identical to ada_reference; student admitted copying,,ta,\n"
    "noah_cheater,integrity,,,planted results.json; README copied like chloe_no_scale's,lead,\n"
    "ben_einsum,deliverables.readme,1,say what Value is in your own words,"
    "compare with chloe_no_scale's README before the meeting,ta,\n"
    "leo_syntax_error,*,1,for fixing it in office hours,discussed with mia_infinite_loop (mia-m) in office hours,ta,\n"
    "dev_softmax_axis,similarity:emil_heads_no_transpose,,independent of emil_heads_no_transpose: different bugs,,ta,\n"
)


def _student_text(out: Path, name: str) -> str:
    return "\n".join((out / name / f).read_text(encoding="utf-8") for f in STUDENT_FILES)


@pytest.fixture(scope="module")
def demo():
    root = Path(tempfile.mkdtemp(prefix="day13-demo-audiences-"))
    subs = root / "class"
    shutil.copytree(KIT / "demo" / "class", subs)
    # noah's planted paths also name a classmate's folder: his integrity flags then name ada.
    block = subs / "noah_cheater" / "block.py"
    block.write_text(block.read_text().replace('"/autograder/results")', '"/autograder/results", "../ada_reference")'))
    names = sorted(p.name.removesuffix(".zip").removesuffix(".ipynb") for p in subs.iterdir() if p.suffix != ".csv")
    (subs / "collected.csv").write_text(
        "name,source,commit,committed,status,deadline,late_days,late_basis,github_username\n"
        + "".join(f"{n},x,c,t,ok,{DUE},{LATE.get(n, 0)},push time,{ROSTER.get(n, '')}\n" for n in names))
    out = root / "out"
    out.mkdir()
    (out / "overrides.csv").write_text(OVERRIDES)
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=DAY13, zygotes=kept_zygotes()) == 0
    yield root, subs, out, names
    shutil.rmtree(root, ignore_errors=True)


def test_no_student_file_holds_a_classmate_or_a_staff_note(demo):
    _, _, out, names = demo
    notes = [n for found in STAFF_NOTES.values() for n in found]
    checked = 0
    for name in names:
        text = _student_text(out, name)
        for other in names:
            if other != name:
                assert not re.search(rf"(?<![\w-]){re.escape(other)}(?![\w-])", text), (name, other)
                if ROSTER.get(other):
                    assert not re.search(rf"(?<![\w-]){re.escape(ROSTER[other])}(?![\w-])", text), (name, other)
        for note in notes:
            assert note not in text, (name, note)
        assert "similarity" not in text.lower() and "integrity" not in text.lower(), name
        checked += 1
    assert checked == len(names) == 14
    # The staff read every note, and the decisions still count where they give points.
    report = (out / "report.html").read_text()
    import html

    for note in notes:
        assert html.escape(note) in report, note
    assert "say what Value is in your own words" in (out / "ben_einsum" / "feedback.md").read_text()
    assert "for fixing it in office hours" in (out / "leo_syntax_error" / "feedback.md").read_text()


def test_the_cheater_shows_in_the_report_not_in_anyones_feedback(demo):
    _, _, out, names = demo
    summary = (out / "summary.md").read_text()
    integrity = summary.split("## Integrity flags", 1)[1].split("\n## ", 1)[0]
    assert "noah_cheater" in integrity
    for seen in ("'results.json'", "'/autograder/results'", "30 passed", "sys.exit"):
        assert seen in integrity, seen
    # Seen at run time too, not only in the source: the file it wrote, the line it printed.
    assert "wrote 'results.json' into its own folder while graded" in integrity
    assert "printed a line that looks like a test result" in integrity
    own = _student_text(out, "noah_cheater")
    assert "could not import block.py" in own  # what he needs, in neutral words
    assert "30 passed" not in own and "/autograder/results" not in own and "printed a line" not in own
    for name in names:
        if name != "noah_cheater":
            assert "noah_cheater" not in _student_text(out, name)


def test_the_cheater_shows_on_the_review_page_in_a_browser(demo):
    executable, sync_playwright = _browser(), _playwright()
    _, subs, out, names = demo
    server = review.ReviewServer(review.Review(out, subs, None, "all", "ta", lesson=DAY13))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=ARGS, headless=True)
            page = browser.new_page()
            page.goto(server.url + "s/noah_cheater")
            folded = page.locator("details", has=page.locator("ul.flag")).first
            assert "Integrity flags (" in folded.locator("summary").inner_text()  # seen without a click
            if folded.get_attribute("open") is None:
                folded.locator("summary").click()
            flags = folded.locator("ul.flag").inner_text()
            for seen in ("results.json", "/autograder/results", "30 passed", "sys.exit"):
                assert seen in flags, (seen, flags)
            decisions = page.locator(".staff-note").all_inner_texts()
            assert any("student admitted copying" in d for d in decisions), decisions
            page.goto(server.url + "s/ada_reference")
            assert "noah" not in page.locator("h1").inner_text()
            # Every student's feedback page fits a 1280 px window (a long hint line used to widen it).
            page.set_viewport_size({"width": 1280, "height": 800})
            widths = {}
            for name in names:
                page.goto((out / name / "feedback.html").as_uri())
                widths[name] = page.evaluate("document.documentElement.scrollWidth")
            assert max(widths.values()) <= 1280, widths
            browser.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_late_policy_edit_rescores_the_demo_without_starting_a_child(demo, tmp_path, monkeypatch, capsys):
    _, subs, out, _ = demo
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    before = json.loads((copy / "dev_softmax_axis" / "results.json").read_text())["score"]
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(regrade.rubric_path(lesson=DAY13).read_text()
                      + "\n[late]\ngrace_minutes = 0\npenalty_per_day = 10\nmax_days = 3\n")

    def refuse(*args, **kwargs):
        raise AssertionError("a late-policy edit must not run student code")

    monkeypatch.setattr(run, "Zygote", refuse)
    regrade.current.cache_clear()
    try:
        capsys.readouterr()
        assert run.main(submissions=subs, out=copy, jobs=2, config=CONFIG,
                        lesson=replace(DAY13, rubric_path=rubric)) == 0  # Day 13 with a late policy
    finally:
        regrade.current.cache_clear()
    printed = capsys.readouterr().out
    assert "0 to grade" in printed and "rescore 14 from their records" in printed
    after = json.loads((copy / "dev_softmax_axis" / "results.json").read_text())["score"]
    assert after == before - 20  # two days late, 10% of 100 a day
    assert "Handed in 2 days late" in (copy / "dev_softmax_axis" / "feedback.md").read_text()

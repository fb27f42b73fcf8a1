"""One final total, said the same way everywhere: the console's progress line, grades.csv, report.html,
summary.md, feedback.md, results.json and the review page of a class with late work, a bonus, a bonus
over the maximum and overrides; and a change of the late policy rescores without running student code."""
import contextlib
import csv
import html
import io
import json
import re
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY, kept_zygotes, make_submission, shared_config  # noqa: E402

from grader.results import feedback

from grader.admin import regrade

from grader.admin import review

from grader.running import grade as run

from grader.judging import totals  # noqa: E402

from grader.lesson import load_lesson  # noqa: E402

LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage: the toy's (10 points)

CONFIG = shared_config(call_timeout=3.0)
DUE = "2026-02-10T12:00:00+00:00"
POLICY = "\n[late]\ngrace_minutes = 30\npenalty_per_day = 10\nmax_days = 3\n"


def _grades(out: Path) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


@pytest.fixture(scope="module")
def late_class():
    """dan: a softmax without the max shift (loses the large-inputs test), one day late, with a bonus that
    would take him over the maximum; eve: a softmax twice too large (a wrong number), two days late, an
    override and a bonus; fay: correct, on time, no decision."""
    root = Path(tempfile.mkdtemp(prefix="toy-totals-"))
    subs = root / "subs"
    softmax = (LESSON.solutions / "activations.py").read_text()
    shift = "    shifted = x - x.amax(dim=dim, keepdim=True)"
    make_submission(subs / "dan", {"activations.py": softmax.replace(shift, "    shifted = x")}, solutions=LESSON.solutions)
    doubled = softmax.replace("    return exps / exps.sum(", "    return 2 * exps / exps.sum(")
    make_submission(subs / "eve", {"activations.py": doubled}, solutions=LESSON.solutions)
    make_submission(subs / "fay", solutions=LESSON.solutions)
    (subs / "collected.csv").write_text(
        "name,source,commit,committed,status,deadline,late_days,late_basis\n"
        f"dan,x,c,t,ok,{DUE},1,push time\neve,x,c,t,ok,{DUE},2,push time\nfay,x,c,t,ok,{DUE},0,push time\n")
    out = root / "out"
    out.mkdir()
    (out / "overrides.csv").write_text(
        "submission,test,points,comment,staff_note,by,at\n"
        "dan,*,7,great write-up,,ta,\n"
        "eve,classifier.reference,1,the shapes are guessed,,ta,\n"
        "eve,*,2,clear README,,ta,\n")
    rubric = root / "rubric.toml"
    rubric.write_text(regrade.rubric_path(lesson=LESSON).read_text() + POLICY)
    lesson = replace(LESSON, rubric_path=rubric)  # the toy with a late policy: every stage is handed it
    console = io.StringIO()  # graded here, not by the first test: each test holds whichever worker runs it
    with contextlib.redirect_stdout(console):
        code = run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=lesson, zygotes=kept_zygotes())
    assert code == 0, console.getvalue()
    yield root, subs, out, rubric, console.getvalue()
    shutil.rmtree(root, ignore_errors=True)


def test_every_output_says_the_same_final_total(late_class):
    root, subs, out, rubric, console = late_class
    lesson = replace(LESSON, rubric_path=rubric)
    rows = _grades(out)
    summary, page = (out / "summary.md").read_text(), html.unescape((out / "report.html").read_text())
    records, _ = review.Review(out, subs, None, "all", "ta", lesson=lesson).records()
    reviewed = {r.submission: r for r in records}
    for name in ("dan", "eve", "fay"):
        total, top = rows[name]["total"], rows[name]["max_total"]
        said = f"{total}/{top}"
        assert re.search(rf"graded \d/3 {name}: {re.escape(said)} ", console), (name, said, console)
        assert re.search(rf"\b{name}\b[^\n]*\| {re.escape(total)} / {top} \|", summary), (name, total)
        assert re.search(rf">{name}</a></td><td[^>]*>{re.escape(total)} / {top}<", page), (name, total)
        assert f"**Score: {total} / {top}**" in (out / name / "feedback.md").read_text()
        assert f"Score: {total} / {top}" in html.unescape((out / name / "feedback.html").read_text())
        assert f"{json.loads((out / name / 'results.json').read_text())['score']:g}" == total
        page_of = review.render_student(review.Review(out, subs, None, "all", "ta", lesson=lesson), records,
                                        records.index(reviewed[name]), "t", "")
        assert f"<h1>{name}: {total} / {top}" in page_of
    dan, eve, fay = rows["dan"], rows["eve"], rows["fay"]
    # dan: 8 (the large-inputs test lost), bonus +7 capped to +2 (no extra credit in this rubric), one
    # day late: -1.
    assert json.loads((out / "dan" / "record.json").read_text())["total"] == 8
    assert (dan["total"], dan["max_total"], dan["penalty"]) == ("9", "10", "1")
    assert "bonus +7 (capped to +2" in summary and "1 day late: -1" in console
    assert dan["overrides"] == "* +7 (capped to +2)"
    # eve: the doubled softmax fails the activations tests; classifier.reference 3 -> 1; +2; two days late: -2.
    record = json.loads((out / "eve" / "record.json").read_text())
    automated = record["total"]
    reference = next(t["score"] for t in record["tests"] if t["name"] == "classifier.reference")
    assert reference == 3 and automated == 4
    assert float(eve["total"]) == automated - reference + 1 + 2 - 2 and eve["penalty"] == "2"
    assert (f"automated {automated:g}; overrides: classifier.reference {reference:g}→1; bonus +2; "
            "2 days late: -2") in summary
    assert (fay["total"], fay["penalty"], fay["late_days"]) == ("10", "0", "0")
    assert "fay: 10/10 (ok)\n" in console  # nothing to explain


def test_a_bonus_stops_at_the_maximum_unless_the_rubric_declares_extra_credit(late_class, monkeypatch, tmp_path):
    root, subs, graded, rubric, _ = late_class
    out = shutil.copytree(graded, tmp_path / "out")  # rescored in a copy: the other test reads the graded class
    extra = tmp_path / "rubric.toml"
    extra.write_text(rubric.read_text().replace("[meta]\n", "[meta]\nextra_credit = 3\n", 1))
    assert totals.extra_credit(lesson=replace(LESSON, rubric_path=extra)) == 3
    assert totals.extra_credit(lesson=replace(LESSON, rubric_path=rubric)) == 0
    from grader.results import classreport

    classreport.write_class(out, lesson=replace(LESSON, rubric_path=extra))
    assert _grades(out)["dan"]["total"] == "12"  # 8 + 5 of the 7 asked, -1 late
    feedback_text = (out / "dan" / "feedback.md").read_text()
    assert "**Score: 12 / 10**" in feedback_text and "capped to +5" in feedback_text

"""One final total, said the same way everywhere: the console's progress line, grades.csv, report.html,
summary.md, feedback.md, results.json and the review page of a class with late work, a bonus, a bonus
over the maximum and overrides; and a change of the late policy rescores without running student code."""
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
from engine_helpers import KIT, make_submission, uid_base_for_tests  # noqa: E402

from grader.results import feedback

from grader.admin import regrade

from grader.admin import review

from grader.running import grade as run

from grader.judging import totals  # noqa: E402
from grader.sandbox import SandboxConfig  # noqa: E402

from grader.lesson import load_lesson  # noqa: E402

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage

CONFIG = SandboxConfig(call_timeout=3.0, uid_base=uid_base_for_tests(13))
DUE = "2026-02-10T12:00:00+00:00"
POLICY = "\n[late]\ngrace_minutes = 30\npenalty_per_day = 10\nmax_days = 3\n"


def _grades(out: Path) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


@pytest.fixture(scope="module")
def late_class():
    """dan: correct, one day late, with a bonus that would take him over the maximum; eve: a wrong
    table (bob's doubled positional encoding), two days late, an override and a bonus; fay: correct,
    on time, no decision."""
    root = Path(tempfile.mkdtemp(prefix="day13-totals-"))
    subs = root / "subs"
    make_submission(subs / "dan")
    doubled = (KIT / "solutions" / "day13" / "positional.py").read_text().replace("    return pe\n", "    return 2 * pe\n")
    make_submission(subs / "eve", {"positional.py": doubled})
    make_submission(subs / "fay")
    (subs / "collected.csv").write_text(
        "name,source,commit,committed,status,deadline,late_days,late_basis\n"
        f"dan,x,c,t,ok,{DUE},1,push time\neve,x,c,t,ok,{DUE},2,push time\nfay,x,c,t,ok,{DUE},0,push time\n")
    out = root / "out"
    out.mkdir()
    (out / "overrides.csv").write_text(
        "submission,test,points,comment,staff_note,by,at\n"
        "dan,*,15,great write-up,,ta,\n"
        "eve,deliverables.analysis,1,half of it restates the handout,,ta,\n"
        "eve,*,2,clear README,,ta,\n")
    rubric = root / "rubric.toml"
    rubric.write_text(regrade.rubric_path(lesson=DAY13).read_text() + POLICY)
    yield root, subs, out, rubric
    shutil.rmtree(root, ignore_errors=True)


def test_every_output_says_the_same_final_total(late_class, monkeypatch, capsys):
    root, subs, out, rubric = late_class
    lesson = replace(DAY13, rubric_path=rubric)  # Day 13 with a late policy: every stage is handed it
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=lesson) == 0
    console = capsys.readouterr().out
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
    # dan: 90 (correct code, no deliverables), bonus +15 capped to +10 (no extra credit in this
    # rubric), one day late: -10.
    assert json.loads((out / "dan" / "record.json").read_text())["total"] == 90
    assert (dan["total"], dan["max_total"], dan["penalty"]) == ("90", "100", "10")
    assert "bonus +15 (capped to +10" in summary and "1 day late: -10" in console
    assert dan["overrides"] == "* +15 (capped to +10)"
    # eve: the doubled table fails positional tests; analysis 2 -> 1; +2; two days late: -20.
    record = json.loads((out / "eve" / "record.json").read_text())
    automated = record["total"]
    analysis = next(t["score"] for t in record["tests"] if t["name"] == "deliverables.analysis")
    assert float(eve["total"]) == automated - analysis + 1 + 2 - 20 and eve["penalty"] == "20"
    assert (f"automated {automated:g}; overrides: deliverables.analysis {analysis:g}→1; bonus +2; "
            "2 days late: -20") in summary
    assert (fay["total"], fay["penalty"], fay["late_days"]) == ("90", "0", "0")
    assert "fay: 90/100 (ok)\n" in console  # nothing to explain


def test_a_bonus_stops_at_the_maximum_unless_the_rubric_declares_extra_credit(late_class, monkeypatch, tmp_path):
    root, subs, out, rubric = late_class
    extra = tmp_path / "rubric.toml"
    extra.write_text(rubric.read_text().replace("[meta]\n", "[meta]\nextra_credit = 3\n", 1))
    assert totals.extra_credit(lesson=replace(DAY13, rubric_path=extra)) == 3
    assert totals.extra_credit(lesson=replace(DAY13, rubric_path=rubric)) == 0
    from grader.results import classreport

    classreport.write_class(out, lesson=replace(DAY13, rubric_path=extra))
    assert _grades(out)["dan"]["total"] == "93"  # 90 + 13 of the 15 asked, -10 late
    feedback_text = (out / "dan" / "feedback.md").read_text()
    assert "**Score: 93 / 100**" in feedback_text and "capped to +13" in feedback_text

"""README.md's and demo/README.md's example outputs are what the stored real run printed and wrote
(grader/docs.py). Fast: compares with docs/run-record.json, grades nothing."""
import json

from grader import docs


def test_the_example_outputs_match_the_stored_run():
    run = json.loads(docs.RECORD.read_text(encoding="utf-8"))
    assert docs.stale(run) == [], "run `python -m grader.docs` and commit what it changes"
    assert set(docs.blocks(run)) == {m.group("name") for path in docs.FILES
                                     for m in docs.BLOCK.finditer(path.read_text(encoding="utf-8"))}


def test_a_hand_edited_score_or_an_old_run_is_caught():
    run = json.loads(docs.RECORD.read_text(encoding="utf-8"))
    readme = docs.FILES[0].read_text(encoding="utf-8")
    chloe = next(line for line in run["course_grade_output"] if " chloe: " in line)
    edited = readme.replace(chloe, chloe.replace("chloe: ", "chloe: 1"), 1)
    assert edited != readme and docs.render(edited, run) == readme
    older = dict(run, course_grades_csv=run["course_grades_csv"].replace(",penalty", "", 1))
    assert any("columns" in problem for problem in docs.stale(older))

"""README.md's and demo/README.md's example outputs are what the stored real run printed and wrote
(grader/devtools/examples.py): compares with docs/run-record.json, grades nothing; rebuilds the release and the
Gradescope zip to check their figures."""
import json

from grader.devtools import examples as docs


def test_the_example_outputs_match_the_stored_run():
    run = json.loads(docs.RECORD.read_text(encoding="utf-8"))
    assert docs.stale(run) == [], "run `python -m grader.devtools.examples` and commit what it changes"
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


def test_the_stored_release_and_gradescope_figures_are_what_the_kit_builds_now(tmp_path):
    """The README's file counts and sizes came out of date twice (a release of 27 files said 23): the
    stored run must still be what `grader release` and `grader gradescope` print today."""
    run = json.loads(docs.RECORD.read_text(encoding="utf-8"))
    assert docs._run(tmp_path, "release", "--out", "dist") == run["release_output"], \
        "run `python -m grader.devtools.examples` and commit what it changes"
    import re

    def figures(line: str) -> tuple[int, int]:
        files, kib = re.search(r"\((\d+) files, (\d+) KiB\)", line).groups()
        return int(files), int(kib)

    now, stored = figures(docs._run(tmp_path, "gradescope", "--out", "dist")[0]), figures(run["gradescope_output"][0])
    # Every edit of the engine changes the zip's size a little; its file count and size within 15% must hold.
    assert now[0] == stored[0] and abs(now[1] - stored[1]) <= 0.15 * stored[1], \
        f"the zip is {now}, the README says {stored}: run `python -m grader.devtools.examples` and commit what it changes"

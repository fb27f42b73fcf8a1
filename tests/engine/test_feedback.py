"""grader/results/feedback.py: what a student is told (results.json, feedback.md), from records made here."""
from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import pytest

from grader.results import feedback

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from report_records import COLUMNS_W, EXPECTED_W, HINT, LESSON, grade_class, make_record, make_test  # noqa: E402


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_class(tmp_path_factory.mktemp("out"))


def test_results_json_has_the_gradescope_fields(graded):
    data = json.loads((graded / "Adam" / "results.json").read_text())
    assert data["score"] == 3
    assert isinstance(data["execution_time"], (int, float))
    assert data["output"].startswith("Score 3/10")
    assert len(data["tests"]) == 5
    for t in data["tests"]:
        assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(t)
        assert t["status"] in ("passed", "failed")
        assert t["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
    assert sum(t["score"] for t in data["tests"]) == pytest.approx(data["score"])
    failed = [t for t in data["tests"] if t["status"] == "failed"]
    assert [t["score"] for t in failed] == [0, 0, 0]
    assert "max abs error" in failed[0]["output"]


def test_feedback_shows_expected_got_hint_and_faults_grouped_by_component(graded):
    text = (graded / "Adam" / "feedback.md").read_text()
    assert "**Score: 3 / 10**" in text
    assert "| activations | 2 / 6 | 1 / 3 |" in text
    assert f"expected: {EXPECTED_W}" in text and f"got:      {COLUMNS_W}" in text
    assert HINT in text
    assert "## activations: 2 / 6" in text and "## classifier: 1 / 4" in text
    assert "row 0 of the probabilities sums to 2.18, not 1" in text
    headings = re.findall(r"^## (\w+):", text, flags=re.M)
    assert headings == list(LESSON.components)

    timeout = (graded / "bob_timeout" / "feedback.md").read_text()
    assert "status: timeout" in timeout
    assert "classifier.py: forward ran past the 2 s limit" in timeout


def test_a_recognised_mistake_is_data_and_every_medium_words_it_from_the_rubric(tmp_path):
    """The record keeps what the test said and the mistake's id; the words are chosen by id when the
    files are written (never kept in the output, never looked for in it), the same in every medium."""
    words = "Softmax ran over the query axis (handout §3)."
    record = make_record("lee")
    record.tests[0] = make_test("activations.worked_values", 0, 2, "expected 0.4, got 0.5", "wrong_axis")
    files = feedback.student_files(record, words=feedback.Words(hints={"wrong_axis": words}), lesson=LESSON)
    assert f"```text\nexpected 0.4, got 0.5\n```\n\n**Likely misconception:** {words}" in files["feedback.md"]
    assert f"<pre>expected 0.4, got 0.5</pre>\n<p><b>Likely misconception:</b> {html.escape(words)}</p>" \
        in files["feedback.html"]
    shown = json.loads(files["results.json"])["tests"][0]["output"]
    assert shown == f"expected 0.4, got 0.5\n\nLikely misconception: {words}"
    # Other words for the same id (a rubric edited since): the files follow the rubric, the record is as it was.
    assert "Another wording." in feedback.feedback_markdown(record, feedback.Words(hints={"wrong_axis": "Another wording."}), lesson=LESSON)
    assert record.tests[0].output == "expected 0.4, got 0.5"
    # An id the rubric no longer words is shown as the id; a passed test says nothing of a mistake.
    assert "Likely misconception: `wrong_axis`" in feedback.feedback_markdown(record, feedback.Words(), lesson=LESSON)
    record.tests[1].hint_id = "wrong_axis"
    assert feedback.student_output(record.tests[1], feedback.Words(hints={"wrong_axis": words})) == ""


def test_a_long_output_is_cut_but_the_mistake_is_still_named():
    record = make_record("lee")
    record.tests[0] = make_test("activations.worked_values", 0, 2, "x" * 50_000, "wrong_axis")
    text = feedback.student_output(record.tests[0], feedback.Words(hints={"wrong_axis": "Scale the scores."}))
    assert "more characters cut)" in text and text.endswith("Likely misconception: Scale the scores.")
    assert feedback.student_output(record.tests[0], feedback.Words(), cut=False) == "x" * 50_000


def test_student_text_cannot_break_out_of_the_feedback_fence():
    record = make_record("mo")
    record.tests[0] = make_test("activations.worked_values", 0, 2, "```\n# Injected heading\n")
    text = feedback.feedback_markdown(record, lesson=LESSON)
    assert "````text\n```\n# Injected heading\n````" in text


def test_rubric_hints_are_found_whatever_the_table_layout(tmp_path):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text('[activations.worked_values]\npoints = 2\nhint = "scale it"\n\n'
                      '[[catalogue]]\nid = "wrong_axis"\nhint = "softmax over keys"\n\n'
                      '[hints."blk.swap_ln"]\ntext = "Post-LN normalises after the add"\n'
                      '[hints]\nflat = "a plain string also works"\n')
    hints = feedback.hint_texts(rubric)
    assert hints["activations.worked_values"] == "scale it"
    assert hints["wrong_axis"] == "softmax over keys"
    assert hints["blk.swap_ln"] == "Post-LN normalises after the add"
    assert hints["flat"] == "a plain string also works"
    assert feedback.hint_texts(tmp_path / "missing.toml") == {}


def test_a_lessons_rubric_gives_a_text_for_every_catalogue_hint():
    """hint_texts reads a lesson's rubric as the lesson does (each real lesson's own catalogue is
    checked with it, tests/<lesson>/test_graders.py)."""
    import tomllib

    rubric = LESSON.rubric_path
    ids = tomllib.loads(rubric.read_text()).get("hints", {})
    hints = feedback.hint_texts(rubric)
    assert hints == LESSON.hints
    assert ids and all(hints.get(i) for i in ids)


def test_a_huge_test_output_is_cut_and_says_so(tmp_path):
    record = make_record("sam")
    record.tests[0] = make_test("activations.worked_values", 0, 2, "x" * 50_000)
    feedback.write_submission(tmp_path, record, lesson=LESSON)
    output = json.loads((tmp_path / "sam" / "results.json").read_text())["tests"][0]["output"]
    assert len(output) < 7000 and output.endswith("more characters cut)")
    assert "more characters cut)" in (tmp_path / "sam" / "feedback.md").read_text()


def test_feedback_shows_one_crash_once_and_points_with_two_decimals():
    record = make_record("kim")
    crash = "softmax raised RuntimeError: dimension out of range\n  at activations.py:9"
    record.tests[0] = make_test("activations.worked_values", 0, 2, crash, title="worked example")
    record.tests[2] = make_test("activations.reference", 0, 2, crash, title="softmax along any dim")
    record.tests[4] = make_test("classifier.reference", 3 * 5 / 9, 3)  # 1.6666...
    text = feedback.feedback_markdown(record, lesson=LESSON)
    assert text.count("dimension out of range") == 1, text
    assert "### ✗ worked example, softmax along any dim (the same message for 2 tests)" in text
    assert "1.67 / 3" in text
    assert not re.search(r"\d\.\d{3}", text), "points with more than two decimals"


def test_notes_of_a_submission_graded_as_usual_are_not_an_alarm():
    """A correct notebook's note ("graded the code cells of toy.ipynb") is how it was read, not a fault."""
    record = make_record("nb", notes=["graded the code cells of toy.ipynb"])
    text = feedback.feedback_markdown(record, lesson=LESSON)
    assert "## Notes on grading" in text and "graded the code cells of toy.ipynb" in text
    assert "What went wrong" not in text
    broken = make_record("crash", status="crashed", notes=["classifier.py crashed its process"])
    assert "## What went wrong while grading" in feedback.feedback_markdown(broken, lesson=LESSON)



def test_a_grading_run_writes_each_student_file_once(tmp_path, monkeypatch):
    """The worker keeps each record; the class stage writes the student's files once, with the overrides
    already applied (they used to be written as graded, then again with the decisions); a run with
    nothing new writes none, and a file gone missing is written again from the record."""
    from grader.results import classreport, storage

    written = []
    real = storage.write_atomic

    flushed = []  # (file, made durable on its own)

    def counting(path, data, **options):
        written.append(Path(path).relative_to(tmp_path).as_posix())
        flushed.append((written[-1], options.get("durable", True)))
        real(path, data, **options)

    monkeypatch.setattr(feedback, "write_atomic", counting)
    monkeypatch.setattr(storage, "write_atomic", counting)
    real_sync = storage.sync_folder
    monkeypatch.setattr(classreport, "sync_folder", lambda folder: (flushed.append(("sync", folder)), real_sync(folder)))
    (tmp_path / "overrides.csv").write_text("submission,test,points,comment,staff_note,by,at\n"
                                            "lee,activations.reference,2,fine,,ta,\n")
    for name in ("lee", "max"):
        feedback.keep_record(tmp_path, make_record(name, buggy=True))
    assert sorted(written) == ["lee/record.json", "max/record.json"]
    classreport.write_class(tmp_path, lesson=LESSON)
    for name in ("lee", "max"):
        for file in ("results.json", "feedback.md", "feedback.html"):
            assert written.count(f"{name}/{file}") == 1, (name, file, written)
    assert "fine" in (tmp_path / "lee" / "feedback.md").read_text()
    # The students' files skip their own fsync; one sync of OUT after the last of them makes them durable,
    # and the records, which resume and merge trust, are still made durable one by one.
    student = [i for i, (file, _) in enumerate(flushed) if file.endswith(("results.json", "feedback.md", "feedback.html"))]
    assert student and all(flushed[i][1] is False for i in student)
    assert all(durable for file, durable in flushed if file.endswith("record.json"))
    syncs = [i for i, entry in enumerate(flushed) if entry == ("sync", tmp_path)]
    assert syncs == [len(flushed) - 1] and syncs[0] > student[-1]
    written.clear()
    (tmp_path / "max" / "feedback.html").unlink()
    classreport.write_class(tmp_path, lesson=LESSON)
    assert [w for w in written if "/" in w and not w.startswith("_")] == ["max/feedback.html"]


def test_a_grading_run_of_a_class_writes_each_student_file_once(toy, tmp_path, monkeypatch):
    """End to end, in the sandbox: `grade` writes each submission's record once as it is graded and each
    student file once, at the class stage; a second run with nothing changed writes none of them."""
    import shutil

    from engine_helpers import TOY, kept_zygotes, shared_config

    from grader.results import storage
    from grader.running import grade as run

    subs, out = tmp_path / "subs", tmp_path / "out"
    for name in ("honest", "broken"):
        shutil.copytree(TOY / "solutions", subs / name, ignore=shutil.ignore_patterns("__pycache__"))
    (subs / "broken" / "classifier.py").write_text("class Classifier(:\n", encoding="utf-8")
    written = []
    real = storage.write_atomic

    def counting(path, data, **options):
        written.append(Path(path).relative_to(out).as_posix())
        real(path, data, **options)

    monkeypatch.setattr(feedback, "write_atomic", counting)
    monkeypatch.setattr(storage, "write_atomic", counting)
    config = shared_config(call_timeout=5.0)
    assert run.main(submissions=str(subs), out=str(out), jobs=1, config=config, lesson=toy, zygotes=kept_zygotes()) == 0
    for name in ("honest", "broken"):
        for file in ("record.json", "results.json", "feedback.md", "feedback.html"):
            assert written.count(f"{name}/{file}") == 1, (name, file, sorted(written))
    written.clear()
    assert run.main(submissions=str(subs), out=str(out), jobs=1, config=config, lesson=toy, zygotes=kept_zygotes()) == 0
    assert not [w for w in written if w.split("/")[0] in ("honest", "broken")], written


def test_a_read_of_the_graders_files_is_worded_by_the_engine_and_a_library_by_the_lessons_message():
    """A part that opened the grader's own files is told so in the engine's words; the lesson's
    forbidden_message is about reaching a library (its calls, or its source files), and names only those."""
    from grader.results.records import TestResult
    from grader.running.forbidden import KIT_FILES, KIT_FILES_SENTENCE, LIBRARY_FILES

    words = feedback.Words(forbidden="Your code reaches {names}. Write softmax yourself.")

    def said(forbidden):
        test = TestResult(name="activations.softmax", component="activations", score=0.0, max_score=2.0,
                          status="failed", forbidden=forbidden)
        return feedback.advice(test, words).forbidden

    assert said([KIT_FILES]) == KIT_FILES_SENTENCE and "softmax" not in said([KIT_FILES])
    assert said(["softmax"]) == "Your code reaches softmax. Write softmax yourself."
    assert said([LIBRARY_FILES]) == f"Your code reaches {LIBRARY_FILES}. Write softmax yourself."
    assert said(["softmax", KIT_FILES]) == f"Your code reaches softmax. Write softmax yourself. {KIT_FILES_SENTENCE}"


def test_files_nested_a_level_too_deep_are_told_where_they_are(toy, tmp_path):
    """Found on a held-out zip with its files two folders down: every part said only that the file is missing at
    the top level. The child looks below its copy and says where the file is, so the student knows what to move."""
    import shutil

    from engine_helpers import TOY, kept_zygotes, shared_config

    from grader.running import grade as run

    subs, out = tmp_path / "subs", tmp_path / "out"
    shutil.copytree(TOY / "solutions", subs / "deep" / "work" / "hw", ignore=shutil.ignore_patterns("__pycache__"))
    (subs / "deep" / "notes.txt").write_text("the work is below\n", encoding="utf-8")
    assert run.main(submissions=str(subs), out=str(out), jobs=1, config=shared_config(call_timeout=5.0), lesson=toy,
                    zygotes=kept_zygotes()) == 0
    record = json.loads((out / "deep" / "record.json").read_text(encoding="utf-8"))
    said = " ".join(t["output"] for t in record["tests"])
    module = toy.modules[0]
    assert f"it has work/hw/{module}.py: move it, and the files beside it, to the top level" in said, said[:800]


def test_a_file_under_another_case_or_inside_an_inner_zip_is_told_so(toy, tmp_path):
    """Held-out s59: a contract file named with a capital first letter, and a zip that held only another zip, were
    told only that the files were missing, though the student had handed them in. The message says what the folder
    holds instead."""
    import shutil
    import zipfile

    from engine_helpers import TOY, kept_zygotes, shared_config

    from grader.running import grade as run

    subs, out = tmp_path / "subs", tmp_path / "out"
    first = toy.modules[0]
    shutil.copytree(TOY / "solutions", subs / "cased", ignore=shutil.ignore_patterns("__pycache__"))
    (subs / "cased" / f"{first}.py").rename(subs / "cased" / f"{first.capitalize()}.py")
    inner = tmp_path / "work.zip"
    with zipfile.ZipFile(inner, "w") as archive:
        for path in sorted((TOY / "solutions").glob("*.py")):
            archive.write(path, path.name)
    with zipfile.ZipFile(subs / "zipped.zip", "w") as archive:
        archive.write(inner, "work.zip")
    assert run.main(submissions=str(subs), out=str(out), jobs=1, config=shared_config(call_timeout=5.0), lesson=toy,
                    zygotes=kept_zygotes()) == 0

    def said(name):
        record = json.loads((out / name / "record.json").read_text(encoding="utf-8"))
        return " ".join(t["output"] for t in record["tests"])

    assert f"it has {first.capitalize()}.py: file names are case-sensitive here, so rename it {first}.py" in said("cased")
    assert "it has work.zip, a zip inside the submission" in said("zipped"), said("zipped")[:800]


def test_a_childs_command_line_holds_no_lesson_policy(toy, tmp_path):
    """Found by a red team: every child is a fork of the zygote, and its /proc/self/cmdline held the zygote's JSON
    request (the lesson's forbidden policy, the kit's paths), which an error message carried into the student's own
    feedback. The request now comes on the zygote's stdin."""
    import shutil

    from engine_helpers import TOY, kept_zygotes, shared_config

    from grader.running import grade as run

    subs, out = tmp_path / "subs", tmp_path / "out"
    shutil.copytree(TOY / "solutions", subs / "reader", ignore=shutil.ignore_patterns("__pycache__"))
    with open(subs / "reader" / "activations.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef softmax(x, dim=-1):\n"
                "    raise RuntimeError('CMDLINE ' + open('/proc/self/cmdline', 'rb').read().replace(b'\\\\0', b' ')"
                ".decode(errors='replace'))\n")
    assert run.main(submissions=str(subs), out=str(out), jobs=1, config=shared_config(call_timeout=5.0), lesson=toy,
                    zygotes=kept_zygotes()) == 0
    said = " ".join(t["output"] for t in json.loads((out / "reader" / "record.json").read_text())["tests"])
    assert "CMDLINE " in said and "grader.sandbox" in said, said[:600]  # the child did read its command line
    shown = said[said.index("CMDLINE "):][:400]
    assert "forbidden" not in shown and "lesson" not in shown and "{" not in shown, shown


def test_a_keyboard_interrupt_at_import_is_an_import_failure_remembered(toy, tmp_path):
    """Found by a red team: KeyboardInterrupt raised while a module imports was not remembered as a failed import, so
    the module was imported again on every call (a slow import then cost every call), and the row said nothing of it."""
    import shutil

    from engine_helpers import TOY, kept_zygotes, shared_config

    from grader.running import grade as run

    subs, out = tmp_path / "subs", tmp_path / "out"
    shutil.copytree(TOY / "solutions", subs / "interrupted", ignore=shutil.ignore_patterns("__pycache__"))
    module = toy.modules[0]
    path = subs / "interrupted" / f"{module}.py"
    path.write_text("raise KeyboardInterrupt('at import')\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    assert run.main(submissions=str(subs), out=str(out), jobs=1, config=shared_config(call_timeout=5.0), lesson=toy,
                    zygotes=kept_zygotes()) == 0
    record = json.loads((out / "interrupted" / "record.json").read_text(encoding="utf-8"))
    assert record["status"] == f"import-error: {module}.py", record["status"]
    assert any(f"could not import {module}.py" in note for note in record["notes"]), record["notes"]


def test_a_verdict_printed_after_a_screenful_of_output_is_flagged_for_the_staff_only(toy, tmp_path):
    """Found by a red team: only the first bytes of a child's output were looked through, so a fake verdict printed
    after 2,000 bytes of progress lines raised no flag. The last bytes are read too; the flag stays the staff's."""
    import shutil

    from engine_helpers import TOY, kept_zygotes, shared_config

    from grader.running import grade as run

    subs, out = tmp_path / "subs", tmp_path / "out"
    shutil.copytree(TOY / "solutions", subs / "loud", ignore=shutil.ignore_patterns("__pycache__"))
    path = subs / "loud" / f"{toy.modules[0]}.py"
    path.write_text("for _ in range(400):\n    print('progress ........')\nprint('All tests passed: 100/100')\n"
                    + path.read_text(encoding="utf-8"), encoding="utf-8")
    assert run.main(submissions=str(subs), out=str(out), jobs=1, config=shared_config(call_timeout=5.0), lesson=toy,
                    zygotes=kept_zygotes()) == 0
    record = json.loads((out / "loud" / "record.json").read_text(encoding="utf-8"))
    assert any("All tests passed: 100/100" in flag for flag in record["flags"]), record["flags"]
    for name in ("feedback.md", "feedback.html", "results.json"):
        assert "looks like a test result" not in (out / "loud" / name).read_text(encoding="utf-8"), name


def test_an_error_met_in_some_cases_of_one_test_says_which_cases_ran_right():
    """A test whose code raised in one of its cases says in which others it ran and was right; an error told once
    for several tests keeps to the error (each test's cases would split it into one block a test)."""
    import dataclasses

    from grader.results.records import SubmissionResult

    error = 'RuntimeError while running forward: mat1 and mat2 must have the same dtype\n  File "classifier.py", line 3'
    cases = {"id": "only_with", "conditions": ["float64"], "right_with": ["B=2", "T=1"]}
    words = feedback.Words(facts={"only_with": "Right in these cases: {right_with}. Wrong in these: {conditions}."})

    def raised(name, facts):
        return dataclasses.replace(make_test(name, 0, 2, error), advice="raised", facts=facts)

    alone = SubmissionResult(submission="kai", source="kai/", tests=[
        raised("classifier.reference", [cases]), make_test("activations.reference", 2, 2)])
    text = feedback.feedback_markdown(alone, words, lesson=LESSON)
    assert "Right in these cases: B=2; T=1. Wrong in these: float64." in text and text.count("mat1 and mat2") == 1
    shared = SubmissionResult(submission="kai", source="kai/", tests=[
        raised("classifier.reference", [cases]), raised("classifier.shape", [{**cases, "right_with": ["T=1"]}])])
    text = feedback.feedback_markdown(shared, words, lesson=LESSON)
    assert text.count("mat1 and mat2") == 1 and "(the same message for 2 tests)" in text
    assert "Right in these cases" not in text

"""A failed test's words are data on its record: the scorer keeps what the test said, and which of the
rubric's words apply (a test's own hint, what the numbers show, the handout section, the forbidden-library
message); grader/results/feedback.py words them from the rubric when the files are written. Nothing the
scorer wrote is parsed or swapped back out of a test's output (a rescore changes numbers, never text)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from grader.admin import regrade
from grader.judging import score
from grader.lesson import load_lesson
from grader.results import feedback
from grader.results.document import md_inline
from grader.results.records import SubmissionResult, TestResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import KIT, REFERENCE, make_submission  # noqa: E402

DAY13 = load_lesson("day13")
RUBRIC_WORDS = ("Hint", "What your numbers show", "What this test checks is in the handout", "Your code reaches",
                *feedback.FIRST.values())


def _doubled_table(tmp_path: Path) -> Path:
    # A table twice too large: a wrong number no catalogue bug names, so the rubric's hint applies.
    doubled = (KIT / "solutions" / "day13" / "positional.py").read_text().replace("    return pe\n",
                                                                                 "    return 2 * pe\n")
    return make_submission(tmp_path / "bob", {"positional.py": doubled}, solutions=REFERENCE)


def test_the_scorer_writes_no_rubric_words_into_an_output(tmp_path):
    result = score.grade_in_process(_doubled_table(tmp_path), "bob", lesson=DAY13)
    failed = [t for t in result.tests if t.status == "failed"]
    assert failed
    for t in failed:
        assert not any(w in t.output for w in RUBRIC_WORDS), (t.name, t.output)
        assert set(t.called) & set(DAY13.graded_names[t.component]), (t.name, t.called)  # the review page's place
    words = feedback.Words.of(DAY13.rubric())
    hinted = [t for t in failed if t.advice == "numbers" and "Hint (" in feedback.student_output(t, words)]
    assert hinted, [feedback.student_output(t, words) for t in failed]
    entry = DAY13.rubric()["positional"][hinted[0].name.split(".")[1]]
    shown = feedback.student_output(hinted[0], words)
    assert shown.startswith(hinted[0].output) and entry["hint"] in shown


def test_what_to_fix_first_is_data_too(tmp_path):
    """A part still a stub, a file that does not import: the record says which, the files say what to do."""
    folder = make_submission(tmp_path / "stub", {
        "positional.py": (KIT / "assignments" / "day13" / "positional.py").read_text(),
        "block.py": "class TransformerBlock(:\n"}, solutions=REFERENCE)
    result = score.grade_in_process(folder, "stub", lesson=DAY13)
    kinds = {t.component: t.advice for t in result.tests if t.status == "failed"}
    assert kinds.get("positional") == "unfinished" and kinds.get("block") == "import", kinds
    words = feedback.Words.of(DAY13.rubric())
    for t in result.tests:
        if t.advice in feedback.FIRST:
            assert feedback.FIRST[t.advice] not in t.output
            assert feedback.student_output(t, words) == f"{t.output}\n\n{feedback.FIRST[t.advice]}"


def test_a_failed_deliverable_keeps_its_message_and_its_hint_is_data(tmp_path):
    table = DAY13.rubric()[DAY13.deliverables_component]
    check_id, entry = next((k, v) for k, v in table.items() if isinstance(v, dict) and v.get("hint"))
    failed = dataclasses.make_dataclass("Check", ["id", "passed", "message"])(check_id, False, "the file is blank")
    [test] = [t for t in score._deliverables(tmp_path, DAY13, lambda _: [failed]) if t.status == "failed"]
    assert test.output == "the file is blank" and test.advice == "hint"
    words = feedback.Words.of(DAY13.rubric())
    assert feedback.student_output(test, words) == f"the file is blank\n\nHint: {entry['hint']}"
    assert f"**Hint:** {md_inline(entry['hint'])}" in feedback.feedback_markdown(
        SubmissionResult(submission="x", tests=[test]), words, lesson=DAY13)


def test_library_attention_is_named_by_data_and_worded_by_the_rubric(tmp_path):
    folder = make_submission(tmp_path / "lib", {"self_attention.py": (KIT / "solutions" / "day13" / "self_attention.py")
                                                .read_text() + "\nfrom torch.nn.functional import scaled_dot_product_attention\n"},
                             solutions=REFERENCE)
    result = score.grade_in_process(folder, "lib", lesson=DAY13)
    blamed = [t for t in result.tests if t.forbidden]
    assert blamed and all(t.output == "" and t.status == "failed" for t in blamed)
    message = DAY13.rubric()["meta"]["forbidden_message"]
    said = feedback.student_output(blamed[0], feedback.Words.of(DAY13.rubric()))
    assert said.startswith(message.format(names=", ".join(blamed[0].forbidden)))


def test_a_rescore_changes_points_and_never_the_text():
    result = SubmissionResult(submission="x", tests=[
        TestResult(name="a.one", component="a", score=2, max_score=2, status="passed"),
        TestResult(name="a.two", component="a", score=0, max_score=3, status="failed", output="got 1",
                   advice="numbers", facts=[{"id": "score_scale"}]),
        TestResult(name="a.three", component="a", score=0, max_score=3, status="failed", output="",
                   forbidden=["torch.nn.MultiheadAttention"])])
    old = {"a": {"one": {"points": 2}, "two": {"points": 3, "hint": "old words", "section": "§3", "when": ["score_scale"]},
                 "three": {"points": 3}}, "meta": {"forbidden_message": "You reach {names}."}}
    new = {"a": {"one": {"points": 4}, "two": {"points": 1, "hint": "new words", "section": "§4", "when": ["score_scale"]},
                 "three": {"points": 2}}, "meta": {"forbidden_message": "Not {names}, please."}}
    before = [t.output for t in result.tests]
    assert regrade.rescore(result, old, new)
    assert [(t.score, t.max_score) for t in result.tests] == [(4, 4), (0, 1), (0, 2)]
    assert [t.output for t in result.tests] == before
    words = feedback.Words.of(new)
    assert feedback.student_output(result.tests[1], words) == "got 1\n\nHint (§4): new words"
    assert feedback.student_output(result.tests[2], words) == "Not torch.nn.MultiheadAttention, please."
    assert not regrade.rescore(result, old, {"a": {"one": {"points": 1}}})

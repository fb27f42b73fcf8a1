"""Day 13's shipped release policy (its rubric's [visibility]): hidden tests are withheld until the due
date, the deliverables' checks are shown at once."""
from grader.lesson import load_lesson
from grader.results import feedback


def test_the_shipped_default_withholds_hidden_tests_until_the_due_date():
    visibility = load_lesson("day13").visibility
    assert feedback.visibility_of("self_attention.worked_values", "self_attention", visibility) == "after_due_date"
    assert feedback.visibility_of("block.forward", "block", visibility) == "after_due_date"
    assert feedback.visibility_of("deliverables.analysis", "deliverables", visibility) == "visible"

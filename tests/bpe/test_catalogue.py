"""The BPE bug catalogue as data: every patch applies to the current reference, and every entry has
its hint and names a hidden test the rubric knows."""
import tomllib

import pytest

from grader.bpe.catalogue import BUGS
from grader.judging import mutants
from grader.lesson import rubric_components

from .helpers import LESSON, REFERENCE


@pytest.mark.parametrize("bug", BUGS, ids=[b.id for b in BUGS])
def test_every_patch_applies_once_and_changes_the_code(bug):
    patched = mutants.apply(bug, REFERENCE)
    original = {p.name: p.read_text(encoding="utf-8") for p in REFERENCE.glob("*.py")}
    assert patched != original


def test_every_bug_has_a_hint_and_a_known_test():
    rubric = tomllib.loads((LESSON / "rubric.toml").read_text(encoding="utf-8"))
    assert rubric_components(rubric) == ("training", "tokenizer")
    for bug in BUGS:
        component, test = bug.test.split(".")
        assert bug.component == component in rubric_components(rubric), bug.id
        assert test in rubric[component], f"{bug.id}: no [{bug.test}] in the rubric"
        assert rubric["hints"][bug.id]["text"], bug.id
    assert set(rubric["hints"]) == {b.id for b in BUGS}, "a hint without its bug (or a bug without its hint)"
    assert len({b.id for b in BUGS}) == len(BUGS)

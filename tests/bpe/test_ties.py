"""A training whose first differing merge is a tie is told so, from the grader's own counts on the test's text
(grader/bpe/tests/ties.py); a training that differs for another reason is not (held-out s60: ties broken on the
tokens' ids cost most of the training tests, titled for other topics, and nothing named the tie)."""
from __future__ import annotations

import ast
from pathlib import Path

from grader.admin import killrate
from grader.bpe.tests import ties
from grader.lesson import load_lesson

BPE = load_lesson("bpe")
TIE_RULE = "        best = max(pairs, key=lambda pair: (pairs[pair], pair))  # the most frequent; ties: the greatest pair\n"


def _variant(tmp_path: Path, name: str, find: str, replace: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for source in BPE.solutions.glob("*.py"):
        text = source.read_text(encoding="utf-8")
        if source.name == "training.py":
            assert text.count(find) == 1, "the reference changed: update this edit"
            text = text.replace(find, replace)
        (folder / source.name).write_text(text, encoding="utf-8")
    return folder


def _facts(folder: Path) -> list[dict]:
    graded = killrate.grade(folder, folder.name, lesson=BPE)
    return [f for t in graded.tests if t.component == "training" for f in t.facts]


def test_a_tie_broken_another_way_is_named_with_its_counts(tmp_path):
    # Ties on the second token first: a rule of its own, which no catalogued mistake's numbers match.
    folder = _variant(tmp_path, "second_first", TIE_RULE,
                      TIE_RULE.replace("(pairs[pair], pair)", "(pairs[pair], pair[1], pair[0])"))
    found = [f for f in _facts(folder) if f["id"] == "merge_tie"]
    assert found and all(f["count"] >= 1 and f["expected"] != f["got"] for f in found), found


def test_merges_that_differ_for_another_reason_are_not_called_a_tie(tmp_path):
    # Stopping one merge early: the first missing merge is no tie between two pairs.
    folder = _variant(tmp_path, "one_too_few", "    while len(vocab) < vocab_size:\n",
                      "    while len(vocab) < vocab_size - 1:\n")
    assert not [f for f in _facts(folder) if f["id"] == "merge_tie"]


def test_the_tie_counts_pre_tokenise_as_the_reference_does():
    tree = ast.parse((BPE.solutions / "training.py").read_text(encoding="utf-8"))
    pattern = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                   and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["PATTERN"])
    assert ties.PATTERN == pattern

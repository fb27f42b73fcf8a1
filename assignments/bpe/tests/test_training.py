"""Task 1: train_bpe (HANDOUT §1–§3). Run only these with `pytest -m training`."""
import re

import pytest
from conftest import HANDOUT_MERGES, HANDOUT_TEXT

pytestmark = pytest.mark.training


def _pairs(merges):
    return [tuple(pair) for pair in merges]  # the contract allows a pair as a tuple or a list of two


def test_s2_pretokens(training, check):
    """§2: the pattern's pre-tokens of the two worked examples (PATTERN is CONTRACT.md's, unchanged)."""
    check.equal(re.findall(training.PATTERN, HANDOUT_TEXT), ["banana", " bandana", " band", " bananas"],
                "§2: the pre-tokens of the worked example (copy PATTERN from CONTRACT.md unchanged)")
    check.equal(re.findall(training.PATTERN, "It's 42  cats!"), ["It", "'s", " 42", " ", " cats", "!"],
                "§2: the pre-tokens of \"It's 42  cats!\"")


def test_s3_worked_merges(training, check):
    """§3: train_bpe("banana bandana band bananas", 262) learns six merges, ties to the greatest pair
    (merge 3 is a tie at count 3; merge 6 a four-way tie at count 1)."""
    vocab, merges = training.train_bpe(HANDOUT_TEXT, 262)
    check.equal(_pairs(merges), HANDOUT_MERGES, "§3 worked example: the merges, in the order learned")
    assert len(vocab) == 262, f"§3: {len(vocab)} tokens, expected 262 (256 bytes + 6 merges)"
    assert vocab[261] == b"banana", f"§3: vocab[261] is {vocab.get(261)!r}, expected b'banana'"


def test_s3_counts_are_weighted(training, check):
    """§3: a pre-token that occurs 3 times adds 3 to its pairs; ties go to the greatest pair: (x, y) occurs
    3 times (once per ' xy'), tied with (' ', x); (a, b) only twice."""
    _, merges = training.train_bpe("ab ab xy xy xy", 257)
    check.equal(_pairs(merges), [(b"x", b"y")], "§3: train_bpe(\"ab ab xy xy xy\", 257): the merges")


def test_s1_bytes_come_first(training):
    """§1: ids 0-255 are the single bytes."""
    vocab, _ = training.train_bpe(HANDOUT_TEXT, 260)
    wrong = [b for b in range(256) if vocab.get(b) != bytes([b])]
    assert not wrong, f"§1: vocab[{wrong[0]}] is {vocab.get(wrong[0])!r}, expected {bytes([wrong[0]])!r}"


def test_s3_special_token_layout(training, check):
    """§3: special tokens take the ids after the bytes and are never counted as text."""
    vocab, merges = training.train_bpe("banana<|end|>bandana", 258, ["<|end|>"])
    check.equal(vocab.get(256), b"<|end|>", "§3: vocab[256] (the special token, right after the bytes)")
    check.equal(_pairs(merges), [(b"a", b"n")], "§3: the merges, the special token never counted")
    assert vocab[257] == b"an", f"§3: vocab[257] is {vocab.get(257)!r}, expected b'an'"


def test_s3_nothing_to_merge_between_special_tokens(training, check):
    """§3: special tokens are cut out before counting; single letters leave nothing to merge."""
    vocab, merges = training.train_bpe("<|end|>a<|end|>b<|end|>", 258, ["<|end|>"])
    check.equal(_pairs(merges), [], "§3: the merges (the special token's characters are never counted)")
    assert len(vocab) == 257, f"§3: {len(vocab)} tokens, expected 257 (256 bytes + the special token)"


def test_s3_merge_without_overlap(training, check):
    """§3: (a, a, a) holds (a, a) twice, and merging it gives (aa, a); then (aa, a) makes aaa."""
    vocab, merges = training.train_bpe("aaa", 258)
    check.equal(_pairs(merges), [(b"a", b"a"), (b"aa", b"a")], "§3: train_bpe(\"aaa\", 258): the merges")
    assert vocab[257] == b"aaa"


def test_s3_ties_compare_the_first_tokens_then_the_second(training, check):
    """§3, CONTRACT: the third merge is a tie at count 2 between (' ab', c) and (' a', z); the greater pair is
    (' ab', c), since its first token ' ab' is greater than ' a' (the token it would make, ' abc', is not greater
    than ' az': comparing what the pairs make is another rule)."""
    _, merges = training.train_bpe("ab ab abc abc az az", 259)
    check.equal(_pairs(merges), [(b" ", b"a"), (b" a", b"b"), (b" ab", b"c")],
                "§3: train_bpe(\"ab ab abc abc az az\", 259): the merges (the tie goes to the greater pair)")


def test_s3_pairs_are_counted_at_every_position(training, check):
    """§3, CONTRACT: "aaaa" holds (a, a) three times, at positions 0, 1 and 2, so it beats (x, y), twice in "xyxy"
    (counting a run's pairs without overlap would make it a tie at 2, and (x, y) the greater)."""
    _, merges = training.train_bpe("aaaa xyxy", 257)
    check.equal(_pairs(merges), [(b"a", b"a")], "§3: train_bpe(\"aaaa xyxy\", 257): the merges")


def test_s3_vocab_size_at_the_minimum(training, check):
    """CONTRACT: only vocab_size < 256 + len(special_tokens) is a ValueError: at exactly 256 + len(special_tokens)
    the vocabulary is the 256 bytes and the special tokens, with no merge."""
    for specials in ([], ["<|end|>"]):
        call = f"train_bpe('banana<|end|>bandana', {256 + len(specials)}, {specials})"
        refused = None
        try:
            vocab, merges = training.train_bpe("banana<|end|>bandana", 256 + len(specials), specials)
        except ValueError as error:
            refused = error
        if refused is not None:  # failing outside the except block keeps the report free of the chained traceback
            pytest.fail(f"CONTRACT: {call} raised ValueError ({refused}); only vocab_size < 256 + len(special_tokens) "
                        f"is a ValueError. At exactly 256 + len(special_tokens), return the 256 bytes and the special "
                        f"tokens, with no merge", pytrace=False)
        check.equal(_pairs(merges), [], f"CONTRACT: {call}: the merges (no room for one)")
        assert len(vocab) == 256 + len(specials), (f"CONTRACT: {call}: {len(vocab)} tokens, expected "
                                                    f"{256 + len(specials)} (256 bytes + {len(specials)} special)")


def test_s3_vocab_size_too_small(training):
    """CONTRACT: no room for the bytes and the special tokens is a ValueError."""
    with pytest.raises(ValueError):
        training.train_bpe("banana", 256, ["<|end|>"])

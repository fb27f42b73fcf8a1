"""Evidence about a training whose merges differ from the reference's: whether the first merge that differs was a
tie, two pairs seen equally often, which the contract breaks for the lexicographically greatest (HANDOUT §3, step 4).

Held-out s60: ties broken another way (on the tokens' ids) cost most of the training tests, whose titles name other
topics (pre-tokens, runs of one byte, special tokens), and nothing said the first difference was a tie. The counts
are the grader's own, on the test's text: a fact only when they show the tie.
"""
from __future__ import annotations

import re
from collections import Counter

# HANDOUT §2's pre-tokeniser, as the reference writes it (tests/bpe/test_graders.py checks that they are the same).
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def tie_fact(text: str, special_tokens, merges, expected) -> dict | None:
    """{"id": "merge_tie", ...} when the first merge of `merges` that differs from `expected` (the reference's) is a
    pair seen exactly as often as the expected one at that step; None otherwise."""
    index = next((i for i, (a, b) in enumerate(zip(merges, expected)) if _pair(a) != _pair(b)), None)
    if index is None:
        return None
    got, want = _pair(merges[index]), _pair(expected[index])
    if got is None or want is None:
        return None
    counts = _pair_counts(_pretokens(text, special_tokens), [_pair(p) for p in expected[:index]])
    if not counts.get(got) or counts.get(got) != counts.get(want):
        return None
    return {"id": "merge_tie", "index": index + 1, "count": counts[want], "expected": _shown(want), "got": _shown(got)}


def _pair(value) -> tuple[bytes, bytes] | None:
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, bytes) for v in value):
        return value[0], value[1]
    return None


def _pretokens(text: str, special_tokens) -> Counter:
    pieces = [text]
    if special_tokens:
        pieces = re.split("|".join(re.escape(t) for t in sorted(special_tokens, key=len, reverse=True)), text)
    words = Counter()
    for piece in pieces:
        for pretoken in re.findall(PATTERN, piece):
            words[tuple(bytes([b]) for b in pretoken.encode("utf-8"))] += 1
    return words


def _pair_counts(words: Counter, learned) -> Counter:
    """How often each pair is seen once the `learned` merges are made, left to right, without overlap."""
    for pair in learned:
        merged = Counter()
        for word, count in words.items():
            merged[_with_merged(word, pair)] += count
        words = merged
    counts = Counter()
    for word, count in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += count
    return counts


def _with_merged(word: tuple, pair: tuple) -> tuple:
    out, joinable = [], False  # joinable: the last token out is one of the word's, not one merged here
    for token in word:
        if joinable and (out[-1], token) == pair:
            out[-1] += token
            joinable = False
        else:
            out.append(token)
            joinable = True
    return tuple(out)


def _shown(pair: tuple[bytes, bytes]) -> str:
    return f"({pair[0]!r}, {pair[1]!r})"

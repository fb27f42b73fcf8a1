"""Task 1: train a byte-level BPE vocabulary on a text (handout §1–§3)."""
import re
from collections import Counter

# The pre-tokeniser of handout §2: GPT-2's pattern, written for Python's `re`. In order: an English
# contraction ('s 't 'll ...), a run of letters, a run of digits, a run of other symbols (each of these
# three with at most one leading space), whitespace not followed by a non-space, any other whitespace.
# Every character of a text falls in exactly one match, so the matches joined give the text back.
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def split_on_special(text, special_tokens):
    """The pieces of `text` between its special tokens, the special tokens left out (handout §2).

    A longer special token is looked for before a shorter one it starts with, so that
    "<|eot|><|eot|>" is one token when both it and "<|eot|>" are special. A helper of train_bpe:
    you may write train_bpe without it.
    """
    # TODO Task 1 · train_bpe: replace these two lines with your code (handout §2).
    raise NotImplementedError("Task 1 · train_bpe: not implemented yet (handout §2)")


def merge_pair(word, pair):
    """`word` (a tuple of byte strings) with every occurrence of `pair` merged, left to right, without
    overlap (handout §3). A helper of train_bpe: you may write train_bpe without it."""
    # TODO Task 1 · train_bpe: replace these two lines with your code (handout §3).
    raise NotImplementedError("Task 1 · train_bpe: not implemented yet (handout §3)")


def train_bpe(text, vocab_size, special_tokens=()):
    """Learn byte-level BPE merges on `text` until the vocabulary holds `vocab_size` tokens (handout §3).

    text: a str. vocab_size: the size of the returned vocabulary, at least 256 + len(special_tokens).
    special_tokens: strings that are never split nor merged with their neighbours; each gets an id.
    Returns (vocab, merges):
      vocab  dict[int, bytes]: ids 0..255 are the single bytes (id b is bytes([b])), then the special
             tokens' UTF-8 bytes in the order given, then one token per merge in the order learned;
      merges list[tuple[bytes, bytes]]: the merged pairs, most frequent first. Among pairs equally
             frequent, the lexicographically greatest pair (compare the first tokens, then the second).
    Pairs are counted inside each pre-token (§2), at every position: (a, a, a) holds (a, a) twice.
    Training stops early, with a smaller vocabulary, when no pre-token has two tokens left.
    """
    # TODO Task 1 · train_bpe: replace these two lines with your code (handout §3).
    raise NotImplementedError("Task 1 · train_bpe: not implemented yet (handout §3)")

"""Your two files, imported from the folder above tests/, one fixture each (`training`, `tokenizer`):
a file that does not import fails only the tests that need it. The tokenizer's tests build it from the
handout's vocabulary and merges (§3), never from your train_bpe, as the grader does.

What every lesson's tests share (the checks and their messages, the evidence about known mistakes, the
library scan, short errors at your line) is in _feedback/, beside this file; what is this lesson's is below.
"""
import pytest

try:
    import _feedback as feedback  # shipped beside these tests
except ImportError:  # the kit's own copy of this folder: the engine's package
    from grader import student as feedback

# HANDOUT §3: train_bpe("banana bandana band bananas", 262).
HANDOUT_TEXT = "banana bandana band bananas"
HANDOUT_MERGES = [(b"a", b"n"), (b"b", b"an"), (b"an", b"a"), (b" ", b"ban"), (b" ban", b"d"), (b"ban", b"ana")]


def handout_vocab():
    vocab = {b: bytes([b]) for b in range(256)}
    for left, right in HANDOUT_MERGES:
        vocab[len(vocab)] = left + right
    return vocab


# Tests run in the order of the tasks: training, then the tokenizer.
VISIBLE = feedback.VisibleTests(__file__, parts=("training", "tokenizer"))
globals().update(VISIBLE.conftest_names())  # the part fixtures, `check`, and the hooks that shape the messages


@pytest.fixture
def handout_tokenizer(tokenizer):
    """Tokenizer(vocab, merges) with the six merges of handout §3 (special tokens: pass your own)."""
    return lambda special_tokens=None: tokenizer.Tokenizer(handout_vocab(), list(HANDOUT_MERGES), special_tokens)

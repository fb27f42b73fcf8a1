"""Your two files, imported from the folder above tests/, one fixture each (`training`, `tokenizer`):
a file that does not import fails only the tests that need it. The tokenizer's tests build it from the
handout's vocabulary and merges (§3), never from your train_bpe, as the grader does."""
import importlib
import sys
from pathlib import Path

import pytest

STUDENT_DIR = Path(__file__).resolve().parents[1]
if str(STUDENT_DIR) not in sys.path:
    sys.path.insert(0, str(STUDENT_DIR))

# HANDOUT §3: train_bpe("banana bandana band bananas", 262).
HANDOUT_TEXT = "banana bandana band bananas"
HANDOUT_MERGES = [(b"a", b"n"), (b"b", b"an"), (b"an", b"a"), (b" ", b"ban"), (b" ban", b"d"), (b"ban", b"ana")]


def handout_vocab():
    vocab = {b: bytes([b]) for b in range(256)}
    for left, right in HANDOUT_MERGES:
        vocab[len(vocab)] = left + right
    return vocab


def _module(name):
    try:
        return importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - the test fails with the reason, the others still run
        pytest.fail(f"{name}.py does not import: {type(error).__name__}: {error}", pytrace=False)


@pytest.fixture
def training():
    return _module("training")


@pytest.fixture
def tokenizer():
    return _module("tokenizer")


@pytest.fixture
def handout_tokenizer(tokenizer):
    """Tokenizer(vocab, merges) with the six merges of handout §3 (special tokens: pass your own)."""
    return lambda special_tokens=None: tokenizer.Tokenizer(handout_vocab(), list(HANDOUT_MERGES), special_tokens)

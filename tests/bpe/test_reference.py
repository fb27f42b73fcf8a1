"""The reference (solutions/bpe) against the handout's worked examples and the contract's promises."""
import random
import re

import pytest

from .helpers import ASSIGNMENT, REFERENCE, load

training = load(REFERENCE, "training")
tokenizer = load(REFERENCE, "tokenizer")
HANDOUT = (ASSIGNMENT / "HANDOUT.md").read_text(encoding="utf-8")
CONTRACT = (ASSIGNMENT / "CONTRACT.md").read_text(encoding="utf-8")


def test_one_pattern_everywhere():
    """Both files pre-tokenise alike, with the pattern the handout prints."""
    assert training.PATTERN == tokenizer.PATTERN
    assert f"    {training.PATTERN}\n" in HANDOUT


def random_text(rng: random.Random, n: int) -> str:
    """Any code point but the surrogates: ASCII, Latin, CJK, emoji, marks, controls, whitespace."""
    pools = [(0, 0x80), (0x80, 0x800), (0x800, 0xD800), (0xE000, 0x10000), (0x10000, 0x110000), (0x2000, 0x2010)]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(pools)
        out.append(chr(rng.randrange(lo, hi)))
    return "".join(out)


def test_pretokens_join_back_to_any_text():
    rng = random.Random(0)
    for n in range(400):
        text = random_text(rng, n % 40)
        assert "".join(re.findall(training.PATTERN, text)) == text, repr(text)


def test_handout_pretokens():
    assert re.findall(training.PATTERN, "banana bandana band bananas") == ["banana", " bandana", " band", " bananas"]
    assert re.findall(training.PATTERN, "It's 42  cats!") == ["It", "'s", " 42", " ", " cats", "!"]


def test_handout_training_examples():
    vocab, merges = training.train_bpe("banana bandana band bananas", 262)
    assert merges == [(b"a", b"n"), (b"b", b"an"), (b"an", b"a"), (b" ", b"ban"), (b" ban", b"d"), (b"ban", b"ana")]
    assert vocab[261] == b"banana" and len(vocab) == 262
    vocab, merges = training.train_bpe("banana<|end|>bandana", 258, ["<|end|>"])
    assert (vocab[256], vocab[257], merges) == (b"<|end|>", b"an", [(b"a", b"n")])
    assert tokenizer.Tokenizer(vocab, merges, ["<|end|>"]).encode("an<|end|>") == [257, 256]
    assert training.train_bpe("ab ab xy xy xy", 257)[1] == [(b"x", b"y")]
    vocab, merges = training.train_bpe("<|end|>a<|end|>b<|end|>", 258, ["<|end|>"])
    assert (len(vocab), merges) == (257, [])
    vocab, merges = training.train_bpe("bc bc bc bc ab ab ab", 258)
    assert merges == [(b"b", b"c"), (b"a", b"b")] and tokenizer.Tokenizer(vocab, merges).encode("abc") == [97, 256]
    vocab, merges = training.train_bpe("x   y   z", 258)
    assert merges == [(b" ", b" "), (b" ", b"z")] and tokenizer.Tokenizer(vocab, merges).encode("  z") == [32, 257]


def test_handout_encoding_examples():
    vocab, merges = training.train_bpe("banana bandana band bananas", 262)
    tok = tokenizer.Tokenizer(vocab, merges)
    assert tok.encode("anana") == [256, 258] and tok.encode("bandanas") == [257, 100, 258, 115]
    assert (tok.decode([195, 169]), tok.decode([195]), tok.decode([255])) == ("é", "\ufffd", "\ufffd")
    with pytest.raises(UnicodeDecodeError):  # the handout's reason for decoding once
        bytes([195]).decode("utf-8")
    special = tokenizer.Tokenizer(vocab, merges, ["<|end|>", "<|end|><|end|>"])
    assert special.encode("ana<|end|><|end|>ana<|end|>") == [258, 263, 258, 262]
    assert tok.encode("<|end|>") == list(b"<|end|>")
    assert vocab == training.train_bpe("banana bandana band bananas", 262)[0], "Tokenizer changed the caller's vocab"


def test_round_trip_any_text():
    text = (HANDOUT + CONTRACT) * 2  # a few kilobytes of English, code and symbols
    vocab, merges = training.train_bpe(text, 320, ["<|end|>"])
    tok = tokenizer.Tokenizer(vocab, merges, ["<|end|>"])
    rng = random.Random(1)
    for n in range(200):
        text = random_text(rng, n % 50) + ("<|end|>" if n % 3 == 0 else "")
        assert tok.decode(tok.encode(text)) == text, repr(text)


def test_training_stops_when_nothing_is_left_to_merge():
    vocab, merges = training.train_bpe("ab ab", 300)
    assert merges == [(b"a", b"b"), (b" ", b"ab")] and len(vocab) == 258


def test_too_small_a_vocabulary_is_refused_with_what_to_ask():
    with pytest.raises(ValueError, match="at least 257"):
        training.train_bpe("banana", 256, ["<|end|>"])

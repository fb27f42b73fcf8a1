"""Tasks 2–4: Tokenizer, encode and decode (HANDOUT §4–§6). Run only these with `pytest -m tokenizer`."""
import pytest

pytestmark = pytest.mark.tokenizer


def test_s4_merges_in_rank_order(handout_tokenizer, check):
    """§4: the earliest-learned merge present first, not the longest token: encode('anana') is an, ana."""
    tok = handout_tokenizer()
    check.equal(tok.encode("anana"), [256, 258], "§4: encode('anana')")
    check.equal(tok.encode("bandanas"), [257, 100, 258, 115], "§4: encode('bandanas')")


def _vocab(*merges):
    vocab = {b: bytes([b]) for b in range(256)}
    for left, right in merges:
        vocab[len(vocab)] = left + right
    return vocab


def test_s4_rank_not_position(tokenizer, check):
    """§4: (b, c) was learned before (a, b), so "abc" is a, bc, although (a, b) comes first in it (and in
    "ababc", although (a, b) occurs there twice)."""
    merges = [(b"b", b"c"), (b"a", b"b")]
    tok = tokenizer.Tokenizer(_vocab(*merges), merges)
    check.equal(tok.encode("abc"), [97, 256], "§4: encode('abc') (the earliest-learned merge first)")
    # (a, b) occurs twice in "ababc" and (b, c) once: the order of learning decides, not how often a pair occurs.
    check.equal(tok.encode("ababc"), [257, 97, 256], "§4: encode('ababc') (the earliest-learned merge first, "
                "however often another pair occurs)")


def test_s4_pretokens_first(tokenizer, check):
    """§2, §4: "  z" is the pre-tokens " " and " z": the two spaces are never merged."""
    merges = [(b" ", b" "), (b" ", b"z")]
    got = tokenizer.Tokenizer(_vocab(*merges), merges).encode("  z")
    check.equal(got, [32, 257], "§4: encode('  z') (encode each pre-token alone)")


def test_s4_pretokens_are_encoded_apart(handout_tokenizer, check):
    """§2, §4: a space starts a new pre-token, so ' banana' and 'banana' encode differently."""
    tok = handout_tokenizer()
    check.equal(tok.encode(" banana"), [259, 258], "§4: encode(' banana')")
    check.equal(tok.encode("banana banana"), [261, 259, 258], "§4: encode('banana banana')")


def test_s5_split_character(handout_tokenizer, check):
    """§5: é is two bytes; decoding joins the tokens' bytes first, then decodes them once; bytes that are
    not UTF-8 become U+FFFD (errors="replace")."""
    tok = handout_tokenizer()
    check.equal(tok.decode([195, 169]), "é", "§5: decode([195, 169])")
    check.equal(tok.decode([195]), "\ufffd", "§5: decode([195]), half a character")
    check.equal(tok.decode([255]), "\ufffd", "§5: decode([255]), never UTF-8")


@pytest.mark.parametrize("text", ["banana", "", "naïve café 🙂", "日本語  のテキスト\n\n", "It's 42  cats!"],
                         ids=["ascii", "empty", "accents_and_emoji", "japanese", "contraction_and_spaces"])
def test_s5_round_trip(handout_tokenizer, check, text):
    """§5: decode(encode(text)) == text, and encode returns ints."""
    tok = handout_tokenizer()
    ids = tok.encode(text)
    assert all(type(i) is int for i in ids), f"§4: encode({text!r}) returned {ids}: a list of ints"
    check.equal(tok.decode(ids), text, f"§5: decode(encode({text!r}))")


def test_s6_special_tokens(handout_tokenizer, check):
    """§6: new special tokens get the next ids; the longer one is matched first; none is split."""
    tok = handout_tokenizer(["<|end|>", "<|end|><|end|>"])
    got = tok.encode("ana<|end|><|end|>ana<|end|>")
    check.equal(got, [258, 263, 258, 262], "§6: encode('ana<|end|><|end|>ana<|end|>')")
    check.equal(tok.decode(got), "ana<|end|><|end|>ana<|end|>", "§6: decoding it back")


def test_s6_the_vocabulary_passed_in_is_not_changed(tokenizer, check):
    """§6: special tokens are added to the tokenizer's own copy of the vocabulary, never to the caller's dict:
    after building a Tokenizer, encoding and decoding, the dict passed in is as it was. An error in encode or
    decode is not this test's business (the encoding tests show it): the dict is read back all the same."""
    vocab = _vocab((b"a", b"n"))
    before = dict(vocab)
    tok = tokenizer.Tokenizer(vocab, [(b"a", b"n")], ["<|end|>", "<pad>"])
    check.equal(vocab, before, "§6: the vocab passed to Tokenizer(vocab, merges, ['<|end|>', '<pad>'])")
    try:
        tok.decode(tok.encode("an<|end|>a<pad>"))
    except Exception:  # noqa: BLE001 - test_s6_special_tokens and the round trips report encode's and decode's errors
        pass
    check.equal(vocab, before, "§6: the vocab passed to Tokenizer, after encode and decode")


def test_s6_special_token_already_in_the_vocabulary(tokenizer, check):
    """§6: a special token whose bytes are in the vocabulary keeps its id."""
    merges = [(b"a", b"n")]
    vocab = {**{b: bytes([b]) for b in range(256)}, 256: b"<|end|>", 257: b"an"}
    got = tokenizer.Tokenizer(vocab, merges, ["<|end|>"]).encode("an<|end|>")
    check.equal(got, [257, 256], "§6: encode('an<|end|>'), the special token keeping its id")
    # A new one listed after it takes the next unused id, 258: one more than the largest, no gap.
    got = tokenizer.Tokenizer(vocab, merges, ["<|end|>", "<sep>"]).encode("<sep>an<|end|>")
    check.equal(got, [258, 257, 256], "§6: encode('<sep>an<|end|>'), <sep> added with the next unused id")


def test_s6_without_special_tokens(handout_tokenizer, check):
    """§6: without special tokens, "<|end|>" is ordinary text (its seven bytes)."""
    check.equal(handout_tokenizer().encode("<|end|>"), list(b"<|end|>"), "§6: encode('<|end|>'), no special token")

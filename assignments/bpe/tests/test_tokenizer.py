"""Tasks 2–4: Tokenizer, encode and decode (HANDOUT §4–§6). Run only these with `pytest -m tokenizer`."""
import pytest

pytestmark = pytest.mark.tokenizer


def test_s4_merges_in_rank_order(handout_tokenizer):
    """§4: the earliest-learned merge present first, not the longest token."""
    tok = handout_tokenizer()
    got = tok.encode("anana")
    assert got == [256, 258], (f"§4: encode('anana') gave {got}, expected [256, 258] (an, ana). "
                               "[258, 110, 97] is the longest-match answer: apply merges by rank instead")
    assert tok.encode("bandanas") == [257, 100, 258, 115]


def _vocab(*merges):
    vocab = {b: bytes([b]) for b in range(256)}
    for left, right in merges:
        vocab[len(vocab)] = left + right
    return vocab


def test_s4_rank_not_position(tokenizer):
    """§4: (b, c) was learned before (a, b), so "abc" is a, bc, although (a, b) comes first in it."""
    merges = [(b"b", b"c"), (b"a", b"b")]
    got = tokenizer.Tokenizer(_vocab(*merges), merges).encode("abc")
    assert got == [97, 256], f"§4: encode('abc') gave {got}, expected [97, 256]: the earliest-learned merge first"


def test_s4_pretokens_first(tokenizer):
    """§2, §4: "  z" is the pre-tokens " " and " z": the two spaces are never merged."""
    merges = [(b" ", b" "), (b" ", b"z")]
    got = tokenizer.Tokenizer(_vocab(*merges), merges).encode("  z")
    assert got == [32, 257], f"§4: encode('  z') gave {got}, expected [32, 257]: encode each pre-token alone"


def test_s4_pretokens_are_encoded_apart(handout_tokenizer):
    """§2, §4: a space starts a new pre-token, so ' banana' and 'banana' encode differently."""
    tok = handout_tokenizer()
    assert tok.encode(" banana") == [259, 258], f"§4: encode(' banana') gave {tok.encode(' banana')}"
    assert tok.encode("banana banana") == [261, 259, 258]


def test_s5_split_character(handout_tokenizer):
    """§5: é is two bytes; decoding joins the bytes first; bytes that are not UTF-8 become U+FFFD."""
    tok = handout_tokenizer()
    assert tok.decode([195, 169]) == "é", "§5: join the tokens' bytes, then decode them once"
    assert tok.decode([195]) == "\ufffd" and tok.decode([255]) == "\ufffd", '§5: decode with errors="replace"'


@pytest.mark.parametrize("text", ["banana", "", "naïve café 🙂", "日本語  のテキスト\n\n", "It's 42  cats!"],
                         ids=["ascii", "empty", "accents_and_emoji", "japanese", "contraction_and_spaces"])
def test_s5_round_trip(handout_tokenizer, text):
    """§5: decode(encode(text)) == text, and encode returns ints."""
    tok = handout_tokenizer()
    ids = tok.encode(text)
    assert all(type(i) is int for i in ids), f"§4: encode({text!r}) returned {ids}: a list of ints"
    assert tok.decode(ids) == text, f"§5: decode(encode({text!r})) gave {tok.decode(ids)!r}"


def test_s6_special_tokens(handout_tokenizer):
    """§6: new special tokens get the next ids; the longer one is matched first; none is split."""
    tok = handout_tokenizer(["<|end|>", "<|end|><|end|>"])
    got = tok.encode("ana<|end|><|end|>ana<|end|>")
    assert got == [258, 263, 258, 262], f"§6: got {got}, expected [258, 263, 258, 262]"
    assert tok.decode(got) == "ana<|end|><|end|>ana<|end|>"


def test_s6_special_token_already_in_the_vocabulary(tokenizer):
    """§6: a special token whose bytes are in the vocabulary keeps its id."""
    merges = [(b"a", b"n")]
    vocab = {**{b: bytes([b]) for b in range(256)}, 256: b"<|end|>", 257: b"an"}
    got = tokenizer.Tokenizer(vocab, merges, ["<|end|>"]).encode("an<|end|>")
    assert got == [257, 256], f"§6: encode('an<|end|>') gave {got}, expected [257, 256]"


def test_s6_without_special_tokens(handout_tokenizer):
    """§6: without special tokens, "<|end|>" is ordinary text (its bytes)."""
    got = handout_tokenizer().encode("<|end|>")
    assert got == list(b"<|end|>"), f"§6: got {got}, expected the seven bytes {list(b'<|end|>')}"

"""Hidden tests of tokenizer.py (HANDOUT §4–§6). Points: rubric.toml [tokenizer.*].

The Tokenizer is always built from the grader's vocabulary and merges (the reference's train_bpe, or
the handout's), never from the student's, so a training bug costs training points only. Each test runs
its steps on one instance in the sandboxed child; expected values are the reference's answers to the
same steps, except the handout's worked examples, quoted from HANDOUT §4–§6."""
from grader.judging import assertions as checks

from ..adapter import Argument, Earlier, decode, encode, shown
from .corpora import CODE_TEXT, ENGLISH_TEXT, HELD_OUT, WORLD_TEXT

HANDOUT = "the handout's vocabulary (HANDOUT §3)"
HANDOUT_MERGES = [(b"a", b"n"), (b"b", b"an"), (b"an", b"a"), (b" ", b"ban"), (b" ban", b"d"), (b"ban", b"ana")]


def handout_vocab():
    vocab = {b: bytes([b]) for b in range(256)}
    for left, right in HANDOUT_MERGES:
        vocab[len(vocab)] = left + right
    return vocab


def trained(reference, text, vocab_size, special_tokens=()):
    """The reference's vocabulary and merges for `text`: what every Tokenizer of these tests is built from.
    The contract promises a vocabulary that never holds the same bytes twice (the id of those bytes
    would be the student's choice): a text that broke it is the grader's fault, and says so."""
    vocab, merges = checks.value(reference.train_bpe(text, vocab_size, special_tokens), "the reference's train_bpe",
                                 count=2)
    if len(set(vocab.values())) != len(vocab):
        raise RuntimeError(f"grader fault: train_bpe({shown(text)}, {vocab_size}) repeats a token; choose another text")
    return vocab, merges


def round_trips(texts):
    """encode each text, then decode the student's own ids: steps 2k (encode) and 2k+1 (decode)."""
    steps = []
    for text in texts:
        steps += [encode(text), decode(Earlier(len(steps)))]
    return steps


def same_steps(got, exp, labels):
    """Each step's value equals the reference's; `labels[i]` names step i in feedback."""
    for i, label in enumerate(labels):
        checks.same_value(checks.step(got, i, label), checks.step(exp, i, f"the reference's {label}"), label)


def compare(student, reference, vocab, merges, special_tokens, steps, labels, about=""):
    got = student.tokenizer(vocab, merges, special_tokens, steps=steps, about=about)
    exp = reference.tokenizer(vocab, merges, special_tokens, steps=steps, about=about)
    same_steps(got, exp, [f"{got.request}: {label}" for label in labels])


def labels_of(texts):
    return [label for t in texts for label in (f"encode({shown(t)})", f"decode(encode({shown(t)}))")]


def test_worked_example(student, reference):
    steps = [encode("anana"), encode("bandanas"), decode([195, 169])]
    res = student.tokenizer(handout_vocab(), HANDOUT_MERGES, steps=steps, about=HANDOUT)
    checks.same_value(checks.step(res, 0, "encode('anana')"), [256, 258], "HANDOUT §4: encode('anana')")
    checks.same_value(checks.step(res, 1, "encode('bandanas')"), [257, 100, 258, 115], "HANDOUT §4: encode('bandanas')")
    checks.same_value(checks.step(res, 2, "decode([195, 169])"), "é", "HANDOUT §5: decode([195, 169])")


def test_reference(student, reference):
    vocab, merges = trained(reference, ENGLISH_TEXT + WORLD_TEXT + CODE_TEXT, 400)
    texts = [HELD_OUT, ENGLISH_TEXT[:500], WORLD_TEXT[:300], CODE_TEXT[:300], "", " ", "a"]
    compare(student, reference, vocab, merges, None, round_trips(texts), labels_of(texts))


def test_rank_order(student, reference):
    # Taking the leftmost merge, or the longest vocabulary entry, instead of the earliest-learned merge:
    # the handout's "anana", and "abc" where (b, c) was learned before (a, b): a bc, not ab c.
    vocab, merges = trained(reference, "bc bc bc bc ab ab ab", 262)
    texts = ["abc", " abc", "abcabc", "ab bc abc"]
    steps = [encode(t) for t in texts]
    got = student.tokenizer(vocab, merges, steps=steps)
    exp = reference.tokenizer(vocab, merges, steps=steps)
    handout = student.tokenizer(handout_vocab(), HANDOUT_MERGES, steps=[encode("anana")], about=HANDOUT)
    same_steps(got, exp, [f"{got.request}: encode({t!r})" for t in texts])
    checks.same_value(checks.step(handout, 0, "encode('anana')"), [256, 258], "HANDOUT §4: encode('anana')")


def test_pretokens(student, reference):
    # Runs of spaces and punctuation, where pairs across pre-tokens are merges learned elsewhere.
    vocab, merges = trained(reference, CODE_TEXT + "  x  =  y  ;;  " * 20, 330)
    texts = ["a  b    c", "x  =  y;;  z", "    return x_1 + 2  # done\n\n\n  end", "it's 2026.  'twas"]
    compare(student, reference, vocab, merges, None, [encode(t) for t in texts], [f"encode({t!r})" for t in texts])


def test_round_trip(student, reference):
    vocab, merges = trained(reference, ENGLISH_TEXT, 300)  # trained on English: every other script is bytes
    texts = [WORLD_TEXT, "🙂🚀👩‍💻", "e\u0301 ﬁ x² ٣", "\x00\x7f\u0080\uffff\U0010ffff", "\n\t \r\n",
             "日本語のテキスト" * 20, ENGLISH_TEXT]
    got = student.tokenizer(vocab, merges, steps=round_trips(texts))
    for k, text in enumerate(texts):
        ids = checks.step(got, 2 * k, f"encode({shown(text)})")
        checks.check(isinstance(ids, list) and all(type(i) is int and i in vocab for i in ids),
                     f"encode({shown(text)}) must return a list of ids of the vocabulary (ints)")
        checks.same_value(checks.step(got, 2 * k + 1, f"decode(encode({shown(text)}))"), text,
                          f"decode(encode({shown(text)}))")


def test_decode_split(student, reference):
    # Characters of 2, 3 and 4 bytes split across tokens: decoded only once their bytes are joined.
    vocab, merges = trained(reference, ENGLISH_TEXT, 300)
    texts = ["café", "naïve façade", "東京", "🙂 ok"]
    compare(student, reference, vocab, merges, None, round_trips(texts), labels_of(texts))


def test_invalid_bytes(student, reference):
    # Bytes that are not UTF-8 (a lone 0xff, a cut-off character) decode to U+FFFD, never an error.
    cases = [[255], [195], [104, 105, 226, 130], [240, 159, 153], [128, 97]]
    compare(student, reference, handout_vocab(), HANDOUT_MERGES, None, [decode(ids) for ids in cases],
            [f"decode({ids})" for ids in cases], about=HANDOUT)


def test_special_tokens(student, reference):
    specials = ["<|end|>", "<pad>"]
    text = "<|end|>".join(ENGLISH_TEXT[i:i + 300] for i in range(0, 1500, 300))
    vocab, merges = trained(reference, text, 300, specials)
    texts = ["hello<|end|>world", "<|end|>", "<pad><pad> the end<|end|>", "<|end|><|end|>x<pad>",
             "a <|end |> is not special", "<|end|" + "|>"]
    compare(student, reference, vocab, merges, specials, round_trips(texts), labels_of(texts))
    # The same vocabulary without special tokens: "<|end|>" is ordinary text.
    compare(student, reference, vocab, merges, None, [encode("x<|end|>y")], ["encode('x<|end|>y')"])
    # A new special token listed after one the vocabulary already holds: the next unused id, no gap.
    texts = ["a<sep>b<|end|>", "<sep>"]
    compare(student, reference, vocab, merges, ["<|end|>", "<sep>"], round_trips(texts), labels_of(texts))


def test_special_overlap(student, reference):
    # One special token starts with another, the shorter listed first: the longer must win.
    vocab, merges = trained(reference, ENGLISH_TEXT, 280)
    specials = ["<|end|>", "<|end|><|end|>"]
    texts = ["a<|end|><|end|>b", "<|end|><|end|><|end|>", "<|end|> <|end|><|end|>"]
    compare(student, reference, vocab, merges, specials, round_trips(texts), labels_of(texts))


def test_repeated_calls(student, reference):
    # One instance, many calls: encode and decode must not change what later calls return.
    vocab, merges = trained(reference, ENGLISH_TEXT, 300, ["<|end|>"])
    text = ENGLISH_TEXT[:200] + "<|end|>" + WORLD_TEXT[:100]
    steps = [encode(text), encode("café"), decode([0, 1, 2]), encode(text), decode(Earlier(0)), encode(text)]
    got = student.tokenizer(vocab, merges, ["<|end|>"], steps=steps)
    first = checks.step(got, 0, f"encode({shown(text)})")
    checks.same_value(checks.step(got, 3, f"encode({shown(text)}) a second time"), first,
                      f"encode({shown(text)}) a second time, on the same Tokenizer")
    checks.same_value(checks.step(got, 5, f"encode({shown(text)}) a third time"), first,
                      f"encode({shown(text)}) after decode, on the same Tokenizer")
    checks.same_value(checks.step(got, 4, "decode(encode(text))"), text, "decode(encode(text))")


def test_vocab_unchanged(student, reference):
    # CONTRACT: "The vocab passed in is not changed": a caller may build a second Tokenizer from the same dict
    # with other special tokens. Adding special tokens into the caller's dict (no copy) changes it; so
    # would an encode or decode that stores into it. Read back after building, and after encode and decode
    # (each step runs even if one before it raised: a crash in encode is the other tests' business).
    vocab, merges = trained(reference, ENGLISH_TEXT, 280)  # no special token in it: both are added
    specials = ["<|end|>", "<pad>"]
    steps = [Argument(0), encode("a<|end|>b<pad>c"), decode(Earlier(1)), Argument(0)]
    got = student.tokenizer(vocab, merges, specials, steps=steps, keep_going=True)
    for i, when in ((0, "once it was built"), (3, "after encode and decode")):
        checks.same_value(checks.step(got, i, f"the vocab passed to {got.request}, read back {when}"), vocab,
                          f"the vocab dict passed to {got.request}, read back {when} (it must not change)")

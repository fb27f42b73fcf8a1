"""Hidden tests of training.py (HANDOUT §1–§3). Points: rubric.toml [training.*].

Every expected value is the reference's answer to the same call, except the handout's worked
example, quoted from HANDOUT §3. A test asks all its calls before it checks any (they go to the
sandboxed child as one batch)."""
from grader.judging import assertions as checks

from . import ties
from .corpora import CODE_TEXT, ENGLISH_TEXT, WORLD_TEXT

# HANDOUT §3, the worked example.
HANDOUT_TEXT = "banana bandana band bananas"
HANDOUT_MERGES = [(b"a", b"n"), (b"b", b"an"), (b"an", b"a"), (b" ", b"ban"), (b" ban", b"d"), (b"ban", b"ana")]


def _same_training(got, exp, what, case=None):
    """The student's (vocab, merges) equals the reference's: merges first (the first wrong merge is the
    clearest clue, and whether it was a tie is said), then the vocabulary."""
    vocab, merges = checks.value(got, what, count=2)
    exp_vocab, exp_merges = checks.value(exp, "the reference", count=2)
    _same_merges(merges, exp_merges, f"{what}: merges", case)
    checks.same_value(vocab, exp_vocab, f"{what}: vocabulary")


def _same_merges(merges, expected, what, case):
    try:
        checks.same_value(merges, expected, what)
    except checks.GradeFailure as failure:
        fact = ties.tie_fact(case[0], case[2] if len(case) > 2 else (), merges, expected) \
            if case and isinstance(merges, (list, tuple)) else None
        if fact is not None:
            failure.facts.append(fact)
        raise


def _compare(student, reference, cases):
    calls = [(case, student.train_bpe(*case), reference.train_bpe(*case)) for case in cases]
    for case, got, exp in calls:
        _same_training(got, exp, got.request, case)


def test_worked_example(student, reference):
    res = student.train_bpe(HANDOUT_TEXT, 262)
    vocab, merges = checks.value(res, res.request, count=2)
    _same_merges(merges, HANDOUT_MERGES, "HANDOUT §3 worked example: merges", (HANDOUT_TEXT, 262))
    checks.same_value(vocab.get(261) if isinstance(vocab, dict) else None, b"banana",
                      "HANDOUT §3 worked example: vocab[261]")


def test_bytes_first(student, reference):
    res = student.train_bpe(ENGLISH_TEXT, 270)
    vocab, _ = checks.value(res, res.request, count=2)
    checks.check(isinstance(vocab, dict), f"{res.request}: the vocabulary is a {type(vocab).__name__}, not a dict")
    checks.same_value({i: vocab.get(i) for i in range(256)}, {i: bytes([i]) for i in range(256)},
                      f"{res.request}: ids 0-255")


def test_reference(student, reference):
    _compare(student, reference, [(ENGLISH_TEXT, 330), (WORLD_TEXT, 300), (CODE_TEXT, 300)])


def test_ties(student, reference):
    # "ab xy": three pairs, each once. The greatest is (x, y); the smallest (" ", x); the first seen (a, b).
    # "ab ab abc abc az az" (the visible test's case): the third merge is a tie between (" ab", c) and (" a", z); the
    # greater pair is (" ab", c), though the token (" a", z) makes, " az", is greater than " abc".
    _compare(student, reference, [("ab xy", 257), ("xy ab ab xy ba", 260), (ENGLISH_TEXT[:400], 290),
                                  ("ab ab abc abc az az", 259)])


def test_pretokens(student, reference):
    # Word ends and punctuation are frequent neighbours here ("e." "t,"), but never in one pre-token.
    _compare(student, reference, [("the cat. the hat, the mat. the rat, the bat.", 275),
                                  ("x  = 1;  y  = 22;  z  = 333;\n\n  end", 270)])


def test_overlap(student, reference):
    # Runs of one byte: (a, a, a) holds (a, a) twice, and merging it gives (aa, a).
    _compare(student, reference, [("aaa", 258), ("aaaa aaaaa aa zzzzzzz", 266), ("ababab abab aba", 262)])


def test_special_tokens(student, reference):
    text = "<|end|>".join(ENGLISH_TEXT[i:i + 300] for i in range(0, 1500, 300)) + "<pad><pad>"
    _compare(student, reference, [(text, 300, ["<|end|>", "<pad>"]),
                                  ("end|> <|end|>|><|end <|end|><|end|>", 266, ["<|end|>"])])


def test_vocab_size(student, reference):
    cases = [(ENGLISH_TEXT, 256 + n) for n in (1, 17)] + [(WORLD_TEXT, 280, ["<|end|>", "<s>"]), ("ab ab", 300)]
    # CONTRACT: only vocab_size < 256 + len(special_tokens) is a ValueError: at exactly that size the vocabulary
    # is the bytes and the special tokens, with no merge (a check written `<=` wants room for one merge).
    smallest = [(ENGLISH_TEXT, 256), ("banana<|end|>bandana", 257, ["<|end|>"]), (WORLD_TEXT, 258, ["<|end|>", "<s>"])]
    answers = [(case, student.train_bpe(*case), reference.train_bpe(*case)) for case in cases + smallest]
    too_small = student.train_bpe("banana", 256, ["<|end|>"])
    for case, got, exp in answers:
        if case in smallest and _is_value_error(got.error):
            checks.check(False, f"{got.request}: your code raised ValueError ({got.error.get('message', '')}); "
                         "only vocab_size < 256 + len(special_tokens) is a ValueError (CONTRACT). At exactly "
                         "256 + len(special_tokens), return the 256 bytes and the special tokens, with no merge")
        vocab, merges = checks.value(got, got.request, count=2)
        exp_vocab, _ = checks.value(exp, "the reference", count=2)
        checks.same_value(len(vocab), len(exp_vocab), f"{got.request}: the number of tokens")
        checks.same_value(len(merges), len(exp_vocab) - 256 - len(case[2] if len(case) > 2 else ()),
                          f"{got.request}: the number of merges")
    checks.check(_is_value_error(too_small.error),
                 f"{too_small.request}: 256 bytes and one special token leave no room in 256 ids; "
                 "the contract asks for a ValueError")


def _is_value_error(error) -> bool:
    # A subclass of ValueError is a ValueError: the error record names the builtin classes it derives from.
    error = error or {}
    return error.get("type") == "ValueError" or "ValueError" in error.get("bases", ())

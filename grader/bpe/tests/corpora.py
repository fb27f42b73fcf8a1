"""The hidden tests' texts: made by a seeded generator, so they are long enough to train on and have
the skewed word frequencies of real text, yet are the same on every machine. Nothing here is an
expected value: every answer is the reference's, computed live."""
from __future__ import annotations

import random

ENGLISH = ("the", "the", "a", "of", "and", "to", "in", "is", "it", "that", "token", "tokens", "tokenizer",
           "merge", "merges", "merged", "byte", "bytes", "pair", "pairs", "count", "counts", "counted",
           "learn", "learns", "learned", "text", "texts", "train", "training", "trained", "rare",
           "frequent", "word", "words", "then", "again", "until", "every", "each", "new", "vocabulary",
           "encode", "encoder", "decode", "decoder", "model", "models", "reads", "writes", "integers")
WORLD = ("café", "naïve", "straße", "über", "déjà", "vu", "façade", "niño", "смысл", "привет", "мир",
         "Ελληνικά", "λόγος", "日本", "東京", "こんにちは", "トークン", "한국어", "🙂", "🚀", "👩‍💻", "ﬁne",
         "e\u0301", "x²", "٣٤", "the", "and", "token")
CODE_LINES = ("def {w}_{n}(x):", "    return x_{n} + {n}", "    {w} = [{n}, {n}]  # {w}", "if {w} == {n}:",
              "        print('{w}', {n})", "for i in range({n}):", "\t{w}_count += 1", "", "class {W}:",
              '    """{w} {w}."""')


def _words(rng: random.Random, vocabulary, n: int) -> list[str]:
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]  # a few words often, most rarely
    return rng.choices(vocabulary, weights=weights, k=n)


def prose(seed: int, sentences: int, vocabulary=ENGLISH) -> str:
    """Sentences of 3-11 words, capitalised, with commas, numbers, contractions and a paragraph break
    now and then, double spaces included."""
    rng = random.Random(seed)
    out = []
    for s in range(sentences):
        words = _words(rng, vocabulary, rng.randint(3, 11))
        words[0] = words[0].capitalize()
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 2026)))
        if rng.random() < 0.15:
            words[-1] += rng.choice(("'s", "'ll", "n't"))
        if rng.random() < 0.3:
            words[rng.randrange(len(words))] += ","
        end = rng.choice((". ", ". ", "! ", "? ", ".  ", ".\n\n"))
        out.append(" ".join(words) + end)
    return "".join(out)


def code(seed: int, lines: int) -> str:
    """Python-like lines: indentation, underscores, digits, brackets and quotes."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        w = rng.choice(("tokens", "pair", "merge", "vocab", "ids"))
        out.append(rng.choice(CODE_LINES).format(w=w, W=w.capitalize(), n=rng.randint(0, 99)))
    return "\n".join(out) + "\n"


ENGLISH_TEXT = prose(1, 120)  # ~7 KB
WORLD_TEXT = prose(2, 60, WORLD)  # every UTF-8 length, combining marks, a ZWJ sequence
CODE_TEXT = code(3, 120)
HELD_OUT = prose(4, 8) + prose(5, 4, WORLD) + code(6, 6)  # texts the tokenizer was not trained on

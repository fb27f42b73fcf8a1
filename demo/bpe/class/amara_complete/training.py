import re
from collections import Counter

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def _pieces(text, special_tokens):
    if not special_tokens:
        return [text]
    pattern = "|".join(re.escape(s) for s in sorted(special_tokens, key=len, reverse=True))
    return re.split(pattern, text)


def _apply(seq, a, b):
    out = []
    i = 0
    while i < len(seq):
        if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return tuple(out)


def train_bpe(text, vocab_size, special_tokens=()):
    if vocab_size < 256 + len(special_tokens):
        raise ValueError("vocab_size is smaller than 256 + number of special tokens")
    vocab = {i: bytes([i]) for i in range(256)}
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")

    freq = Counter()
    for piece in _pieces(text, special_tokens):
        for tok in re.findall(PATTERN, piece):
            freq[tuple(bytes([c]) for c in tok.encode("utf-8"))] += 1

    merges = []
    while len(vocab) < vocab_size:
        stats = Counter()
        for seq, n in freq.items():
            for a, b in zip(seq, seq[1:]):
                stats[(a, b)] += n
        if not stats:
            break
        top = max(stats, key=lambda p: (stats[p], p))
        merges.append(top)
        vocab[len(vocab)] = top[0] + top[1]
        new_freq = Counter()
        for seq, n in freq.items():
            new_freq[_apply(seq, *top)] += n
        freq = new_freq
    return vocab, merges

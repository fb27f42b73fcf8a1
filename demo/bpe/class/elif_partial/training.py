"""Elif's train_bpe (the tokenizer is not done yet)."""
import re
from collections import Counter

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def train_bpe(text, vocab_size, special_tokens=()):
    if vocab_size < 256 + len(special_tokens):
        raise ValueError("vocab_size too small for the bytes and special tokens")
    vocab = {n: bytes([n]) for n in range(256)}
    vocab.update({256 + k: tok.encode("utf-8") for k, tok in enumerate(special_tokens)})
    segments = [text]
    for tok in sorted(special_tokens, key=len, reverse=True):
        segments = [s for seg in segments for s in seg.split(tok)]
    words = Counter(tuple(bytes([x]) for x in w.encode("utf-8"))
                    for seg in segments for w in re.findall(PATTERN, seg))
    merges = []
    while len(vocab) < vocab_size:
        pairs = Counter()
        for w, c in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += c
        if not pairs:
            break
        top_count = max(pairs.values())
        pair = max(p for p, c in pairs.items() if c == top_count)
        merges.append(pair)
        vocab[len(vocab)] = pair[0] + pair[1]
        merged = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if w[i:i + 2] == pair:
                    out.append(pair[0] + pair[1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return vocab, merges

"""A correct variant: pair counts updated incrementally (only the words that hold the merged pair are
recounted), merges returned as lists of two, and (vocab, merges) as a list."""
import re
from collections import defaultdict

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def train_bpe(text, vocab_size, special_tokens=()):
    if vocab_size < 256 + len(special_tokens):
        raise ValueError("vocab_size too small")
    vocab = {i: bytes([i]) for i in range(256)}
    for s in special_tokens:
        vocab[len(vocab)] = s.encode()
    pieces = [text]
    for s in sorted(special_tokens, key=len, reverse=True):
        pieces = [part for piece in pieces for part in piece.split(s)]
    counts = defaultdict(int)
    for piece in pieces:
        for m in re.finditer(PATTERN, piece):
            counts[m.group().encode()] += 1
    words = [[list(bytes([b]) for b in w), n] for w, n in counts.items()]
    pairs = defaultdict(int)
    where = defaultdict(set)  # pair -> indexes of the words holding it
    for k, (w, n) in enumerate(words):
        for p in zip(w, w[1:]):
            pairs[p] += n
            where[p].add(k)
    merges = []
    while len(vocab) < vocab_size and pairs:
        best = max(pairs.items(), key=lambda item: (item[1], item[0]))[0]
        merges.append([best[0], best[1]])
        vocab[len(vocab)] = best[0] + best[1]
        for k in sorted(where.pop(best, ())):
            w, n = words[k]
            for p in zip(w, w[1:]):
                pairs[p] -= n
                if pairs[p] == 0:
                    del pairs[p]
            out, i = [], 0
            while i < len(w):
                if i < len(w) - 1 and w[i] == best[0] and w[i + 1] == best[1]:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[k][0] = out
            for p in zip(out, out[1:]):
                pairs[p] += n
                where[p].add(k)
        pairs.pop(best, None)
    return [vocab, merges]

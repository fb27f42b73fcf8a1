"""Bruno's BPE trainer: keeps the pair counts up to date instead of recounting everything each round."""
import re

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def count_words(text, specials):
    words = {}
    chunks = [text]
    for s in sorted(specials, key=len, reverse=True):
        chunks = [c2 for c in chunks for c2 in c.split(s)]
    for chunk in chunks:
        for w in re.findall(PATTERN, chunk):
            b = w.encode("utf-8")
            words[b] = words.get(b, 0) + 1
    return [[[b[i:i + 1] for i in range(len(b))], n] for b, n in words.items()]


def train_bpe(text, vocab_size, special_tokens=()):
    n_merges = vocab_size - 256 - len(special_tokens)
    if n_merges < 0:
        raise ValueError(f"vocab_size must be >= {256 + len(special_tokens)}")
    vocab = {}
    for i in range(256):
        vocab[i] = bytes([i])
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    words = count_words(text, special_tokens)
    counts = {}
    for symbols, n in words:
        for pair in zip(symbols, symbols[1:]):
            counts[pair] = counts.get(pair, 0) + n
    merges = []
    for _ in range(n_merges):
        counts = {p: c for p, c in counts.items() if c > 0}
        if not counts:
            break
        best = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]))[-1][0]
        merges.append([best[0], best[1]])
        vocab[len(vocab)] = best[0] + best[1]
        for entry in words:
            symbols, n = entry
            if len(symbols) < 2 or best[0] not in symbols:
                continue
            for pair in zip(symbols, symbols[1:]):
                counts[pair] -= n
            new, k = [], 0
            while k < len(symbols):
                if k + 1 < len(symbols) and (symbols[k], symbols[k + 1]) == best:
                    new.append(best[0] + best[1])
                    k += 2
                else:
                    new.append(symbols[k])
                    k += 1
            for pair in zip(new, new[1:]):
                counts[pair] = counts.get(pair, 0) + n
            entry[0] = new
    return vocab, merges

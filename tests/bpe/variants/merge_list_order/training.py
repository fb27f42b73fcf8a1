"""A correct variant: the most frequent pair found by sorting (count, pair) descending; the text cut at
special tokens by re.split; a vocabulary too small refused with its own subclass of ValueError."""
import re

class VocabularyTooSmall(ValueError):
    """vocab_size leaves no room for a merge: still a ValueError, as the contract asks."""


PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def train_bpe(text, vocab_size, special_tokens=()):
    if vocab_size < 256 + len(special_tokens):
        raise VocabularyTooSmall(f"vocab_size must be at least {256 + len(special_tokens)}")
    vocab = {i: bytes([i]) for i in range(256)}
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    chunks = [text]
    if special_tokens:
        chunks = re.split("|".join(re.escape(t) for t in sorted(special_tokens, key=len, reverse=True)), text)
    words = {}
    for chunk in chunks:
        for w in re.findall(PATTERN, chunk):
            key = tuple(bytes([b]) for b in w.encode("utf-8"))
            words[key] = words.get(key, 0) + 1
    merges = []
    for _ in range(vocab_size - len(vocab)):
        stats = {}
        for w, n in words.items():
            for i in range(len(w) - 1):
                stats[w[i], w[i + 1]] = stats.get((w[i], w[i + 1]), 0) + n
        if not stats:
            break
        ranked = sorted(stats.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        a, b = ranked[0][0]
        merges.append((a, b))
        vocab[len(vocab)] = a + b
        new = {}
        for w, n in words.items():
            out = []
            for t in w:
                if out and out[-1] == a and t == b:
                    out[-1] = a + b
                else:
                    out.append(t)
            new[tuple(out)] = new.get(tuple(out), 0) + n
        words = new
    return vocab, merges

"""Ines Kaya, BPE training. I keep every distinct pre-token as a tuple of byte strings with its count,
and recount the pairs after each merge (slow but easy to check by hand)."""
import re

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def chunks(text, special_tokens):
    """The text between special tokens (longest special first, so a longer one is never cut in two)."""
    if not special_tokens:
        yield text
        return
    alternatives = sorted(special_tokens, key=len, reverse=True)
    yield from re.split("|".join(map(re.escape, alternatives)), text)


def count_words(text, special_tokens):
    words = {}
    for chunk in chunks(text, special_tokens):
        for match in re.finditer(PATTERN, chunk):
            key = tuple(bytes([b]) for b in match.group().encode("utf-8"))
            words[key] = words.get(key, 0) + 1
    return words


def pair_counts(words):
    counts = {}
    for word, n in words.items():
        for left, right in zip(word[:-1], word[1:]):
            counts[(left, right)] = counts.get((left, right), 0) + n
    return counts


def merged(word, left, right):
    result, k = [], 0
    while k < len(word):
        if k < len(word) - 1 and word[k] == left and word[k + 1] == right:
            result.append(left + right)
            k += 2
        else:
            result.append(word[k])
            k += 1
    return tuple(result)


def train_bpe(text, vocab_size, special_tokens=()):
    special_tokens = list(special_tokens)
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size must be at least {256 + len(special_tokens)}, got {vocab_size}")
    vocab = {}
    for b in range(256):
        vocab[b] = bytes([b])
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    words = count_words(text, special_tokens)
    merges = []
    while len(vocab) < vocab_size:
        counts = pair_counts(words)
        if not counts:
            break
        top = max(counts.values())
        left, right = max(pair for pair, n in counts.items() if n == top)
        merges.append((left, right))
        vocab[len(vocab)] = left + right
        words = {merged(w, left, right): n for w, n in words.items()}
    return vocab, merges

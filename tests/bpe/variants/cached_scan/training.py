"""A correct variant: the reference's training with the tie broken by scanning the pairs
from the greatest down and keeping the first of the highest count."""
import re
from collections import Counter

# The pre-tokeniser of handout §2: GPT-2's pattern, written for Python's `re`. In order: an English
# contraction ('s 't 'll ...), a run of letters, a run of digits, a run of other symbols (each of these
# three with at most one leading space), whitespace not followed by a non-space, any other whitespace.
# Every character of a text falls in exactly one match, so the matches joined give the text back.
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def split_on_special(text, special_tokens):
    """The pieces of `text` between its special tokens, the special tokens left out (handout §2).

    A longer special token is looked for before a shorter one it starts with, so that
    "<|eot|><|eot|>" is one token when both it and "<|eot|>" are special. A helper of train_bpe:
    you may write train_bpe without it.
    """
    if not special_tokens:
        return [text]
    longest_first = sorted(special_tokens, key=len, reverse=True)
    return re.split("|".join(re.escape(token) for token in longest_first), text)


def merge_pair(word, pair):
    """`word` (a tuple of byte strings) with every occurrence of `pair` merged, left to right, without
    overlap (handout §3). A helper of train_bpe: you may write train_bpe without it."""
    merged, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            merged.append(word[i] + word[i + 1])
            i += 2  # the pair's second token is used up: (a, a, a) becomes (aa, a), never (aa, aa)
        else:
            merged.append(word[i])
            i += 1
    return tuple(merged)


def train_bpe(text, vocab_size, special_tokens=()):
    """Learn byte-level BPE merges on `text` until the vocabulary holds `vocab_size` tokens (handout §3).

    text: a str. vocab_size: the size of the returned vocabulary, at least 256 + len(special_tokens).
    special_tokens: strings that are never split nor merged with their neighbours; each gets an id.
    Returns (vocab, merges):
      vocab  dict[int, bytes]: ids 0..255 are the single bytes (id b is bytes([b])), then the special
             tokens' UTF-8 bytes in the order given, then one token per merge in the order learned;
      merges list[tuple[bytes, bytes]]: the merged pairs, most frequent first. Among pairs equally
             frequent, the lexicographically greatest pair (compare the first tokens, then the second).
    Pairs are counted inside each pre-token (§2), at every position: (a, a, a) holds (a, a) twice.
    Training stops early, with a smaller vocabulary, when no pre-token has two tokens left.
    """
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size={vocab_size} leaves no room for the 256 bytes and "
                         f"{len(special_tokens)} special token(s): ask for at least {256 + len(special_tokens)}")
    vocab = {i: bytes([i]) for i in range(256)}
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")

    # Each distinct pre-token, as a tuple of one-byte tokens, with how often it occurs. Merges happen
    # inside a pre-token only, so they never cross a word boundary nor a special token.
    words = Counter()
    for piece in split_on_special(text, special_tokens):
        for pretoken in re.findall(PATTERN, piece):
            words[tuple(bytes([b]) for b in pretoken.encode("utf-8"))] += 1

    merges = []
    while len(vocab) < vocab_size:
        pairs = Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break  # every pre-token is a single token: nothing left to merge
        best = max(sorted(pairs, reverse=True), key=pairs.get)  # max keeps the first of equal counts
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        merged = Counter()
        for word, count in words.items():
            merged[merge_pair(word, best)] += count  # two words may become the same tuple: add their counts
        words = merged
    return vocab, merges

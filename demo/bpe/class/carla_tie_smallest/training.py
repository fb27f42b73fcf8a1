import re
from collections import defaultdict

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def train_bpe(text, vocab_size, special_tokens=()):
    if vocab_size < 256 + len(special_tokens):
        raise ValueError("not enough room in the vocabulary")
    vocab = {b: bytes([b]) for b in range(256)}
    next_id = 256
    for tok in special_tokens:
        vocab[next_id] = tok.encode("utf-8")
        next_id += 1

    if special_tokens:
        parts = re.split("|".join(map(re.escape, sorted(special_tokens, key=len, reverse=True))), text)
    else:
        parts = [text]
    table = defaultdict(int)
    for part in parts:
        for pre in re.findall(PATTERN, part):
            table[tuple(bytes([x]) for x in pre.encode("utf-8"))] += 1

    merges = []
    while next_id < vocab_size:
        pair_counts = defaultdict(int)
        for word, n in table.items():
            for i in range(len(word) - 1):
                pair_counts[word[i], word[i + 1]] += n
        if not pair_counts:
            break
        # most frequent pair; on a tie I take the first one in sorted order
        best = sorted(pair_counts, key=lambda p: (-pair_counts[p], p))[0]
        merges.append(best)
        vocab[next_id] = best[0] + best[1]
        next_id += 1
        new_table = defaultdict(int)
        for word, n in table.items():
            w, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    w.append(best[0] + best[1])
                    i += 2
                else:
                    w.append(word[i])
                    i += 1
            new_table[tuple(w)] += n
        table = new_table
    return vocab, merges

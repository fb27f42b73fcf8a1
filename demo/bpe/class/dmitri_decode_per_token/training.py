import re

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


def merge_word(word, pair, new):
    result = []
    k = 0
    while k < len(word):
        if word[k:k + 2] == list(pair):
            result.append(new)
            k += 2
        else:
            result.append(word[k])
            k += 1
    return result


def train_bpe(text, vocab_size, special_tokens=()):
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"need vocab_size >= {256 + len(special_tokens)}")
    vocab = {i: bytes([i]) for i in range(256)}
    for sp in special_tokens:
        vocab[len(vocab)] = sp.encode()
    docs = [text]
    if special_tokens:
        docs = re.split("|".join(re.escape(sp) for sp in sorted(special_tokens, key=len)[::-1]), text)
    counts = {}
    for doc in docs:
        for m in re.finditer(PATTERN, doc):
            key = m.group(0)
            counts[key] = counts.get(key, 0) + 1
    words = {key: [bytes([c]) for c in key.encode()] for key in counts}
    merges = []
    while len(vocab) < vocab_size:
        pairs = {}
        for key, word in words.items():
            for a, b in zip(word[:-1], word[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + counts[key]
        if len(pairs) == 0:
            break
        best = max(pairs.items(), key=lambda item: (item[1], item[0]))[0]
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        for key in words:
            words[key] = merge_word(words[key], best, best[0] + best[1])
    return vocab, merges

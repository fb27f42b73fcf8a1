import re

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


class Tokenizer:
    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = dict(vocab)
        self.specials = special_tokens or []
        for sp in self.specials:
            if sp.encode() not in self.vocab.values():
                self.vocab[max(self.vocab) + 1] = sp.encode()
        self.lookup = {tok: i for i, tok in self.vocab.items()}
        self.ranks = {tuple(pair): r for r, pair in enumerate(merges)}

    def encode(self, text):
        out = []
        if self.specials:
            splitter = re.compile("(" + "|".join(re.escape(sp) for sp in sorted(self.specials, key=len)[::-1]) + ")")
            parts = splitter.split(text)
        else:
            parts = [text]
        for part in parts:
            if part in self.specials:
                out.append(self.lookup[part.encode()])
                continue
            for m in re.finditer(PATTERN, part):
                toks = [bytes([c]) for c in m.group(0).encode()]
                while True:
                    pairs = [(self.ranks[p], j) for j, p in enumerate(zip(toks, toks[1:])) if p in self.ranks]
                    if not pairs:
                        break
                    r, _ = min(pairs)
                    a, b = next(p for p in zip(toks, toks[1:]) if self.ranks.get(p) == r)
                    new, j = [], 0
                    while j < len(toks):
                        if j + 1 < len(toks) and toks[j] == a and toks[j + 1] == b:
                            new.append(a + b)
                            j += 2
                        else:
                            new.append(toks[j])
                            j += 1
                    toks = new
                out.extend(self.lookup[t] for t in toks)
        return out

    def decode(self, ids):
        # each token to text, then join
        return "".join(self.vocab[i].decode("utf-8", errors="replace") for i in ids)

"""Bruno's tokenizer: scans for special tokens by hand, caches each word's ids."""
import re

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


class Tokenizer:
    def __init__(self, vocab, merges, special_tokens=None):
        self.id_of = {}
        self.bytes_of = {}
        for i, b in vocab.items():
            self.id_of[b] = i
            self.bytes_of[i] = b
        self.specials = sorted(special_tokens or [], key=len, reverse=True)
        for s in special_tokens or []:
            if s.encode("utf-8") not in self.id_of:
                new_id = max(self.bytes_of) + 1
                self.id_of[s.encode("utf-8")] = new_id
                self.bytes_of[new_id] = s.encode("utf-8")
        self.rank = {}
        for r, (a, b) in enumerate(merges):
            self.rank[(a, b)] = r
        self.cache = {}

    def word_ids(self, word):
        if word in self.cache:
            return self.cache[word]
        syms = [bytes([x]) for x in word.encode("utf-8")]
        while len(syms) > 1:
            ranks = [self.rank.get((syms[i], syms[i + 1]), len(self.rank)) for i in range(len(syms) - 1)]
            r = min(ranks)
            if r == len(self.rank):
                break
            pair = None
            for i in range(len(syms) - 1):
                if ranks[i] == r:
                    pair = (syms[i], syms[i + 1])
                    break
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and (syms[i], syms[i + 1]) == pair:
                    out.append(syms[i] + syms[i + 1])
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        ids = [self.id_of[s] for s in syms]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        ids = []
        start = 0
        pos = 0
        while pos < len(text):
            hit = next((s for s in self.specials if text.startswith(s, pos)), None)
            if hit is None:
                pos += 1
                continue
            for w in re.findall(PATTERN, text[start:pos]):
                ids.extend(self.word_ids(w))
            ids.append(self.id_of[hit.encode("utf-8")])
            pos += len(hit)
            start = pos
        for w in re.findall(PATTERN, text[start:]):
            ids.extend(self.word_ids(w))
        return ids

    def decode(self, ids):
        data = b"".join(self.bytes_of[i] for i in ids)
        return data.decode("utf-8", errors="replace")

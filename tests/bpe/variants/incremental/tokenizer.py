"""A correct variant: decode through a bytearray; encode with a rank dict and a while loop over indexes."""
import re

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


class Tokenizer:
    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = {int(k): bytes(v) for k, v in vocab.items()}
        self.specials = list(special_tokens) if special_tokens else []
        for s in self.specials:
            if s.encode() not in set(self.vocab.values()):
                self.vocab[max(self.vocab) + 1] = s.encode()
        self.inverse = {v: k for k, v in self.vocab.items()}
        self.rank = {(a, b): r for r, (a, b) in enumerate(merges)}

    def _word(self, data):
        parts = [data[i:i + 1] for i in range(len(data))]
        while True:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = self.rank.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                return parts
            pair = (parts[at], parts[at + 1])
            i, out = 0, []
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
                    out.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out

    def encode(self, text):
        ids = []
        i = 0
        order = sorted(self.specials, key=len, reverse=True)
        while i <= len(text):
            hits = [(text.find(s, i), -len(s), s) for s in order if text.find(s, i) >= 0]
            end = min(hits)[0] if hits else len(text)
            for m in re.finditer(PATTERN, text[i:end]):
                ids += [self.inverse[t] for t in self._word(m.group().encode("utf-8"))]
            if not hits:
                break
            s = min(hits)[2]
            ids.append(self.inverse[s.encode()])
            i = end + len(s)
        return ids

    def decode(self, ids):
        buf = bytearray()
        for i in ids:
            buf += self.vocab[i]
        return bytes(buf).decode("utf-8", "replace")

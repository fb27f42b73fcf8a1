import re

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


class Tokenizer:
    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = dict(vocab)
        self.special_tokens = special_tokens or []
        for s in self.special_tokens:
            if s.encode("utf-8") not in self.vocab.values():
                self.vocab[max(self.vocab) + 1] = s.encode("utf-8")
        self.byte_to_id = {v: k for k, v in self.vocab.items()}
        self.merge_rank = {tuple(m): r for r, m in enumerate(merges)}

    def _bpe(self, tok):
        parts = [bytes([c]) for c in tok]
        while len(parts) >= 2:
            candidates = [(self.merge_rank.get(p, float("inf")), i) for i, p in enumerate(zip(parts, parts[1:]))]
            rank, _ = min(candidates)
            if rank == float("inf"):
                break
            a, b = [p for p in self.merge_rank if self.merge_rank[p] == rank][0]
            merged = []
            i = 0
            while i < len(parts):
                if i < len(parts) - 1 and parts[i] == a and parts[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts

    def encode(self, text):
        if self.special_tokens:
            pat = "(" + "|".join(re.escape(s) for s in sorted(self.special_tokens, key=len, reverse=True)) + ")"
            chunks = re.split(pat, text)
        else:
            chunks = [text]
        out = []
        for chunk in chunks:
            if chunk in self.special_tokens:
                out.append(self.byte_to_id[chunk.encode("utf-8")])
                continue
            for word in re.findall(PATTERN, chunk):
                out += [self.byte_to_id[p] for p in self._bpe(word.encode("utf-8"))]
        return out

    def decode(self, ids):
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")

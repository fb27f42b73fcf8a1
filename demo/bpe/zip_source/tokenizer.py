"""Ines Kaya, BPE tokenizer."""
import re

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


class Tokenizer:
    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = vocab
        self.specials = list(special_tokens) if special_tokens else []
        for s in self.specials:
            if s.encode("utf-8") not in set(self.vocab.values()):
                self.vocab[max(self.vocab) + 1] = s.encode("utf-8")
        self.token_id = {token: i for i, token in self.vocab.items()}
        self.rank = {}
        for r, (left, right) in enumerate(merges):
            self.rank[(bytes(left), bytes(right))] = r

    def _bpe(self, piece):
        parts = [bytes([b]) for b in piece.encode("utf-8")]
        while True:
            best = None
            for k in range(len(parts) - 1):
                r = self.rank.get((parts[k], parts[k + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, parts[k], parts[k + 1])
            if best is None:
                return parts
            _, left, right = best
            joined, k = [], 0
            while k < len(parts):
                if k + 1 < len(parts) and parts[k] == left and parts[k + 1] == right:
                    joined.append(left + right)
                    k += 2
                else:
                    joined.append(parts[k])
                    k += 1
            parts = joined

    def encode(self, text):
        ids = []
        if self.specials:
            longest = sorted(self.specials, key=len, reverse=True)
            pieces = re.split("(" + "|".join(re.escape(s) for s in longest) + ")", text)
        else:
            pieces = [text]
        for piece in pieces:
            if piece in self.specials:
                ids.append(self.token_id[piece.encode("utf-8")])
                continue
            for word in re.findall(PATTERN, piece):
                ids += [self.token_id[p] for p in self._bpe(word)]
        return ids

    def decode(self, ids):
        data = bytearray()
        for i in ids:
            data.extend(self.vocab[i])
        return data.decode("utf-8", errors="replace")

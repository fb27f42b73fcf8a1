"""A correct variant: encode applies every merge in the order learned, each over the whole pre-token
(the same tokens as applying the earliest-learned merge present, again and again)."""
import re

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


class Tokenizer:
    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = dict(vocab)
        self.merges = [tuple(m) for m in merges]
        self.special_tokens = special_tokens or []
        for tok in self.special_tokens:
            b = tok.encode("utf-8")
            if b not in self.vocab.values():
                self.vocab[max(self.vocab) + 1] = b
        self.lookup = {b: i for i, b in self.vocab.items()}

    def _apply(self, word):
        for a, b in self.merges:
            if len(word) < 2:
                break
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        return word

    def encode(self, text):
        if self.special_tokens:
            alternatives = "|".join(re.escape(s) for s in sorted(self.special_tokens, key=len, reverse=True))
            parts = re.split(f"({alternatives})", text)
        else:
            parts = [text]
        result = []
        for part in parts:
            if part in self.special_tokens:
                result.append(self.lookup[part.encode("utf-8")])
            else:
                for w in re.findall(PATTERN, part):
                    result.extend(self.lookup[t] for t in self._apply([bytes([c]) for c in w.encode("utf-8")]))
        return result

    def decode(self, ids):
        return b"".join(map(self.vocab.__getitem__, ids)).decode(errors="replace")

import re

PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


class Tokenizer:
    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = {k: v for k, v in vocab.items()}
        self.special = list(special_tokens) if special_tokens else []
        for tok in self.special:
            if tok.encode("utf-8") not in self.vocab.values():
                self.vocab[max(self.vocab) + 1] = tok.encode("utf-8")
        self.encoder = {v: k for k, v in self.vocab.items()}
        self.merges = [tuple(m) for m in merges]

    def _encode_word(self, data):
        word = [bytes([x]) for x in data]
        for a, b in self.merges:  # applying them in the order learned
            i, w = 0, []
            while i < len(word):
                if i < len(word) - 1 and word[i] == a and word[i + 1] == b:
                    w.append(a + b)
                    i += 2
                else:
                    w.append(word[i])
                    i += 1
            word = w
        return [self.encoder[t] for t in word]

    def encode(self, text):
        if not self.special:
            pieces = [text]
        else:
            regex = "(" + "|".join(map(re.escape, sorted(self.special, key=len, reverse=True))) + ")"
            pieces = re.split(regex, text)
        ids = []
        for n, piece in enumerate(pieces):
            if n % 2:
                ids.append(self.encoder[piece.encode("utf-8")])
            else:
                for pre in re.findall(PATTERN, piece):
                    ids += self._encode_word(pre.encode("utf-8"))
        return ids

    def decode(self, ids):
        return b"".join([self.vocab[i] for i in ids]).decode("utf-8", "replace")

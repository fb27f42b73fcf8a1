class Tokenizer:
    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = dict(vocab)
        self.special_tokens = list(special_tokens or [])
        for s in self.special_tokens:
            if s.encode("utf-8") not in self.vocab.values():
                self.vocab[max(self.vocab) + 1] = s.encode("utf-8")
        self.ids = {b: i for i, b in self.vocab.items()}
        self.merges = {tuple(m): r for r, m in enumerate(merges)}

    def _encode_plain(self, text):
        seq = [bytes([b]) for b in text.encode("utf-8")]
        while len(seq) > 1:
            found = [(self.merges[p], p) for p in zip(seq, seq[1:]) if p in self.merges]
            if not found:
                break
            best = min(found)[1]
            out, i = [], 0
            while i < len(seq):
                if i + 1 < len(seq) and (seq[i], seq[i + 1]) == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            seq = out
        return [self.ids[t] for t in seq]

    def encode(self, text):
        ids = []
        rest = text
        specials = sorted(self.special_tokens, key=len, reverse=True)
        while rest:
            cut = [(rest.find(s), -len(s), s) for s in specials if s in rest]
            if not cut:
                ids += self._encode_plain(rest)
                break
            at, _, s = min(cut)
            ids += self._encode_plain(rest[:at])
            ids.append(self.ids[s.encode("utf-8")])
            rest = rest[at + len(s):]
        return ids

    def decode(self, ids):
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")

"""A correct variant: each pre-token's tokens are remembered (a cache that grows across calls), and
decode keeps the vocabulary as a list indexed by id."""
import re

# The pre-tokeniser of handout §2, the same pattern as in training.py: encoding must cut a text
# where training cut it, or it meets pairs that training never counted.
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""


class Tokenizer:
    """Encodes text to token ids and back with a vocabulary and merges from train_bpe (handout §4–§6).

    Tokenizer(vocab, merges, special_tokens=None)
      vocab: dict[int, bytes]; merges: list[tuple[bytes, bytes]], in the order they were learned;
      special_tokens: None or a list of str. A special token whose UTF-8 bytes are not in the
      vocabulary is added to it with the next unused id (one more than the largest), in the order given.
    encode(text) -> list[int]; decode(ids) -> str; decode(encode(text)) == text for any str that
    encodes to UTF-8.
    """

    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = dict(vocab)  # a copy: adding special tokens never changes the caller's dict
        self.special_tokens = list(special_tokens or [])
        for token in self.special_tokens:
            if token.encode("utf-8") not in self.vocab.values():
                self.vocab[max(self.vocab) + 1] = token.encode("utf-8")
        self.ids = {token: i for i, token in self.vocab.items()}  # bytes -> id
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.cache = {}
        self.table = [self.vocab.get(i, b"") for i in range(max(self.vocab) + 1)]  # an earlier merge has a lower rank
        # Longest first: "<|eot|><|eot|>" must win over the "<|eot|>" it starts with (handout §6).
        longest_first = sorted(self.special_tokens, key=len, reverse=True)
        # A capturing group: re.split then keeps the special tokens it cuts at, at the odd positions.
        self.special_re = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")") if longest_first else None

    def encode(self, text):
        """The ids of `text` (handout §4, §6): special tokens whole, every other piece cut into pre-tokens
        (§2) and each pre-token's bytes merged by rank, the earliest-learned merge present first."""
        pieces = self.special_re.split(text) if self.special_re else [text]
        ids = []
        for k, piece in enumerate(pieces):
            if k % 2 == 1:  # a special token: one id, never split
                ids.append(self.ids[piece.encode("utf-8")])
                continue
            for pretoken in re.findall(PATTERN, piece):
                if pretoken not in self.cache:
                    self.cache[pretoken] = [self.ids[t] for t in self._merge(pretoken.encode("utf-8"))]
                ids.extend(self.cache[pretoken])
        return ids

    def _merge(self, data):
        """The tokens of one pre-token's bytes once every merge that applies has been applied (handout §4).
        A helper of encode: you may write encode without it."""
        word = [bytes([b]) for b in data]
        while len(word) > 1:
            ranked = [(self.ranks[pair], pair) for pair in zip(word, word[1:]) if pair in self.ranks]
            if not ranked:
                break
            _, best = min(ranked)  # the merge learned first among those present
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def decode(self, ids):
        """The text of `ids` (handout §5): the tokens' bytes joined, then decoded as UTF-8 once, with
        errors="replace", so that a character split across tokens comes back whole and bytes that
        are not UTF-8 become U+FFFD."""
        return b"".join([self.table[i] for i in ids]).decode("utf-8", "replace")

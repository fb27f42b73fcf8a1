"""Tasks 2–4: a byte-level BPE tokenizer that applies learned merges (handout §4–§6)."""
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
        # TODO Task 2 · Tokenizer.__init__: replace these two lines with your code (handout §4–§6).
        raise NotImplementedError("Task 2 · Tokenizer.__init__: not implemented yet (handout §4–§6)")

    def encode(self, text):
        """The ids of `text` (handout §4, §6): special tokens whole, every other piece cut into pre-tokens
        (§2) and each pre-token's bytes merged by rank, the earliest-learned merge present first."""
        # TODO Task 3 · encode: replace these two lines with your code (handout §4, §6).
        raise NotImplementedError("Task 3 · encode: not implemented yet (handout §4, §6)")

    def _merge(self, data):
        """The tokens of one pre-token's bytes once every merge that applies has been applied (handout §4).
        A helper of encode: you may write encode without it."""
        # TODO Task 3 · encode: replace these two lines with your code (handout §4).
        raise NotImplementedError("Task 3 · encode: not implemented yet (handout §4)")

    def decode(self, ids):
        """The text of `ids` (handout §5): the tokens' bytes joined, then decoded as UTF-8 once, with
        errors="replace", so that a character split across tokens comes back whole and bytes that
        are not UTF-8 become U+FFFD."""
        # TODO Task 4 · decode: replace these two lines with your code (handout §5).
        raise NotImplementedError("Task 4 · decode: not implemented yet (handout §5)")

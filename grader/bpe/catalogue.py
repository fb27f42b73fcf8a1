"""The bug catalogue: mistakes students make writing a byte-level BPE (data only).

Each entry names its part, the hidden test it must fail (rubric id), and the patches (file, exact text,
replacement) that turn a copy of the reference (solutions/bpe) into a submission with the bug; its
hint lives in rubric.toml under [hints."<id>"]. The engine builds the mutants and replays a failing
student's calls on them to name the misconception (grader/judging/mutants.py); tests/bpe/test_catalogue.py
checks that every patch still applies to the reference.
"""
from __future__ import annotations

from grader.judging.mutants import Bug

TR, TK = "training.py", "tokenizer.py"


def _b(id, component, test, *patches):
    return Bug(id, component, f"{component}.{test}", tuple(patches))


# -- training.py ----------------------------------------------------------------------------------
T_PRETOKENS = "        for pretoken in re.findall(PATTERN, piece):\n"
T_SPLIT = "    for piece in split_on_special(text, special_tokens):\n"
T_BEST = "        best = max(pairs, key=lambda pair: (pairs[pair], pair))  # the most frequent; ties: the greatest pair\n"
T_COUNT = "            for pair in zip(word, word[1:]):\n                pairs[pair] += count\n"
T_ADVANCE = "            i += 2  # the pair's second token is used up: (a, a, a) becomes (aa, a), never (aa, aa)\n"
T_WHILE = "    while len(vocab) < vocab_size:\n"
T_SPECIALS = '    for token in special_tokens:\n        vocab[len(vocab)] = token.encode("utf-8")\n'
T_RETURN = "    return vocab, merges\n"

# -- tokenizer.py ---------------------------------------------------------------------------------
K_PIECES = "        pieces = self.special_re.split(text) if self.special_re else [text]\n"
K_SPECIAL_RE = ('        self.special_re = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")") '
                'if longest_first else None\n')
K_PRETOKENS = "            for pretoken in re.findall(PATTERN, piece):\n"
K_LONGEST = "        longest_first = sorted(self.special_tokens, key=len, reverse=True)\n"
K_ADD = ('            if token.encode("utf-8") not in self.vocab.values():\n'
         '                self.vocab[max(self.vocab) + 1] = token.encode("utf-8")\n')
K_BEST = "            _, best = min(ranked)  # the merge learned first among those present\n"
K_MERGE_LOOP = "        word = [bytes([b]) for b in data]\n        while len(word) > 1:\n"
K_DECODE = '        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")\n'
K_COPY = "        self.vocab = dict(vocab)  # a copy: adding special tokens never changes the caller's dict\n"

# Encoding by the longest vocabulary entry at each position, as WordPiece does, instead of by merges.
GREEDY = '''        word, start = [], 0
        while start < len(data):
            end = len(data)
            while end > start + 1 and data[start:end] not in self.ids:
                end -= 1
            word.append(data[start:end])
            start = end
        return word
        word = [bytes([b]) for b in data]
        while len(word) > 1:
'''

BUGS = (
    # training
    _b("train.across_pretokens", "training", "pretokens", (TR, T_PRETOKENS, "        for pretoken in [piece]:\n")),
    _b("train.tie_smallest", "training", "ties",
       (TR, T_BEST, "        best = min(pairs, key=lambda pair: (-pairs[pair], pair))\n")),
    _b("train.tie_first_seen", "training", "ties", (TR, T_BEST, "        best = max(pairs, key=pairs.get)\n")),
    # Ties compared by the token each pair makes (a + b), not by the pair: (" ab", "c") makes " abc" < " az".
    _b("train.tie_by_merged_token", "training", "ties",
       (TR, T_BEST, "        best = max(pairs, key=lambda pair: (pairs[pair], pair[0] + pair[1]))\n")),
    _b("train.pair_once_per_word", "training", "overlap",
       (TR, T_COUNT, "            for pair in set(zip(word, word[1:])):\n                pairs[pair] += count\n")),
    _b("train.overlapping_merge", "training", "overlap", (TR, T_ADVANCE, "            i += 1\n")),
    # Counting that skips ahead as merging does: (a, a, a) counted as one (a, a).
    _b("train.count_skips_runs", "training", "overlap",
       (TR, T_COUNT, "            i = 0\n            while i < len(word) - 1:\n"
                     "                pairs[word[i], word[i + 1]] += count\n"
                     "                i += 2 if word[i] == word[i + 1] else 1\n")),
    _b("train.ignores_counts", "training", "reference",
       (TR, T_COUNT, "            for pair in zip(word, word[1:]):\n                pairs[pair] += 1\n")),
    _b("train.specials_counted", "training", "special_tokens", (TR, T_SPLIT, "    for piece in [text]:\n")),
    _b("train.specials_after_merges", "training", "special_tokens",
       (TR, T_SPECIALS, ""),
       (TR, T_WHILE, "    while len(vocab) < vocab_size - len(special_tokens):\n"),
       (TR, T_RETURN, '    for token in special_tokens:\n        vocab[len(vocab)] = token.encode("utf-8")\n' + T_RETURN)),
    _b("train.one_merge_too_many", "training", "vocab_size", (TR, T_WHILE, "    while len(vocab) <= vocab_size:\n")),
    _b("train.specials_not_in_size", "training", "vocab_size",
       (TR, T_WHILE, "    while len(vocab) < vocab_size + len(special_tokens):\n")),
    # tokenizer
    _b("tok.greedy_longest", "tokenizer", "rank_order", (TK, K_MERGE_LOOP, GREEDY)),
    _b("tok.leftmost_merge", "tokenizer", "rank_order", (TK, K_BEST, "            _, best = ranked[0]\n")),
    _b("tok.no_pretokens", "tokenizer", "pretokens", (TK, K_PRETOKENS, "            for pretoken in [piece]:\n")),
    _b("tok.splits_specials", "tokenizer", "special_tokens", (TK, K_PIECES, "        pieces = [text]\n")),
    _b("tok.special_added_twice", "tokenizer", "special_tokens",
       (TK, K_ADD, '            self.vocab[max(self.vocab) + 1] = token.encode("utf-8")\n')),
    _b("tok.mutates_vocab", "tokenizer", "vocab_unchanged", (TK, K_COPY, "        self.vocab = vocab\n")),
    # The tokens joined into a pattern as they are: "<|end|>"'s | then splits the pattern itself.
    _b("tok.special_not_escaped", "tokenizer", "special_tokens",
       (TK, K_SPECIAL_RE, K_SPECIAL_RE.replace("map(re.escape, longest_first)", "longest_first"))),
    _b("tok.shortest_special_first", "tokenizer", "special_overlap",
       (TK, K_LONGEST, "        longest_first = list(self.special_tokens)\n")),
    _b("dec.per_token_strict", "tokenizer", "decode_split",
       (TK, K_DECODE, '        return "".join(self.vocab[i].decode("utf-8") for i in ids)\n')),
    _b("dec.per_token_replace", "tokenizer", "decode_split",
       (TK, K_DECODE, '        return "".join(self.vocab[i].decode("utf-8", errors="replace") for i in ids)\n')),
    _b("dec.strict", "tokenizer", "invalid_bytes",
       (TK, K_DECODE, '        return b"".join(self.vocab[i] for i in ids).decode("utf-8")\n')),
)

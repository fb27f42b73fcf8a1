from collections import Counter


def train_bpe(text, vocab_size, special_tokens=()):
    if vocab_size < 256 + len(special_tokens):
        raise ValueError("vocab_size too small")
    vocab = {i: bytes([i]) for i in range(256)}
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    pieces = [text]
    for s in special_tokens:
        pieces = [q for p in pieces for q in p.split(s)]
    # the whole text as one sequence of bytes per piece
    seqs = [[bytes([b]) for b in p.encode("utf-8")] for p in pieces]
    merges = []
    while len(vocab) < vocab_size:
        stats = Counter()
        for seq in seqs:
            for pair in zip(seq, seq[1:]):
                stats[pair] += 1
        if not stats:
            break
        best = max(stats, key=lambda p: (stats[p], p))
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        for n, seq in enumerate(seqs):
            out, i = [], 0
            while i < len(seq):
                if i + 1 < len(seq) and (seq[i], seq[i + 1]) == best:
                    out.append(seq[i] + seq[i + 1])
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            seqs[n] = out
    return vocab, merges

"""The byte-level BPE lesson: train_bpe, and a Tokenizer that encodes and decodes (assignments/bpe)."""

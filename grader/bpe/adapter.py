"""The BPE lesson's requests: what its hidden tests ask a submission, over the engine's call plumbing.

`train_bpe(...)` is one call of the student's function; `tokenizer(...)` builds one Tokenizer inside
the sandboxed child and runs a list of steps on it (encode, decode, ...), in order, so that a test can
call one instance many times and round-trip a student's own ids (`Earlier(i)`).
"""
from __future__ import annotations

from grader.running.calls import Adapter as Calls
from grader.running.calls import Argument, Earlier, Method

__all__ = ["Adapter", "Argument", "Earlier", "Method", "encode", "decode"]


def shown(text: str, limit: int = 40) -> str:
    """A text as feedback names it: its repr, cut in the middle when long."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit // 2]!r}…{text[-limit // 4:]!r} ({len(text)} characters)"


def encode(text: str) -> Method:
    return Method("encode", text)


def decode(ids) -> Method:
    return Method("decode", ids)


class Adapter(Calls):
    """The engine's adapter with the BPE lesson's two request builders, one per contract module."""

    def train_bpe(self, text: str, vocab_size: int, special_tokens=()):
        """train_bpe(text, vocab_size[, special_tokens]); the special tokens, when any, by position."""
        args = (text, vocab_size, list(special_tokens)) if special_tokens else (text, vocab_size)
        extra = f", {list(special_tokens)!r}" if special_tokens else ""
        return self.run("training", "train_bpe", args=args, request=f"train_bpe({shown(text)}, {vocab_size}{extra})")

    def tokenizer(self, vocab: dict, merges: list, special_tokens=None, *, steps: list, about: str = "",
                  keep_going: bool = False):
        """Tokenizer(vocab, merges[, special_tokens]), then `steps` on that one instance (`Argument(0)` reads
        back the vocab it was given). `about` names the vocabulary in feedback ("the handout's vocabulary");
        keep_going: a step that raises does not stop the later ones."""
        init = (vocab, merges) if special_tokens is None else (vocab, merges, list(special_tokens))
        extra = "" if special_tokens is None else f", {list(special_tokens)!r}"
        named = about or f"a vocabulary of {len(vocab)} tokens"
        return self.session("tokenizer", "Tokenizer", init=init, steps=steps, keep_going=keep_going,
                            request=f"Tokenizer({named}{extra})")

"""Runtime detection of the library attention the assignment forbids.

Computing attention is the point of Day 13, so a submission may not call
F.scaled_dot_product_attention, nn.MultiheadAttention or the nn.Transformer* layers.
`install()` wraps them (before any student module is imported) so that every use is
recorded while student code runs, however it was reached (an alias, a subclass, a helper
module). The grader process adds a static scan of the source (grader/score.py).

Runs inside the sandboxed child: imports only torch and the standard library.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F

FUNCTIONS = ("scaled_dot_product_attention", "multi_head_attention_forward")
CLASSES = (
    "MultiheadAttention",
    "Transformer",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerDecoder",
)
NAMES = FUNCTIONS + CLASSES

_lock = threading.Lock()
_installed = False
_recorders: list[set] = []
seen_ever: set[str] = set()


def _record(name: str) -> None:
    seen_ever.add(name)
    for recorder in _recorders:
        recorder.add(name)


@contextlib.contextmanager
def recording():
    """Collect, into the yielded set, the forbidden names used while the block runs."""
    seen: set[str] = set()
    _recorders.append(seen)
    try:
        yield seen
    finally:
        # by identity: two recorders holding the same names compare equal
        del _recorders[next(i for i, r in enumerate(_recorders) if r is seen)]


def _wrap_function(original, name):
    @functools.wraps(original)
    def watched(*args, **kwargs):
        _record(name)
        return original(*args, **kwargs)

    watched.__grader_watched__ = True
    return watched


def _wrap_method(cls, method, name):
    original = cls.__dict__.get(method)
    if original is None or getattr(original, "__grader_watched__", False):
        return

    @functools.wraps(original)
    def watched(self, *args, **kwargs):
        _record(name)
        return original(self, *args, **kwargs)

    watched.__grader_watched__ = True
    setattr(cls, method, watched)


def install() -> None:
    """Wrap the forbidden APIs once per process (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        for name in FUNCTIONS:
            original = getattr(F, name, None)
            if original is not None and not getattr(original, "__grader_watched__", False):
                setattr(F, name, _wrap_function(original, name))
            native = getattr(torch._C._nn, name, None)
            if native is not None and not getattr(native, "__grader_watched__", False):
                setattr(torch._C._nn, name, _wrap_function(native, name))
        for name in CLASSES:
            cls = getattr(nn, name, None)
            if cls is None:
                continue
            _wrap_method(cls, "__init__", name)
            _wrap_method(cls, "forward", name)
        _installed = True


def is_installed() -> bool:
    return _installed

"""The one seam between the hidden tests and a submission.

Hidden tests never touch student objects: they call methods of `Adapter` (`student.sdpa(...)`,
`student.mha(...)`, ...), which turn the request into a call (header + arrays, see
grader/execute.py) and send it through a transport:

- `InProcessTransport(directory)` runs the executor in this process on trusted code only
  (the reference, catalogue mutants, our correct variants);
- the engine's `SandboxTransport` (grader/sandbox.py) runs it in the sandboxed child on student code.

The adapter records every call with the student's answer, so that grader/score.py can replay
the calls of a failing test on the bug-catalogue mutants and name the misconception.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grader.execute import ModuleLoader, execute
from grader.forbidden import MARK

# Parameter names the contract allows, most usual first (assignments/day13/CONTRACT.md).
PARAM_PATHS = {
    "W_q": ("W_q.weight", "Wq.weight"),
    "W_k": ("W_k.weight", "Wk.weight"),
    "W_v": ("W_v.weight", "Wv.weight"),
    "qkv.weight": ("qkv.weight",),
    "qkv.bias": ("qkv.bias",),
    "out.weight": ("out.weight", "W_o.weight", "Wo.weight", "W_O.weight"),
    "out.bias": ("out.bias", "W_o.bias", "Wo.bias", "W_O.bias"),
    # The FFN's second Linear: index 2 in the contract's Sequential(Linear, GELU, Linear); index 3
    # when a student adds a Dropout (inactive in eval mode: still correct); index 1 when the GELU is
    # missing, so that bug costs the numeric tests it breaks rather than every block test.
    "ffn.2.weight": ("ffn.2.weight", "ffn.3.weight", "ffn.1.weight"),
    "ffn.2.bias": ("ffn.2.bias", "ffn.3.bias", "ffn.1.bias"),
}
ATTR_PATHS = {"W_q": ("W_q", "Wq"), "W_k": ("W_k", "Wk"), "W_v": ("W_v", "Wv"), "out": ("out", "W_o", "Wo", "W_O")}


class InProcessTransport:
    """Executes calls in this process on a folder of trusted code (never a student's)."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.loader = ModuleLoader(self.directory, isolated=True)

    def call(self, header: dict, arrays: dict) -> tuple[dict, dict]:
        return execute(header, arrays, loader=self.loader)

    def call_many(self, calls: list[tuple[dict, dict]]) -> list[tuple[dict, dict]]:
        return [self.call(header, arrays) for header, arrays in calls]

    def close(self) -> None:
        pass


class Result:
    """A submission's answer to one call; in a batch, filled in when the batch is sent (on first use)."""

    def __init__(self, header: dict | None = None, arrays: dict | None = None, request: str = "", *, send=None):
        self._header, self._arrays = header, arrays
        self.request = request  # what was asked, in words, for feedback
        self._send = send  # sends the batch this answer belongs to, while it is pending

    def fill(self, header: dict, arrays: dict) -> None:
        self._header, self._arrays, self._send = header, arrays, None

    @property
    def header(self) -> dict:
        return self._answer()[0]

    @property
    def arrays(self) -> dict:
        return self._answer()[1]

    def _answer(self) -> tuple[dict, dict]:
        if self._send is not None:
            self._send()
        return self._header, self._arrays

    @property
    def error(self) -> dict | None:
        return self.header.get("error")

    @property
    def outputs(self) -> list[dict]:
        return self.header.get("outputs") or []

    def array(self, i: int) -> np.ndarray | None:
        outs = self.outputs
        if i < len(outs) and outs[i].get("kind") == "tensor":
            return self.arrays.get(outs[i]["array"])
        return None

    def grad(self, name: str) -> np.ndarray | None:
        key = (self.header.get("grads") or {}).get(name)
        return None if key is None else self.arrays.get(key)

    @property
    def grad_error(self) -> dict | None:
        return self.header.get("grad_error")

    @property
    def inspect(self) -> dict:
        return self.header.get("inspect") or {}

    @property
    def forbidden(self) -> list[str]:
        """Library attention this call met (switched off in the sandboxed child, which says so in the error)."""
        found = []
        for error in (self.header.get("error"), self.header.get("grad_error")):
            message = str(error.get("message", "")) if isinstance(error, dict) else ""
            if MARK in message:
                # "...: torch.nn.modules.activation.MultiheadAttention.forward. Computing ..." -> MultiheadAttention
                dotted = message.split(MARK, 1)[1].lstrip(": ").split(" ", 1)[0].rstrip(".").split(".")
                if dotted[0] != "torch":
                    found.append("the source files of library attention or of the grader")
                    continue
                found.append(next(p for p in reversed(dotted) if p not in ("forward", "__init__", "_forward_impl")))
        return found


@dataclass
class Recorded:
    test: str
    header: dict
    arrays: dict
    result: Result


def call_key(header: dict, arrays: dict) -> str:
    digest = hashlib.sha1(json.dumps(header, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"|{name}|{a.dtype.str}|{a.shape}|".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


@dataclass
class Adapter:
    """Builds calls for the hidden tests; one per submission (or the reference).

    batch=True (a submission's adapter): calls are not sent when made but together, when one of
    their answers is first read or at `send()`; a hidden test asks all its calls before it checks
    any, so each test's calls go to the sandboxed child as one pipelined batch."""

    transport: object
    cache: dict | None = None  # call key -> Result (the reference shares one across a batch)
    record: bool = False
    batch: bool = False
    calls: list = field(default_factory=list)
    current_test: str = ""
    memo: dict = field(default_factory=dict)  # answers the hidden tests share (a probe of the student's function)
    _pending: list = field(default_factory=list)  # (header, arrays, Result) not sent yet

    # -- plumbing ---------------------------------------------------------------------
    def call(self, header: dict, arrays: dict, request: str = "") -> Result:
        arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
        if self.batch:  # sent later: the caller may change its arrays meanwhile
            arrays = {k: v.copy() for k, v in arrays.items()}
        key = call_key(header, arrays) if self.cache is not None else None
        if key is not None and key in self.cache:
            result = self.cache[key]
        elif self.batch:
            result = Result(request=request, send=self.send)
            self._pending.append((header, arrays, result))
        else:
            h, a = self.transport.call(header, arrays)
            result = Result(h, a, request)
            if key is not None:
                self.cache[key] = result
        if self.record:
            self.calls.append(Recorded(self.current_test, header, arrays, result))
        return result

    def send(self) -> None:
        """Send the pending calls as one batch and fill in their answers."""
        pending, self._pending = self._pending, []
        if pending:
            requests = [(header, arrays) for header, arrays, _ in pending]
            call_many = getattr(self.transport, "call_many", None)  # any transport with call() will do
            answers = call_many(requests) if call_many else [self.transport.call(h, a) for h, a in requests]
            for (_, _, result), (h, a) in zip(pending, answers):
                result.fill(h, a)

    # -- self_attention.py -------------------------------------------------------------
    def sdpa(self, Q, K, V, mask=None, *, grad_out=None) -> Result:
        """scaled_dot_product_attention(Q, K, V[, mask]); grad_out = (g_out, g_weights or None)."""
        arrays = {"Q": Q, "K": K, "V": V}
        args = [{"array": "Q"}, {"array": "K"}, {"array": "V"}]
        if mask is not None:
            arrays["mask"] = mask
            args.append({"array": "mask"})
        header = {"op": "function", "module": "self_attention", "name": "scaled_dot_product_attention", "args": args}
        self._grads(header, arrays, grad_out, wrt=["Q", "K", "V"])
        return self.call(header, arrays, f"scaled_dot_product_attention(Q {_s(Q)}, K {_s(K)}, V {_s(V)}{_m(mask)})")

    def causal_mask(self, T: int, **kwargs) -> Result:
        header = {"op": "function", "module": "self_attention", "name": "causal_mask", "args": [T], "kwargs": kwargs}
        return self.call(header, {}, f"causal_mask({T})")

    def self_attention(self, x, weights: dict, mask=None, *, dtype="float32", grad_out=None) -> Result:
        """SelfAttention(d_model, d_k) with W_q, W_k, W_v loaded; forward(x[, mask])."""
        d_k, d_model = weights["W_q"].shape
        return self._module("self_attention", "SelfAttention", [d_model, d_k], {}, x, weights, mask,
                            dtype=dtype, grad_out=grad_out,
                            request=f"SelfAttention({d_model}, {d_k})(x {_s(x)}{_m(mask)}), {dtype}")

    # -- multihead.py ------------------------------------------------------------------
    def mha(self, x, weights: dict, n_heads: int, mask=None, *, dtype="float32", grad_out=None) -> Result:
        d_model = weights["out.weight"].shape[0]
        return self._module("multihead", "MultiHeadAttention", [d_model, n_heads], {}, x, weights, mask,
                            dtype=dtype, grad_out=grad_out,
                            request=f"MultiHeadAttention({d_model}, {n_heads})(x {_s(x)}{_m(mask)}), {dtype}")

    # -- positional.py -----------------------------------------------------------------
    def positional_encoding(self, T: int, d_model: int) -> Result:
        header = {"op": "function", "module": "positional", "name": "positional_encoding", "args": [T, d_model]}
        return self.call(header, {}, f"positional_encoding({T}, {d_model})")

    def pe_module(self, x, d_model: int, max_len: int | None = None, *, dtype="float32") -> Result:
        init = [d_model] if max_len is None else [d_model, max_len]
        return self._module("positional", "PositionalEncoding", init, {}, x, {}, None, dtype=dtype,
                            request=f"PositionalEncoding({', '.join(map(str, init))})(x {_s(x)})")

    # -- block.py ----------------------------------------------------------------------
    def block(self, x, weights: dict, *, n_heads: int, pre_ln: bool, d_ff=None, mask=None,
              dtype="float32", grad_out=None) -> Result:
        """TransformerBlock with the grader's stand-in attention (a multihead bug never costs block points)."""
        d_model = x.shape[-1]
        init_kwargs = {"pre_ln": pre_ln} if d_ff is None else {"d_ff": d_ff, "pre_ln": pre_ln}
        return self._module("block", "TransformerBlock", [d_model, n_heads], init_kwargs, x, weights, mask,
                            dtype=dtype, grad_out=grad_out, standins={"attn": "attention"},
                            request=f"TransformerBlock({d_model}, {n_heads}, "
                                    f"{'' if d_ff is None else f'd_ff={d_ff}, '}pre_ln={pre_ln})(x {_s(x)}{_m(mask)}), {dtype}")

    # -- inspection ---------------------------------------------------------------------
    def inspect(self, module: str, cls: str, init: list, init_kwargs: dict | None = None,
                attrs: tuple[str, ...] = ()) -> Result:
        header = {"op": "inspect", "module": module, "cls": cls, "init": list(init), "init_kwargs": init_kwargs or {},
                  "attrs": [{"name": a, "paths": list(ATTR_PATHS.get(a, (a,)))} for a in attrs]}
        args = ", ".join([*map(str, init), *(f"{k}={v}" for k, v in (init_kwargs or {}).items())])
        return self.call(header, {}, f"{cls}({args})")

    # -- helpers -------------------------------------------------------------------------
    def _module(self, module, cls, init, init_kwargs, x, weights, mask, *, dtype, grad_out=None,
                standins=None, request=""):
        arrays = {"x": np.asarray(x, dtype=dtype)}
        args = [{"array": "x"}]
        if mask is not None:
            arrays["mask"] = mask
            args.append({"array": "mask"})
        params = []
        for i, (name, value) in enumerate(sorted(weights.items())):
            arrays[f"p{i}"] = np.asarray(value, dtype=dtype)
            params.append({"name": name, "paths": list(PARAM_PATHS.get(name, (name,))), "array": f"p{i}"})
        header = {"op": "module", "module": module, "cls": cls, "init": list(init), "init_kwargs": init_kwargs,
                  "dtype": dtype, "params": params, "args": args}
        if standins:
            header["standins"] = standins
        if grad_out is not None:
            header["grad_params"] = True
        self._grads(header, arrays, grad_out, wrt=["x"])
        return self.call(header, arrays, request)

    @staticmethod
    def _grads(header, arrays, grad_out, *, wrt):
        if grad_out is None:
            return
        if not isinstance(grad_out, (tuple, list)):
            grad_out = (grad_out,)
        header["grad_wrt"] = list(wrt)
        header["grad_out"] = {}
        for i, g in enumerate(grad_out):
            if g is not None:
                arrays[f"g{i}"] = g
                header["grad_out"][str(i)] = f"g{i}"


def _s(a) -> str:
    return str(tuple(np.shape(a)))


def _m(mask) -> str:
    if mask is None:
        return ""
    return f", mask {_s(mask)} {np.asarray(mask).dtype}"

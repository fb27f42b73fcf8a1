"""Day 13's requests: what its hidden tests ask a submission (`student.sdpa(...)`, `student.mha(...)`, ...).

Each method turns a request into a call (header + arrays, see grader/running/executor.py); the engine's
`grader.running.calls.Adapter` records, batches and sends it through a transport. lesson.toml declares this
class, and the engine reaches it through the lesson (`Lesson.adapter()`).
"""
from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np

from grader.running import calls

# Where each tensor the hidden tests load, and each attribute they read, is in a student's module: the
# contract's description as data (bindings.toml), sent with the calls and applied by the engine.
with open(Path(__file__).with_name("bindings.toml"), "rb") as _f:
    BINDINGS = tomllib.load(_f)


class Adapter(calls.Adapter):
    """The engine's adapter with Day 13's request builders, one per graded name of the contract."""

    bindings = BINDINGS["params"]
    attr_paths = {name: tuple(paths) for name, paths in BINDINGS["attributes"].items()}
    free_dtypes = {name: tuple(rule["free_dtype"]) for name, rule in BINDINGS.get("outputs", {}).items()}

    # -- self_attention.py -------------------------------------------------------------
    def sdpa(self, Q, K, V, mask=None, *, grad_out=None, seed=None) -> calls.Result:
        """scaled_dot_product_attention(Q, K, V[, mask]); grad_out = (g_out, g_weights or None); `seed` runs the same
        call under another random seed."""
        arrays = {"Q": Q, "K": K, "V": V}
        args = [{"array": "Q"}, {"array": "K"}, {"array": "V"}]
        if mask is not None:
            arrays["mask"] = mask
            args.append({"array": "mask"})
        header = {"op": "function", "module": "self_attention", "name": "scaled_dot_product_attention", "args": args}
        if seed is not None:
            header["seed"] = int(seed)
        self._grads(header, arrays, grad_out, wrt=["Q", "K", "V"])
        return self.call(header, arrays, f"scaled_dot_product_attention(Q {_s(Q)}, K {_s(K)}, V {_s(V)}{_m(mask)})")

    def causal_mask(self, T: int, **kwargs) -> calls.Result:
        header = {"op": "function", "module": "self_attention", "name": "causal_mask", "args": [T], "kwargs": kwargs}
        return self.call(header, {}, f"causal_mask({T})")

    def self_attention(self, x, weights: dict, mask=None, *, dtype="float32", grad_out=None) -> calls.Result:
        """SelfAttention(d_model, d_k) with W_q, W_k, W_v loaded; forward(x[, mask])."""
        d_k, d_model = weights["W_q"].shape
        return self._module("self_attention", "SelfAttention", [d_model, d_k], {}, x, weights, mask,
                            dtype=dtype, grad_out=grad_out,
                            request=f"SelfAttention({d_model}, {d_k})(x {_s(x)}{_m(mask)}), {dtype}")

    # -- multihead.py ------------------------------------------------------------------
    def mha(self, x, weights: dict, n_heads: int, mask=None, *, dtype="float32", grad_out=None,
            seed=None) -> calls.Result:
        """MultiHeadAttention(d_model, n_heads) with qkv and out loaded; forward(x[, mask]). `seed` runs the same call
        under another random seed."""
        d_model = weights["out.weight"].shape[0]
        return self._module("multihead", "MultiHeadAttention", [d_model, n_heads], {}, x, weights, mask,
                            dtype=dtype, grad_out=grad_out, seed=seed,
                            request=f"MultiHeadAttention({d_model}, {n_heads})(x {_s(x)}{_m(mask)}), {dtype}")

    # -- positional.py -----------------------------------------------------------------
    def positional_encoding(self, T: int, d_model: int) -> calls.Result:
        header = {"op": "function", "module": "positional", "name": "positional_encoding", "args": [T, d_model]}
        return self.call(header, {}, f"positional_encoding({T}, {d_model})")

    def pe_module(self, x, d_model: int, max_len: int | None = None, *, dtype="float32", grad_out=None) -> calls.Result:
        init = [d_model] if max_len is None else [d_model, max_len]
        return self._module("positional", "PositionalEncoding", init, {}, x, {}, None, dtype=dtype, grad_out=grad_out,
                            request=f"PositionalEncoding({', '.join(map(str, init))})(x {_s(x)})")

    # -- block.py ----------------------------------------------------------------------
    def block(self, x, weights: dict, *, n_heads: int, pre_ln: bool, d_ff=None, mask=None,
              dtype="float32", grad_out=None, seed=None) -> calls.Result:
        """TransformerBlock with the grader's stand-in attention (a multihead bug never costs block points);
        `seed` runs the same call under another random seed."""
        d_model = x.shape[-1]
        init_kwargs = {"pre_ln": pre_ln} if d_ff is None else {"d_ff": d_ff, "pre_ln": pre_ln}
        return self._module("block", "TransformerBlock", [d_model, n_heads], init_kwargs, x, weights, mask,
                            dtype=dtype, grad_out=grad_out, standins={"attn": "attention"}, seed=seed,
                            request=f"TransformerBlock({d_model}, {n_heads}, "
                                    f"{'' if d_ff is None else f'd_ff={d_ff}, '}pre_ln={pre_ln})(x {_s(x)}{_m(mask)}), {dtype}")


def _s(a) -> str:
    return str(tuple(np.shape(a)))


def _m(mask) -> str:
    if mask is None:
        return ""
    return f", mask {_s(mask)} {np.asarray(mask).dtype}"

"""The call executor (grader/running/executor.py)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from grader.running.executor import ModuleLoader, execute, to_numpy
from grader.sandbox.zygote import _lesson_standins

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions" / "day13"
RECAP = ROOT / "tests" / "fixtures" / "correct" / "recap_where"


def sub(tmp_path, **files) -> Path:
    """A submission folder: the reference with some files replaced."""
    folder = tmp_path / "sub"
    folder.mkdir(parents=True, exist_ok=True)
    for p in SOLUTIONS.glob("*.py"):
        shutil.copyfile(p, folder / p.name)
    for name, text in files.items():
        (folder / f"{name}.py").write_text(text)
    return folder


def call_sdpa(loader, Q, mask=None, grad=False):
    arrays = {"Q": Q}
    args = [{"array": "Q"}] * 3
    if mask is not None:
        arrays["m"] = mask
        args = args + [{"array": "m"}]
    header = {"op": "function", "module": "self_attention", "name": "scaled_dot_product_attention", "args": args}
    if grad:
        arrays["g"] = np.ones_like(Q)
        header.update(grad_wrt=["Q"], grad_out={"0": "g"})
    return execute(header, arrays, loader=loader)


def test_function_call_returns_plain_arrays_dtypes_and_gradients():
    loader = ModuleLoader(SOLUTIONS, isolated=True)
    Q = np.random.default_rng(0).standard_normal((2, 3, 4)).astype("float32")
    h, a = call_sdpa(loader, Q, grad=True)
    assert h["error"] is None and h["grad_error"] is None
    assert [o["dtype"] for o in h["outputs"]] == ["float32", "float32"]
    assert a["out0"].shape == (2, 3, 4) and a["out1"].shape == (2, 3, 3)
    np.testing.assert_allclose(a["out1"].sum(-1), 1, atol=1e-6)
    assert h["grads"] == {"Q": "grad:Q"} and a["grad:Q"].shape == Q.shape
    assert all(type(v) is np.ndarray for v in a.values())


def test_module_call_loads_weights_through_either_spelling_and_seeds_nothing_it_should_not():
    x = np.random.default_rng(1).standard_normal((2, 4, 6)).astype("float32")
    w = {n: np.random.default_rng(i).standard_normal((3, 6)).astype("float32") for i, n in enumerate("qkv")}
    results = []
    for folder in (SOLUTIONS, RECAP):
        header = {"op": "module", "module": "self_attention", "cls": "SelfAttention", "init": [6, 3],
                  "params": [{"name": f"W_{n}", "paths": [f"W_{n}.weight", f"W{n}.weight"], "array": n} for n in "qkv"],
                  "args": [{"array": "x"}]}
        h, a = execute(header, {"x": x, **w}, loader=ModuleLoader(folder, isolated=True))
        assert h["error"] is None, h["error"]
        results.append(a["out0"])
    np.testing.assert_allclose(results[0], results[1], atol=1e-6)


def test_a_parameter_of_the_wrong_shape_is_reported_with_its_path():
    header = {"op": "module", "module": "self_attention", "cls": "SelfAttention", "init": [6, 3],
              "params": [{"name": "W_q", "paths": ["W_q.weight"], "array": "w"}], "args": [{"array": "x"}]}
    h, _ = execute(header, {"x": np.zeros((1, 2, 6), "float32"), "w": np.zeros((6, 6), "float32")},
                   loader=ModuleLoader(SOLUTIONS, isolated=True))
    assert h["error"]["type"] == "GraderCallError" and "W_q.weight" in h["error"]["message"]
    assert "(3, 6)" in h["error"]["message"]


def test_inspect_lists_parameters_buffers_and_attributes():
    loader = ModuleLoader(SOLUTIONS, isolated=True)
    h, _ = execute({"op": "inspect", "module": "positional", "cls": "PositionalEncoding", "init": [8, 20],
                    "attrs": [{"name": "pe", "paths": ["pe"]}, {"name": "nope", "paths": ["nope"]}]}, {}, loader=loader)
    info = h["inspect"]
    assert info["parameters"] == {} and info["buffers"] == {"pe": [20, 8]}
    assert info["attrs"]["pe"] == {"path": "pe", "type": "Tensor", "kind": "tensor", "shape": [20, 8], "is_parameter": False}
    assert info["attrs"]["nope"]["kind"] == "missing"


def test_import_failure_is_cached_and_costs_only_its_module(tmp_path):
    folder = sub(tmp_path, positional="import torch\ndef positional_encoding(T, d_model:\n")
    loader = ModuleLoader(folder, isolated=True)
    for _ in range(2):
        h, _ = execute({"op": "function", "module": "positional", "name": "positional_encoding", "args": [3, 4]}, {},
                       loader=loader)
        assert h["error"]["type"] == "SyntaxError" and h["error"]["stage"] == "import"
    h, _ = call_sdpa(loader, np.eye(2, dtype="float32"))
    assert h["error"] is None
    assert list(loader.errors) == ["positional"]


def test_multihead_and_block_run_against_stand_ins_when_their_dependencies_are_broken(tmp_path):
    folder = sub(tmp_path, self_attention="raise ImportError('half done')\n", multihead="def broken(:\n")
    loader = ModuleLoader(folder, isolated=True)
    x = np.random.default_rng(2).standard_normal((1, 3, 8)).astype("float32")
    h, _ = execute({"op": "module", "module": "multihead", "cls": "MultiHeadAttention", "init": [8, 2],
                    "args": [{"array": "x"}]}, {"x": x}, loader=loader)
    assert h["error"]["stage"] == "import" and h["error"]["type"] == "SyntaxError"
    folder2 = sub(tmp_path / "b", self_attention="raise ImportError('half done')\n")
    loader2 = ModuleLoader(folder2, isolated=True)
    h, a = execute({"op": "module", "module": "multihead", "cls": "MultiHeadAttention", "init": [8, 2],
                    "args": [{"array": "x"}]}, {"x": x}, loader=loader2)
    assert h["error"] is None and a["out0"].shape == (1, 3, 8)
    h, a = execute({"op": "module", "module": "block", "cls": "TransformerBlock", "init": [8, 2],
                    "standins": {"attn": "attention"}, "args": [{"array": "x"}]}, {"x": x}, loader=loader)
    assert h["error"] is None and a["out0"].shape == (1, 3, 8)


def test_isolated_loaders_coexist_and_leave_sys_modules_clean(tmp_path):
    before = {n for n in ("self_attention", "multihead", "positional", "block") if n in sys.modules}
    broken = sub(tmp_path, self_attention=(SOLUTIONS / "self_attention.py").read_text().replace(
        "/ math.sqrt(d_k)", ""))
    good, bad = ModuleLoader(SOLUTIONS, isolated=True), ModuleLoader(broken, isolated=True)
    X = np.array([[1, 0], [0, 1], [1, 1]], "float32")
    w_good = call_sdpa(good, X)[1]["out1"]
    w_bad = call_sdpa(bad, X)[1]["out1"]
    assert np.round(w_good[0, 0], 2) == 0.40 and np.round(w_bad[0, 0], 2) == 0.42
    after = {n for n in ("self_attention", "multihead", "positional", "block") if n in sys.modules}
    assert after == before
    assert not list(SOLUTIONS.glob("__pycache__"))


def test_stand_ins_reach_a_sandboxed_loader_only_with_a_call_that_sends_them(tmp_path):
    # A child holds no stand-in until a call brings their source; then a multihead.py whose
    # self_attention.py is broken still runs against the stand-in functions under that name.
    folder = sub(tmp_path, self_attention="raise ImportError('broken on purpose')\n")
    x = np.random.default_rng(2).standard_normal((1, 3, 4)).astype("float32")
    header = {"op": "module", "module": "multihead", "cls": "MultiHeadAttention", "init": [4, 2], "args": [{"array": "x"}]}
    bare = ModuleLoader(folder, isolated=False)
    h, _ = execute(header, {"x": x}, loader=bare)
    assert "stand-ins were not sent" in h["error"]["message"] and bare.standins is None
    units = _lesson_standins().units
    lent = {name: units[name] for name in ("scaled_dot_product_attention", "causal_mask", "StandInSelfAttention")}
    sent = ModuleLoader(folder, isolated=False)
    try:
        h, a = execute(dict(header, standins_source=lent), {"x": x}, loader=sent)
    finally:
        sys.path.remove(str(folder)) if str(folder) in sys.path else None
        for name in ("multihead", "self_attention"):
            sys.modules.pop(name, None)
    assert h["error"] is None and a["out0"].shape == (1, 3, 4)
    # Each stand-in alone, in a namespace of its own that is in no sys.modules.
    namespaces = {name: getattr(getattr(sent.standins, name), "forward", getattr(sent.standins, name)).__globals__
                  for name in lent}
    assert namespaces["causal_mask"] is not namespaces["scaled_dot_product_attention"]
    assert "positional_encoding" not in namespaces["scaled_dot_product_attention"]
    assert not any(ns["__name__"] in sys.modules for ns in namespaces.values())


def test_student_exceptions_even_system_exit_become_error_records(tmp_path):
    folder = sub(tmp_path, positional="import sys\ndef positional_encoding(T, d_model):\n    sys.exit(3)\n")
    h, _ = execute({"op": "function", "module": "positional", "name": "positional_encoding", "args": [3, 4]}, {},
                   loader=ModuleLoader(folder, isolated=True))
    assert h["error"]["type"] == "SystemExit" and h["error"]["stage"] == "call"
    assert 'File "positional.py", line 3' in h["error"]["traceback"]
    assert "execute.py" not in h["error"]["traceback"]


def test_odd_outputs_are_described_or_converted_never_trusted(tmp_path):
    class Sub(torch.Tensor):
        pass

    half = torch.ones(2, 2, dtype=torch.float16)
    assert to_numpy(half).dtype == np.float32
    assert type(to_numpy(torch.ones(3).as_subclass(Sub))) is np.ndarray
    with pytest.raises(TypeError, match="float32 or float64"):
        to_numpy(torch.ones(2, dtype=torch.complex64))
    folder = sub(tmp_path, positional="def positional_encoding(T, d_model):\n    return T, None, [1], 'x', float('nan')\n")
    h, a = execute({"op": "function", "module": "positional", "name": "positional_encoding", "args": [3, 4]}, {},
                   loader=ModuleLoader(folder, isolated=True))
    assert [o["kind"] for o in h["outputs"]] == ["value", "none", "other", "other", "value"] and a == {}
    json.dumps(h, allow_nan=False)  # strict JSON, whatever the student returned


def test_a_detached_output_reports_missing_gradients_instead_of_raising(tmp_path):
    folder = sub(tmp_path, self_attention=(SOLUTIONS / "self_attention.py").read_text().replace(
        "    return out, weights\n", "    return out.detach(), weights.detach()\n"))
    h, a = call_sdpa(ModuleLoader(folder, isolated=True), np.eye(2, dtype="float32"), grad=True)
    assert h["error"] is None and h["grad_error"]["type"] == "NoGradient" and h["grads"] == {"Q": None}


# -- inspect on the meta device (the sandboxed child's loader has meta_inspect=True) ---------------
INSPECTS = [
    ("multihead", "MultiHeadAttention", [512, 8], {}, ("qkv", "out", "h", "d_k")),
    ("multihead", "MultiHeadAttention", [10, 3], {}, ()),  # raises at construction
    ("block", "TransformerBlock", [768, 12], {"d_ff": 3072}, ("attn", "ln1", "ffn")),
    ("positional", "PositionalEncoding", [16, 50], {}, ()),
    ("self_attention", "SelfAttention", [6, 4], {}, ("W_q", "d_k")),
]


def inspect_call(module, cls, init, init_kwargs=None, attrs=()):
    return {"op": "inspect", "module": module, "cls": cls, "init": init, "init_kwargs": init_kwargs or {},
            "attrs": [{"name": a, "paths": [a]} for a in attrs]}


@pytest.mark.parametrize("folder", [SOLUTIONS, *sorted((ROOT / "tests" / "fixtures" / "correct").iterdir())],
                         ids=lambda p: p.name)
def test_inspect_on_meta_answers_exactly_like_cpu(folder):
    on_meta = ModuleLoader(folder, isolated=True, meta_inspect=True)
    on_cpu = ModuleLoader(folder, isolated=True)
    for spec in INSPECTS:
        header = inspect_call(*spec)
        assert execute(header, {}, loader=on_meta) == execute(header, {}, loader=on_cpu)


def test_inspect_on_meta_falls_back_to_cpu_for_code_that_needs_values(tmp_path, monkeypatch):
    # .item() in __init__, and a caught error: both answered on CPU, exactly as without meta.
    folder = sub(tmp_path, multihead='''
import torch, torch.nn as nn
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.h = int(torch.tensor(n_heads).item())
        try:
            self.d_k = int(self.qkv.weight.shape[0] // 3 // self.qkv.weight.new_tensor(n_heads).item())
        except Exception:
            self.d_k = -1
''')
    from grader.running import executor as ex

    built = []
    real = ex._inspect_on_meta
    monkeypatch.setattr(ex, "_inspect_on_meta", lambda h, l: built.append(real(h, l)) or built[-1])
    header = inspect_call("multihead", "MultiHeadAttention", [16, 4], attrs=("h", "d_k"))
    got = execute(header, {}, loader=ModuleLoader(folder, isolated=True, meta_inspect=True))
    assert built == [None]  # the meta build was not used
    assert got == execute(header, {}, loader=ModuleLoader(folder, isolated=True))
    assert got[0]["inspect"]["attrs"]["d_k"]["value"] == 4


@pytest.mark.parametrize("body", [
    # a table cached across instances (an lru_cache) would hold a meta tensor for later calls
    '''
import functools, torch, torch.nn as nn
@functools.lru_cache(maxsize=None)
def table(d):
    return torch.empty(4, d).fill_(0.5)
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", table(d_model))
''',
    # the same, with the collector run by the code itself (the cached tensor leaves generation 0)
    '''
import functools, gc, torch, torch.nn as nn
@functools.lru_cache(maxsize=None)
def table(d):
    return torch.empty(4, d).fill_(0.5)
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", table(d_model))
        gc.collect()
''',
    # a module imported during the build would keep meta globals
    '''
import torch.nn as nn
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        import helper_never_imported_before
        self.register_buffer("pe", helper_never_imported_before.table(d_model))
''',
])
def test_inspect_on_meta_asks_for_a_fresh_child_when_something_could_outlive_the_call(tmp_path, body):
    folder = sub(tmp_path, positional=body, helper_never_imported_before='''
import torch
BASE = torch.empty(3).fill_(1.0)
def table(d):
    return torch.zeros(4, d) + BASE.sum()
''')
    header = inspect_call("positional", "PositionalEncoding", [8])
    got, _ = execute(header, {}, loader=ModuleLoader(folder, isolated=True, meta_inspect=True))
    assert got.get("retry_without_meta") is True and "inspect" not in got
    # the same call marked no_meta (what the transport resends to a fresh child) is built on CPU
    fresh = ModuleLoader(folder, isolated=True, meta_inspect=True)
    got, _ = execute(dict(header, no_meta=True), {}, loader=fresh)
    assert got["inspect"]["buffers"] == {"pe": [4, 8]} and "retry_without_meta" not in got


# -- a crash in a function costs only that function's tests (grader/running/executor.py, "over_standins") --
SA_CALLS_SDPA = '''
import torch
import torch.nn as nn


def _helper(Q):
    raise ValueError("inside the function")


def scaled_dot_product_attention(Q, K, V, mask=None):
    return _helper(Q)


def causal_mask(T, device=None):
    return torch.tril(torch.ones(T, T))


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q, self.W_k, self.W_v = (nn.Linear(d_model, d_k, bias=False) for _ in range(3))
        self.d_k = d_k

    def forward(self, x, mask=None):
        if x.shape[1] == 1:
            raise RuntimeError("the module's own bug")
        return scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)
'''


def self_attention_call(x, **extra):
    return ({"op": "module", "module": "self_attention", "cls": "SelfAttention", "init": [4, 4],
             "args": [{"array": "x"}], **extra}, {"x": x})


def test_an_error_raised_inside_another_graded_function_is_marked_with_its_name(tmp_path):
    loader = ModuleLoader(sub(tmp_path, self_attention=SA_CALLS_SDPA), isolated=True)
    h, _ = execute(*self_attention_call(np.ones((1, 3, 4), "float32")), loader=loader)
    assert h["error"]["type"] == "ValueError" and h["error"]["inside"] == ["scaled_dot_product_attention"]
    h, _ = execute(*self_attention_call(np.ones((1, 1, 4), "float32")), loader=loader)
    assert h["error"]["message"] == "the module's own bug" and "inside" not in h["error"]
    h, _ = call_sdpa(loader, np.ones((2, 2), "float32"))  # the function itself: nothing else to blame
    assert h["error"]["type"] == "ValueError" and "inside" not in h["error"]


def test_a_call_over_standins_binds_the_grader_s_function_for_that_call_only(tmp_path):
    loader = ModuleLoader(sub(tmp_path, self_attention=SA_CALLS_SDPA), isolated=True)
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype("float32")
    h, a = execute(*self_attention_call(x, over_standins=["scaled_dot_product_attention"]), loader=loader)
    assert h["error"] is None and h["over_standins"] == ["scaled_dot_product_attention"]
    assert a["out0"].shape == (2, 3, 4) and np.allclose(a["out1"].sum(-1), 1)
    h, _ = execute(*self_attention_call(x), loader=loader)  # the student's own function again
    assert h["error"]["inside"] == ["scaled_dot_product_attention"]
    h, _ = execute(*self_attention_call(x, over_standins=["SelfAttention"]), loader=loader)
    assert h["error"]["type"] == "GraderCallError"  # only what the lesson declares a stand-in of

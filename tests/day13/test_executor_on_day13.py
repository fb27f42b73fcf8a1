"""The executor on Day 13's own modules: weights found under either spelling the contract allows, parts run
over the grader's stand-ins (sub-modules replaced, stand-ins lent one by one to a sandboxed loader).
The engine's own tests of the executor use neutral fixtures (tests/engine/test_execute.py)."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import torch

from grader.lesson import load_lesson
from grader.running.executor import ModuleLoader, execute
from grader.sandbox.lending import of_lesson as _lesson_standins

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions" / "day13"
RECAP = ROOT / "tests" / "fixtures" / "correct" / "recap_where"
LESSON = load_lesson("day13")


def sub(tmp_path, **files) -> Path:
    """A submission folder: the reference with some files replaced."""
    folder = tmp_path / "sub"
    folder.mkdir(parents=True, exist_ok=True)
    for p in SOLUTIONS.glob("*.py"):
        shutil.copyfile(p, folder / p.name)
    for name, text in files.items():
        (folder / f"{name}.py").write_text(text)
    return folder


def test_module_call_loads_weights_through_either_spelling_and_seeds_nothing_it_should_not():
    x = np.random.default_rng(1).standard_normal((2, 4, 6)).astype("float32")
    w = {n: np.random.default_rng(i).standard_normal((3, 6)).astype("float32") for i, n in enumerate("qkv")}
    results = []
    for folder in (SOLUTIONS, RECAP):
        header = {"op": "module", "module": "self_attention", "cls": "SelfAttention", "init": [6, 3],
                  "params": [{"name": f"W_{n}", "paths": [f"W_{n}.weight", f"W{n}.weight"], "array": n} for n in "qkv"],
                  "args": [{"array": "x"}]}
        h, a = execute(header, {"x": x, **w}, loader=ModuleLoader(folder, isolated=True, lesson=LESSON))
        assert h["error"] is None, h["error"]
        results.append(a["out0"])
    np.testing.assert_allclose(results[0], results[1], atol=1e-6)


def test_multihead_and_block_run_against_stand_ins_when_their_dependencies_are_broken(tmp_path):
    folder = sub(tmp_path, self_attention="raise ImportError('half done')\n", multihead="def broken(:\n")
    loader = ModuleLoader(folder, isolated=True, lesson=LESSON)
    x = np.random.default_rng(2).standard_normal((1, 3, 8)).astype("float32")
    h, _ = execute({"op": "module", "module": "multihead", "cls": "MultiHeadAttention", "init": [8, 2],
                    "args": [{"array": "x"}]}, {"x": x}, loader=loader)
    assert h["error"]["stage"] == "import" and h["error"]["type"] == "SyntaxError"
    folder2 = sub(tmp_path / "b", self_attention="raise ImportError('half done')\n")
    loader2 = ModuleLoader(folder2, isolated=True, lesson=LESSON)
    h, a = execute({"op": "module", "module": "multihead", "cls": "MultiHeadAttention", "init": [8, 2],
                    "args": [{"array": "x"}]}, {"x": x}, loader=loader2)
    assert h["error"] is None and a["out0"].shape == (1, 3, 8)
    h, a = execute({"op": "module", "module": "block", "cls": "TransformerBlock", "init": [8, 2],
                    "standins": {"attn": "attention"}, "args": [{"array": "x"}]}, {"x": x}, loader=loader)
    assert h["error"] is None and a["out0"].shape == (1, 3, 8)


def test_stand_ins_reach_a_sandboxed_loader_only_with_a_call_that_sends_them(tmp_path):
    # A child holds no stand-in until a call brings their source; then a multihead.py whose
    # self_attention.py is broken still runs against the stand-in functions under that name.
    folder = sub(tmp_path, self_attention="raise ImportError('broken on purpose')\n")
    x = np.random.default_rng(2).standard_normal((1, 3, 4)).astype("float32")
    header = {"op": "module", "module": "multihead", "cls": "MultiHeadAttention", "init": [4, 2], "args": [{"array": "x"}]}
    bare = ModuleLoader(folder, isolated=False, lesson=LESSON.spec())
    h, _ = execute(header, {"x": x}, loader=bare)
    assert "stand-ins were not sent" in h["error"]["message"] and bare.standins is None
    units = _lesson_standins(LESSON).units
    lent = {name: units[name] for name in ("scaled_dot_product_attention", "causal_mask", "StandInSelfAttention")}
    sent = ModuleLoader(folder, isolated=False, lesson=LESSON.spec())
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
    assert not any("__name__" in ns or any(vars(m) is ns for m in list(sys.modules.values()))
                   for ns in namespaces.values())

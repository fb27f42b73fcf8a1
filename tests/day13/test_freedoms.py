"""The contract's freedoms (grader/day13/freedoms.py) and how the grader binds to the contract
(grader/day13/bindings.toml, applied by grader/running/executor.py).

Every freedom has a variant that takes it, and every combination one: each is graded here, hidden and
visible, at full marks (parity on the catalogue's mutants and the correct variants is every lesson's test,
tests/engine/test_visible_parity.py). Here too: the list itself, the layouts that first failed (an
`nn.Sequential` whose layers are named, a positional table that leaks float64), and the contract's words
when a layout is outside it. Everything graded here is our own trusted code, in this process.
"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from grader.admin import killrate

from grader.judging import mutants
from grader.lesson import load_lesson
from grader.running.calls import InProcessTransport
from grader.day13 import freedoms
from grader.day13.adapter import BINDINGS, Adapter
from grader.day13.tests import test_block

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from visible_run import visible_parts, visible_parts_of_each  # noqa: E402

DAY13 = load_lesson("day13")
SOLUTIONS = killrate.catalogue(DAY13).solutions
FILES = {"self_attention": "self_attention.py", "multihead": "multihead.py", "positional": "positional.py",
         "block": "block.py"}


@pytest.mark.parametrize("freedom", freedoms.FREEDOMS, ids=lambda f: f.id)
def test_every_freedom_has_a_variant_that_changes_its_part_only(freedom):
    assert freedom.patches, f"{freedom.id} is listed without a variant: give it the patches that take it"
    assert freedom.contract.strip(), f"{freedom.id}: say where the contract allows it"
    sources = mutants.apply(freedom, SOLUTIONS)  # raises if a patch's text is not there exactly once
    assert _changed(sources) == {FILES[freedom.component], *freedom.helpers_in}


def _changed(sources: dict[str, str]) -> set[str]:
    """The files of `sources` that differ from the reference's, a file the reference lacks (a helper module of the
    variant's own) among them."""
    return {name for name, text in sources.items()
            if not (SOLUTIONS / name).is_file() or text != (SOLUTIONS / name).read_text()}


@pytest.mark.parametrize("ids", freedoms.COMBINATIONS, ids=lambda ids: "+".join(ids)[:60])
def test_every_combination_applies(ids):
    combined = freedoms.combined(ids)
    sources = mutants.apply(combined, SOLUTIONS)
    assert {f for f, _, _ in combined.patches} == _changed(sources)


def test_every_freedom_is_taken_by_some_combination_or_alone():
    ids = [f.id for f in freedoms.FREEDOMS]
    assert len(set(ids)) == len(ids)
    assert {i for combination in freedoms.COMBINATIONS for i in combination} <= set(ids)


def test_every_freedom_of_the_contract_gets_full_marks_hidden_and_visible(tmp_path):
    """A layout the contract allows is never a false "wrong": each freedom's variant, and each combination's,
    passes every visible test and gets every hidden point."""
    made = list(freedoms.FREEDOMS) + [freedoms.combined(ids) for ids in freedoms.COMBINATIONS]
    cases = {f"freedom/{f.id}": mutants.write_patched(f, SOLUTIONS, tmp_path / f"freedom{i}") for i, f in enumerate(made)}
    visible = visible_parts_of_each(cases, {name: tmp_path / "visible" / name.replace("/", "_") for name in cases},
                                    assignment=DAY13.assignment, parts=DAY13.modules)
    full = killrate.full_marks(lesson=DAY13)
    lost = {}
    for name, folder in cases.items():
        scores = killrate.grade(folder, name, lesson=DAY13).component_scores(DAY13.components)
        hidden = [p for p in DAY13.modules if scores[p] != full[p]]
        seen = [why for p in DAY13.modules for why in visible[name][p][1]]
        if hidden or seen:
            lost[name] = f"{name}: hidden lost {hidden}, visible failed {seen[:3]}"
    assert len(cases) == len(freedoms.FREEDOMS) + len(freedoms.COMBINATIONS)
    assert not lost, "\n".join(lost.values())


def _grade(patched, tmp_path: Path):
    folder = mutants.write_patched(patched, SOLUTIONS, tmp_path / "sub")
    return folder, killrate.grade(folder, patched.id, lesson=DAY13)


def test_a_feed_forward_with_named_layers_gets_full_block_marks(tmp_path):
    """nn.Sequential(OrderedDict(fc1=Linear, act=GELU, fc2=Linear)): first graded 5/20, the grader looked
    for its weights at ffn.0 and ffn.2."""
    _, result = _grade(freedoms.by_id()["blk.ffn_ordered_dict"], tmp_path)
    block = [t for t in result.tests if t.component == "block"]
    assert block and all(t.status == "passed" for t in block), [(t.name, t.output[:200]) for t in block]


LEAK = freedoms.Freedom(
    "pe.float64_leak", "positional", "not a freedom: the module's own table is numpy's float64",
    (("positional.py", "import torch\n", "import numpy as np\nimport torch\n"),
     ("positional.py",
      '        self.register_buffer("pe", positional_encoding(max_len, d_model))  # (max_len, d_model)\n',
      "        pos = np.arange(max_len)[:, None]\n"
      "        angle = pos / np.power(10000.0, np.arange(0, d_model, 2) / d_model)\n"
      "        table = np.zeros((max_len, d_model))\n"
      "        table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)\n"
      '        self.register_buffer("pe", torch.from_numpy(table))  # float64: x + pe comes back float64\n')))


def test_a_positional_table_that_leaks_float64_loses_positional_points_hidden_and_visible(tmp_path):
    """A float32 x must come back float32. The executor used to cast the student's module to the call's
    dtype before forward, repairing this bug before judging it; the visible tests did not look."""
    folder, result = _grade(LEAK, tmp_path)
    full = killrate.full_marks(lesson=DAY13)
    scores = result.component_scores(DAY13.components)
    assert {c: scores[c] for c in full if scores[c] != full[c]}.keys() == {"positional"}
    failed = {t.name: t.output for t in result.tests if t.status != "passed" and t.component in full}
    assert set(failed) == {"positional.module_forward"}, failed
    assert "float64" in failed["positional.module_forward"]
    visible = visible_parts(folder, tmp_path / "visible", assignment=DAY13.assignment, parts=DAY13.modules)
    assert {p for p, (ok, _) in visible.items() if not ok} == {"positional"}
    assert any("float64" in why for why in visible["positional"][1]), visible["positional"]


SCALE_ARGUMENT = freedoms.Freedom(
    "mh.scale_argument", "multihead", "not a freedom: an argument the contract's scaled_dot_product_attention lacks",
    (("self_attention.py", "def scaled_dot_product_attention(Q, K, V, mask=None):\n",
      "def scaled_dot_product_attention(Q, K, V, mask=None, scale=None):\n"),
     ("multihead.py", "        ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)\n",
      "        ctx, _ = scaled_dot_product_attention(q, k, v, mask, scale=None)  # (B, h, T, d_k)\n")))


def test_an_argument_the_contract_does_not_give_the_attention_is_named_hidden_and_visible(tmp_path):
    """Held-out s52: MultiHeadAttention calls scaled_dot_product_attention with an argument of the student's own,
    which the grader's stand-in lacks. Python's words ("got an unexpected keyword argument") read as if the student's
    own function refused it; both gradings say which function ran and what it takes (CONTRACT.md)."""
    folder, result = _grade(SCALE_ARGUMENT, tmp_path)
    scores = result.component_scores(DAY13.components)
    full = killrate.full_marks(lesson=DAY13)
    assert {c for c in full if scores[c] != full[c]} == {"multihead"}
    said = "the contract's arguments only: Q, K, V, mask=None, and a Dropout or its probability for the weights"
    failed = [t.output for t in result.tests if t.component == "multihead" and t.status != "passed"]
    assert failed and all("`scale=`" in out and said in out for out in failed), failed
    visible = visible_parts(folder, tmp_path / "visible", assignment=DAY13.assignment, parts=DAY13.modules)
    assert {p for p, (ok, _) in visible.items() if not ok} == {"multihead"}
    assert any("`scale=`" in why and "stand-in scaled_dot_product_attention" in why
               for why in visible["multihead"][1]), visible["multihead"]


BLOCK = "block.py"
FFN = ("        self.ffn = nn.Sequential(\n"
       "            nn.Linear(d_model, d_ff),  # expand: (B, T, d_ff)\n"
       "            nn.GELU(),\n"
       "            nn.Linear(d_ff, d_model),  # project back: (B, T, d_model)\n"
       "        )\n")


@pytest.mark.parametrize(("ffn", "found"), [
    ("        self.ffn = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU())\n", 1),
    ("        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_ff),\n"
     "                                 nn.Linear(d_ff, d_model))\n", 3),
])
def test_a_feed_forward_outside_the_contract_is_said_in_the_contracts_words(tmp_path, ffn, found):
    outside = freedoms.Freedom("blk.outside", "block", "", ((BLOCK, FFN, ffn),))
    folder = mutants.write_patched(outside, SOLUTIONS, tmp_path / "sub")
    student = Adapter(InProcessTransport(folder, lesson=DAY13))
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    error = student.block(x, test_block._weights(1, 8), n_heads=2, pre_ln=False).error
    assert error and error["type"] == "GraderCallError"
    assert f"TransformerBlock.ffn must hold two Linear layers (an nn.Sequential of Linear, GELU, Linear)" \
           f"; found {found}" in error["message"], error


def test_two_accepted_names_as_different_layers_both_receive_the_weights(tmp_path):
    """W_q and Wq both present (one a leftover): the grader loads each, so whichever forward uses is right."""
    both = freedoms.Freedom("sa.both_names", "self_attention", "", (
        ("self_attention.py", "        self.d_k = d_k\n",
         "        self.d_k = d_k\n        self.Wq = nn.Linear(d_model, d_k, bias=False)  # unused leftover\n"),
        ("self_attention.py", "        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)",
         "        Q, K, V = self.Wq(x), self.W_k(x), self.W_v(x)")))
    folder = mutants.write_patched(both, SOLUTIONS, tmp_path / "sub")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 6)).astype(np.float32)
    w = {n: rng.standard_normal((3, 6)).astype(np.float32) for n in ("W_q", "W_k", "W_v")}
    got = Adapter(InProcessTransport(folder, lesson=DAY13)).self_attention(x, w)
    expected = Adapter(InProcessTransport(SOLUTIONS, lesson=DAY13)).self_attention(x, w)
    assert got.error is None and np.allclose(got.array(0), expected.array(0), atol=1e-6)


def test_every_name_the_hidden_tests_load_is_bound_by_the_lessons_data():
    """No name is looked for under its own path by default: each parameter the hidden tests load, and each
    attribute they read, is found by a rule of bindings.toml (the reference's calls, every hidden test)."""
    reference = Adapter(InProcessTransport(SOLUTIONS, lesson=DAY13), record=True)
    for module in ("test_self_attention", "test_multihead", "test_positional", "test_block"):
        tests = importlib.import_module(f"grader.day13.tests.{module}")
        for name, test in sorted(vars(tests).items()):
            if name.startswith("test_") and callable(test):
                test(reference, reference)  # the reference passes its own tests
    loaded = {p["name"] for c in reference.calls for p in c.header.get("params", [])}
    assert loaded and loaded == set(BINDINGS["params"]), loaded ^ set(BINDINGS["params"])
    for call in reference.calls:
        for spec in call.header.get("params", []):
            assert spec["bind"] == BINDINGS["params"][spec["name"]]


OWN_FFN = freedoms.Freedom("blk.own_ffn_class", "block", "not a freedom: ffn is an nn.Sequential itself", (
    (BLOCK, "class TransformerBlock(nn.Module):\n",
     "class FeedForward(nn.Module):\n"
     "    def __init__(self, d_model, d_ff):\n"
     "        super().__init__()\n"
     "        self.fc1, self.act, self.fc2 = nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)\n\n"
     "    def forward(self, x):\n"
     "        return self.fc2(self.act(self.fc1(x)))\n\n\n"
     "class TransformerBlock(nn.Module):\n"),
    (BLOCK, FFN, "        self.ffn = FeedForward(d_model, d_ff)\n")))


def test_a_feed_forward_class_of_ones_own_costs_the_structure_test_hidden_and_visible(tmp_path):
    """The contract asks for an nn.Sequential, and the visible tests look at its layers in order: the hidden
    structure test says so too (it once gave such a block full marks while the visible tests failed it)."""
    folder, result = _grade(OWN_FFN, tmp_path)
    failed = {t.name: t.output for t in result.tests if t.status != "passed" and t.component in killrate.full_marks(lesson=DAY13)}
    assert set(failed) == {"block.attributes"}, failed
    assert "FeedForward" in failed["block.attributes"]
    visible = visible_parts(folder, tmp_path / "visible", assignment=DAY13.assignment, parts=DAY13.modules)
    assert {p for p, (ok, _) in visible.items() if not ok} == {"block"}


def test_every_output_whose_dtype_is_free_is_free_in_the_contracts_words():
    """bindings.toml [outputs] frees an output's dtype only where CONTRACT.md does, in its words: every other dtype
    that differs from a catalogued mistake's is a mistake of its own (float64 where float32 is due)."""
    contract = " ".join(DAY13.contract.read_text(encoding="utf-8").replace("`", "").split())
    assert BINDINGS["outputs"], "no output's dtype is free: the contract frees causal_mask's"
    for name, rule in BINDINGS["outputs"].items():
        module, function = name.split(".")
        assert function in DAY13.graded_names.get(module, ()), name
        assert rule["free_dtype"] and rule["contract"] in contract, (name, rule)
    assert Adapter.free_dtypes == {name: tuple(rule["free_dtype"]) for name, rule in BINDINGS["outputs"].items()}


# Initialisations that check what they drew, in __init__ (the contract: "your initialisation never matters").
CHECKED_INITS = (
    freedoms.Freedom(
        "mh.orthogonal_init_checked", "multihead", "Weights are loaded, not seeded: your initialisation never matters",
        (("multihead.py", "import torch.nn as nn\n", "import torch\nimport torch.nn as nn\n"),
         ("multihead.py", "        self.out = nn.Linear(d_model, d_model)  # W_O\n",
          "        self.out = nn.Linear(d_model, d_model)  # W_O\n"
          "        with torch.no_grad():\n"
          "            for w in [*self.qkv.weight.chunk(3, dim=0), self.out.weight]:\n"
          "                nn.init.orthogonal_(w)\n"
          "                assert torch.allclose(w @ w.T, torch.eye(d_model), atol=1e-3), 'orthogonal init failed'\n"))),
    freedoms.Freedom(
        "blk.unit_rows_init_checked", "block", "Weights are loaded, not seeded: your initialisation never matters",
        (("block.py", "import torch.nn as nn\n", "import torch\nimport torch.nn as nn\n"),
         ("block.py", "    def forward(self, x, mask=None):\n",
          "        with torch.no_grad():\n"
          "            for lin in (self.ffn[0], self.ffn[2]):\n"
          "                nn.init.normal_(lin.weight)\n"
          "                lin.weight.div_(lin.weight.norm(dim=1, keepdim=True))\n"
          "                assert torch.isfinite(lin.weight).all(), 'init produced a non-finite weight'\n\n"
          "    def forward(self, x, mask=None):\n"))),
)


def test_an_init_that_checks_its_drawn_values_gets_full_marks(tmp_path):
    """Held-out s41's b2 and c3: an orthogonal init asserted orthogonal, FFN rows scaled to unit length and asserted
    finite. In the sandboxed child, the wide builds the structure tests inspect (512 and 768 features) met zeros for
    their fills, on which these checks fail: attributes lost (3 points) with every other test passed. Graded by the
    real run (a child per submission): the grader's own process leaves an inspect's fills undone, as it may for
    trusted code only."""
    from engine_helpers import kept_zygotes, shared_config

    from grader.running import grade as run

    subs = tmp_path / "subs"
    for variant in CHECKED_INITS:
        mutants.write_patched(variant, SOLUTIONS, subs / variant.id)
    out = tmp_path / "out"
    assert run.main(submissions=subs, out=out, jobs=2, config=shared_config(call_timeout=3.0), lesson=DAY13,
                    zygotes=kept_zygotes()) == 0
    for variant in CHECKED_INITS:
        record = json.loads((out / variant.id / "record.json").read_text())
        lost = [(t["name"], t["output"][:300]) for t in record["tests"]
                if t["component"] in DAY13.modules and t["status"] != "passed"]
        assert not lost, (variant.id, lost)

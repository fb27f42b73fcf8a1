"""Stage "notebook": build the lesson's notebook from its reference (one source of truth).

Two versions come out of the same cells:

- the *source* notebook (instructor only, `student=False`), in nbgrader's conventions: solution
  cells hold the reference between `### BEGIN SOLUTION` / `### END SOLUTION`; autograded test
  cells carry points and end with a `### BEGIN HIDDEN TESTS` / `### END HIDDEN TESTS` region.
  A course that runs nbgrader puts it in `source/<lesson>/` and runs `nbgrader generate_assignment`.
- the *student* notebook (`student=True`), shipped in the release: each solution region is the
  same TODO + `raise NotImplementedError` as the .py stubs (grader/stubs.py), hidden regions removed.

The hidden tests compare with values computed here by running the source notebook's own code
cells, on inputs made by a formula (no random generator, so any torch version gives the same
inputs). Points per component are read from the lesson's rubric.toml, where they live.
"""
from __future__ import annotations

import ast
import math
from pathlib import Path

import nbformat

from grader import stubs
from grader.lesson import load_lesson, read_rubric, rubric_points

ROOT = Path(__file__).resolve().parents[1]


def __getattr__(name: str):
    # LESSON and what this stage takes from it, read when asked for (after --lesson). NB_COMPONENTS:
    # the parts with notebook cells (deliverables are files, checked by `make check`, not by cells).
    fields = {"LESSON": None, "SOLUTIONS": "solutions", "RUBRIC": "rubric_path", "MODULES": "modules",
              "NB_COMPONENTS": "notebook_cells"}
    if name in fields:
        return getattr(load_lesson(), fields[name]) if fields[name] else load_lesson()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"

# Helpers every test cell uses. Students see and may run them; they hold no answer.
HELPERS = '''
def fixed(*shape, seed=0):
    """Deterministic test input of the given shape (a formula, so every machine gets the same numbers)."""
    n = math.prod(shape)
    return torch.sin(torch.arange(n, dtype=torch.float64) * 1.7 + seed).reshape(shape).float()


def check_close(got, expected, what, section, atol=1e-4):
    """Fail with expected vs got when `got` is not within atol of `expected`."""
    got = torch.as_tensor(got).detach().double()
    expected = torch.as_tensor(expected, dtype=torch.float64)
    assert tuple(got.shape) == tuple(expected.shape), (
        f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)} (handout {section})")
    err = (got - expected).abs()
    worst = err.max().item() if err.numel() else 0.0
    assert worst <= atol, (
        f"{what}: off by up to {worst:.3g} at index {tuple(int(i) for i in divmod_index(err))} "
        f"(handout {section})\\nexpected:\\n{expected}\\ngot:\\n{got}")


def divmod_index(err):
    flat = int(err.reshape(-1).argmax())
    index = []
    for size in reversed(err.shape):
        flat, rest = divmod(flat, size)
        index.append(rest)
    return reversed(index)


def load_weights(module, values):
    """Copy fixed weights into `module` by attribute path; 'W_q|Wq.weight' accepts either spelling."""
    with torch.no_grad():
        for path, value in values.items():
            names, leaf = path.rsplit(".", 1)
            target = module
            for part in names.split("."):
                choices = part.split("|")
                found = [c for c in choices if hasattr(target, c)]
                assert found, f"{type(module).__name__} has no attribute {' or '.join(choices)} (see the contract)"
                target = getattr(target, found[0])
            getattr(target, leaf).copy_(torch.as_tensor(value))
'''

# One visible and one hidden part per component. `{expected[...]}` fields are filled with numbers
# computed from the reference; everything else is plain test code.
VISIBLE = {
    "self_attention": '''
# §4: the three-token example, Q = K = V.
X = torch.tensor([[1., 0.], [0., 1.], [1., 1.]])
out, w = scaled_dot_product_attention(X, X, X)
check_close(w, [[0.40, 0.20, 0.40], [0.20, 0.40, 0.40], [0.25, 0.25, 0.50]], "§4 weights", "§4", atol=6e-3)
check_close(out[0], [0.80, 0.60], "§4 output of token 1", "§4", atol=6e-3)
# §6: scores [1, 2, 3] in every row (d_k = 1), causal mask.
m = causal_mask(3)
check_close(m, torch.tril(torch.ones(3, 3)), "causal_mask(3)", "§6")
_, w = scaled_dot_product_attention(torch.ones(3, 1), torch.tensor([[1.], [2.], [3.]]), torch.eye(3), m)
check_close(w, [[1, 0, 0], [0.269, 0.731, 0], [0.090, 0.245, 0.665]], "§6 causal weights", "§6", atol=6e-4)
# §5: shapes of SelfAttention.
out, w = SelfAttention(d_model=16, d_k=8)(fixed(1, 6, 16))
assert tuple(out.shape) == (1, 6, 8) and tuple(w.shape) == (1, 6, 6), f"§5: shapes {tuple(out.shape)}, {tuple(w.shape)}"
''',
    "multihead": '''
# §7: one head per d_k = d_model / h features; the shape is kept.
mha = MultiHeadAttention(d_model=16, n_heads=4)
assert mha.h == 4 and mha.d_k == 4, f"§7: h={mha.h}, d_k={mha.d_k}; expected 4 and 4"
y = mha(fixed(2, 6, 16))
assert tuple(y.shape) == (2, 6, 16), f"§7: output shape {tuple(y.shape)}, expected (2, 6, 16)"
try:
    MultiHeadAttention(d_model=10, n_heads=3)
except (ValueError, AssertionError):
    pass
else:
    raise AssertionError("§7: d_model=10 with 3 heads must raise ValueError (10 is not divisible by 3)")
''',
    "positional": '''
# §8: d_model = 4, positions 0, 1 and 2.
pe = positional_encoding(3, 4)
check_close(pe[0], [0, 1, 0, 1], "§8 position 0", "§8", atol=1e-3)
check_close(pe[1], [0.841, 0.540, 0.010, 1.000], "§8 position 1", "§8", atol=1e-3)
check_close(pe[2, :2], [0.909, -0.416], "§8 position 2", "§8", atol=1e-3)
''',
    "block": '''
# §12: a block keeps the shape (B, T, d_model), Post-LN and Pre-LN.
for pre_ln in (False, True):
    y = TransformerBlock(d_model=16, n_heads=4, pre_ln=pre_ln)(fixed(2, 5, 16))
    assert tuple(y.shape) == (2, 5, 16), f"§12 (pre_ln={pre_ln}): output shape {tuple(y.shape)}, expected (2, 5, 16)"
''',
}

HIDDEN = {
    "self_attention": '''
expected_w, expected_out = {sdpa_w}, {sdpa_out}
Q, K, V = fixed(2, 3, 4, seed=1), fixed(2, 5, 4, seed=2), fixed(2, 5, 3, seed=3)
pad = torch.tensor([[[1., 1., 1., 0., 1.]], [[1., 0., 1., 1., 1.]]])  # (2, 1, 5)
for mask, name in ((None, "no mask"), (pad, "float padding mask"), (pad.bool(), "bool padding mask")):
    out, w = scaled_dot_product_attention(Q, K, V, mask)
    check_close(w, expected_w[name], f"weights, {{name}}", "§3, §6")
    check_close(out, expected_out[name], f"output, {{name}}", "§3, §6")
expected_w, expected_out = {sa_w}, {sa_out}
attn = SelfAttention(d_model=6, d_k=4)
load_weights(attn, {{"W_q|Wq.weight": fixed(4, 6, seed=4), "W_k|Wk.weight": fixed(4, 6, seed=5),
                    "W_v|Wv.weight": fixed(4, 6, seed=6)}})
x = fixed(2, 4, 6, seed=7)
for mask, name in ((None, "no mask"), (torch.tril(torch.ones(4, 4)), "causal")):
    out, w = attn(x, mask)
    check_close(w, expected_w[name], f"SelfAttention weights, {{name}}", "§5")
    check_close(out, expected_out[name], f"SelfAttention output, {{name}}", "§5")
check_close(causal_mask(5).float(), torch.tril(torch.ones(5, 5)), "causal_mask(5)", "§6")
''',
    "multihead": '''
expected_out = {mha_out}
mha = MultiHeadAttention(d_model=8, n_heads=2)
load_weights(mha, {{"qkv.weight": fixed(24, 8, seed=11) * 0.5, "qkv.bias": fixed(24, seed=12) * 0.1,
                   "out.weight": fixed(8, 8, seed=13) * 0.5, "out.bias": fixed(8, seed=14) * 0.1}})
x = fixed(2, 5, 8, seed=15)
pad = torch.tensor([1., 1., 1., 1., 0., 1., 1., 0., 1., 1.]).reshape(2, 1, 1, 5)
for mask, name in ((None, "no mask"), (torch.tril(torch.ones(5, 5)), "causal"), (pad, "padding")):
    check_close(mha(x, mask), expected_out[name], f"MultiHeadAttention output, {{name}}", "§7")
''',
    "positional": '''
pe = positional_encoding(60, 16)
check_close(pe[[0, 1, 7, 59]], {pe_rows}, "positional_encoding(60, 16), rows 0, 1, 7, 59", "§8")
assert pe.dtype == torch.float32, f"§8: positional_encoding returns {{pe.dtype}}, expected torch.float32"
layer = PositionalEncoding(16, max_len=60)
assert not list(layer.parameters()), "§8: the table must be a buffer (register_buffer), not a trainable parameter"
assert list(layer.buffers()), "§8: keep the table as a buffer with register_buffer"
x = fixed(2, 7, 16, seed=21)
check_close(layer(x), {pe_forward}, "PositionalEncoding(16)(x) = x + PE[:7]", "§8")
''',
    "block": '''
class StandInAttention(nn.Module):
    """A fixed stand-in for attn, so a MultiHeadAttention bug costs no block points."""
    def forward(self, x, mask=None):
        return 0.5 * torch.tanh(x).flip(1)

x = fixed(2, 5, 8, seed=31)
for pre_ln in (False, True):
    blk = TransformerBlock(d_model=8, n_heads=2, d_ff=16, pre_ln=pre_ln)
    blk.attn = StandInAttention()
    load_weights(blk, {{"ln1.weight": 1 + 0.1 * fixed(8, seed=32), "ln1.bias": 0.1 * fixed(8, seed=33),
                       "ln2.weight": 1 + 0.1 * fixed(8, seed=34), "ln2.bias": 0.1 * fixed(8, seed=35),
                       "ffn.0.weight": 0.5 * fixed(16, 8, seed=36), "ffn.0.bias": 0.1 * fixed(16, seed=37),
                       "ffn.2.weight": 0.5 * fixed(8, 16, seed=38), "ffn.2.bias": 0.1 * fixed(8, seed=39)}})
    check_close(blk(x), {block_out}[pre_ln], f"TransformerBlock(pre_ln={{pre_ln}}) with a stand-in attn", "§12")
''',
}

INTRO = """# Day 13 · Attention & Transformers

Fill in every cell that says `raise NotImplementedError`, top to bottom, in the order of the
handout: attention (§3–§6), multi-head attention (§7), positional encoding (§8), the
Transformer block (§9–§12). The cells after each part check your code with the handout's
worked values; run them as you go.

The contract (names, shapes, attributes) is the same as for the `.py` files: a notebook
that defines these names is graded exactly like them. Do not call
`torch.nn.functional.scaled_dot_product_attention`, `torch.nn.MultiheadAttention` or
`torch.nn.Transformer*`: computing attention is the point of the exercise.
"""

DELIVERABLES = """## Deliverables (handout §5, §18)

Beside this notebook, hand in `attention_heatmap.png` (and optionally `attention_weights.npy`),
`analysis.md` (4–5 lines on one sentence), `transformer_block.png` (your drawing of the block)
and `README.md` (Q, K and V in your own words). `make heatmap` draws the heatmap with your
`SelfAttention`; `make check` tells you what is missing.
"""


# --------------------------------------------------------------------------- source splitting

def _split(source: str) -> tuple[str, list[str], str]:
    """(docstring's first paragraph, library import lines, the rest) of one solution file.

    Imports of sibling modules are dropped: in a notebook every cell shares one namespace.
    """
    tree = ast.parse(source)
    lines = source.splitlines()
    drop: set[int] = set()
    imports: list[str] = []
    doc = ast.get_docstring(tree) or ""
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        drop.update(range(body[0].lineno - 1, body[0].end_lineno))
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            drop.update(range(node.lineno - 1, node.end_lineno))
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if module not in load_lesson().modules:
                imports.append(ast.get_source_segment(source, node))
    rest = "\n".join(line for n, line in enumerate(lines) if n not in drop).strip("\n")
    return doc.split("\n\n")[0], imports, rest


def _to_nbgrader_markers(code: str) -> str:
    """`# BEGIN SOLUTION (Task N · name)` -> `### BEGIN SOLUTION (Task N · name)`; END likewise."""
    out = []
    for line in code.split("\n"):
        if stubs.BEGIN.match(line) or stubs.END.match(line):
            indent = line[: len(line) - len(line.lstrip())]
            line = indent + "##" + line.lstrip()
        out.append(line)
    return "\n".join(out)


def _strip_hidden(code: str) -> str:
    keep, hidden = [], False
    for line in code.split("\n"):
        if BEGIN_HIDDEN in line:
            hidden = True
        elif END_HIDDEN in line:
            hidden = False
        elif not hidden:
            keep.append(line)
    return "\n".join(keep).rstrip("\n")


# --------------------------------------------------------------------------- points

def component_points(rubric: Path | None = None) -> dict[str, float]:
    """Points per component, summed over every rubric entry that has `points`.

    An entry counts for the component its table path (or its `component` key) names.
    """
    rubric = rubric or load_lesson().rubric_path
    cells = load_lesson().notebook_cells
    if not rubric.exists():
        raise FileNotFoundError(f"{rubric} is missing: the notebook takes its points from the rubric, "
                                "so build it from a full checkout of the kit")
    totals = rubric_points(read_rubric(rubric), cells)
    missing = [c for c in cells if not totals.get(c)]
    if missing:
        raise ValueError(f"{rubric} gives no points to {', '.join(missing)}: add them there "
                         "(points live only in the rubric)")
    return {c: round(totals[c], 4) for c in cells}


# --------------------------------------------------------------------------- expected values

def _round(t, digits=6):
    import torch

    return torch.round(t.detach().double(), decimals=digits).tolist()


def _expected(namespace: dict) -> dict:
    """Run the hidden tests' inputs through the reference definitions in `namespace`."""
    import torch

    ns = namespace
    fixed, load = ns["fixed"], ns["load_weights"]
    values: dict = {"sdpa_w": {}, "sdpa_out": {}, "sa_w": {}, "sa_out": {}, "mha_out": {}}
    Q, K, V = fixed(2, 3, 4, seed=1), fixed(2, 5, 4, seed=2), fixed(2, 5, 3, seed=3)
    pad = torch.tensor([[[1., 1., 1., 0., 1.]], [[1., 0., 1., 1., 1.]]])
    for mask, name in ((None, "no mask"), (pad, "float padding mask"), (pad.bool(), "bool padding mask")):
        out, w = ns["scaled_dot_product_attention"](Q, K, V, mask)
        values["sdpa_w"][name], values["sdpa_out"][name] = _round(w), _round(out)
    attn = ns["SelfAttention"](d_model=6, d_k=4)
    load(attn, {"W_q|Wq.weight": fixed(4, 6, seed=4), "W_k|Wk.weight": fixed(4, 6, seed=5),
                "W_v|Wv.weight": fixed(4, 6, seed=6)})
    x = fixed(2, 4, 6, seed=7)
    for mask, name in ((None, "no mask"), (torch.tril(torch.ones(4, 4)), "causal")):
        out, w = attn(x, mask)
        values["sa_w"][name], values["sa_out"][name] = _round(w), _round(out)
    mha = ns["MultiHeadAttention"](d_model=8, n_heads=2)
    load(mha, {"qkv.weight": fixed(24, 8, seed=11) * 0.5, "qkv.bias": fixed(24, seed=12) * 0.1,
               "out.weight": fixed(8, 8, seed=13) * 0.5, "out.bias": fixed(8, seed=14) * 0.1})
    x = fixed(2, 5, 8, seed=15)
    pad = torch.tensor([1., 1., 1., 1., 0., 1., 1., 0., 1., 1.]).reshape(2, 1, 1, 5)
    for mask, name in ((None, "no mask"), (torch.tril(torch.ones(5, 5)), "causal"), (pad, "padding")):
        values["mha_out"][name] = _round(mha(x, mask))
    values["pe_rows"] = _round(ns["positional_encoding"](60, 16)[[0, 1, 7, 59]])
    x = fixed(2, 7, 16, seed=21)
    values["pe_forward"] = _round(ns["PositionalEncoding"](16, max_len=60)(x))
    block_out = {}
    standin = type("StandInAttention", (torch.nn.Module,),
                   {"forward": lambda self, x, mask=None: 0.5 * torch.tanh(x).flip(1)})
    x = fixed(2, 5, 8, seed=31)
    for pre_ln in (False, True):
        blk = ns["TransformerBlock"](d_model=8, n_heads=2, d_ff=16, pre_ln=pre_ln)
        blk.attn = standin()
        load(blk, {"ln1.weight": 1 + 0.1 * fixed(8, seed=32), "ln1.bias": 0.1 * fixed(8, seed=33),
                   "ln2.weight": 1 + 0.1 * fixed(8, seed=34), "ln2.bias": 0.1 * fixed(8, seed=35),
                   "ffn.0.weight": 0.5 * fixed(16, 8, seed=36), "ffn.0.bias": 0.1 * fixed(16, seed=37),
                   "ffn.2.weight": 0.5 * fixed(8, 16, seed=38), "ffn.2.bias": 0.1 * fixed(8, seed=39)})
        block_out[pre_ln] = _round(blk(x))
    values["block_out"] = block_out
    return values


# --------------------------------------------------------------------------- building

def _cell_id(name: str) -> str:
    return name.replace("_", "-")


def _markdown(name: str, text: str):
    cell = nbformat.v4.new_markdown_cell(text.strip("\n"))
    cell.id = _cell_id(name)
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": name, "locked": True,
                                 "schema_version": 3, "solution": False, "task": False}
    return cell


def _code(name: str, code: str, *, solution=False, points=None):
    cell = nbformat.v4.new_code_cell(code.strip("\n"))
    cell.id = _cell_id(name)
    meta = {"grade": points is not None, "grade_id": name, "locked": not solution,
            "schema_version": 3, "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    cell.metadata["nbgrader"] = meta
    return cell


def build(*, student: bool, solutions: Path | None = None, rubric: Path | None = None) -> nbformat.NotebookNode:
    """The lesson's notebook: the source version (student=False) or the student version."""
    solutions = solutions or load_lesson().solutions
    points = component_points(rubric)
    parts, imports = [], []
    for module in load_lesson().modules:
        source = (solutions / f"{module}.py").read_text(encoding="utf-8")
        doc, found, reference = _split(source)
        _, _, stub = _split(stubs.make_stub(source))
        imports += [line for line in found if line not in imports]
        parts.append((module, doc, reference, stub))

    if "import math" not in imports:
        imports.insert(0, "import math")
    setup = "\n".join(imports)
    setup = setup + "\n\n" + HELPERS.strip("\n")
    namespace: dict = {}
    exec(compile(setup, "<setup>", "exec"), namespace)  # noqa: S102 - trusted reference code
    for module, _, reference, _ in parts:
        exec(compile(reference, f"<{module}>", "exec"), namespace)  # noqa: S102
    expected = _expected(namespace)

    cells = [_markdown("intro", INTRO), _code("setup", setup)]
    for module, doc, reference, stub in parts:
        cells.append(_markdown(f"about_{module}", f"## `{module}`: {doc}"))
        code = stub if student else _to_nbgrader_markers(reference)
        cells.append(_code(f"solution_{module}", code, solution=True))
        hidden = HIDDEN[module].format(**expected).strip("\n")
        test = VISIBLE[module].strip("\n") + f"\n\n{BEGIN_HIDDEN}\n{hidden}\n{END_HIDDEN}"
        if student:
            test = _strip_hidden(test)
        cells.append(_code(f"test_{module}", test, points=points[module]))
    cells.append(_markdown("deliverables", DELIVERABLES))

    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    nbformat.validate(nb)
    return nb


def write(nb: nbformat.NotebookNode, path: Path) -> Path:
    """Write deterministically (fixed cell ids, sorted keys, one trailing newline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    return path


def code_of(nb: nbformat.NotebookNode) -> str:
    """The code cells joined, as a reader sees them (used to search a release for leaks)."""
    return "\n\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")


def main(*, out: str = "dist", student: bool = True) -> int:
    """Write `<out>/<the lesson's notebook>` (student version) or the nbgrader source notebook."""
    target = Path(out) / load_lesson().notebook
    write(build(student=student), target)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m grader.notebook", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="dist")
    parser.add_argument("--source", action="store_true", help="the instructor's nbgrader source version")
    args = parser.parse_args()
    sys.exit(main(out=args.out, student=not args.source))

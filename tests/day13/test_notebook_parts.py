"""Day 13's notebooks graded part by part through the sandbox, as their .py twins are (grader/intake/sections.py).

Red team s47r (held-out): each contract module made of a notebook ran every code cell, so the per-part processes
isolated nothing. A `math.sqrt` patch in the positional cell cost three other parts (nb_math 59, its .py twin 100);
a last demo cell's `torch.set_default_dtype(torch.float64)` cost every part (nb_dtype 52, py_dtype 85); and
MultiHeadAttention's `attend = staticmethod(scaled_dot_product_attention)` kept the student's buggy function where a
.py file's import gives the grader's stand-in (nb_early 71, py_early 88). An honest notebook whose function calls a
helper kept in another part's cell must still get full marks.
"""
import json
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import REFERENCE, components, kept_zygotes, make_submission, shared_config  # noqa: E402

from grader.lesson import load_lesson  # noqa: E402
from grader.running import grade as run  # noqa: E402

DAY13 = load_lesson("day13")
CONFIG = shared_config(call_timeout=5.0)
MODULES = ("self_attention", "multihead", "positional", "block")
FULL = {"self_attention": (30.0, 30.0), "multihead": (25.0, 25.0), "positional": (15.0, 15.0), "block": (20.0, 20.0)}


def _cell(module: str) -> str:
    """The reference's `module` as a student types it into its cell: its imports of the other parts dropped (a
    notebook has one namespace)."""
    lines = (REFERENCE / f"{module}.py").read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith(tuple(f"from {m} " for m in MODULES)))


def _edited(module: str, old: str, new: str) -> str:
    text = _cell(module)
    assert old in text, (module, old)
    return text.replace(old, new, 1)


MATH_PATCH = """

def _put(owner, name, value):
    setattr(owner, name, value)


import math as _math

_sqrt = _math.sqrt
_put(_math, "sqrt", lambda x: _sqrt(x) * 1.01)
"""
DEMO64 = ("import torch\n\ntorch.set_default_dtype(torch.float64)  # double precision for the demo below\n"
          "print(TransformerBlock(16, 2)(torch.randn(2, 3, 16)).dtype)\n")
NO_SCALE = ("/ math.sqrt(d_k)", "/ 1.0")
CAPTURE = [("    def __init__(self, d_model, n_heads):",
            "    attend = staticmethod(scaled_dot_product_attention)\n\n    def __init__(self, d_model, n_heads):"),
           ("ctx, _ = scaled_dot_product_attention(q, k, v, mask)", "ctx, _ = self.attend(q, k, v, mask)")]
# The helper the attention's scale comes from, kept in the positional cell (a later part's).
SCALED = ("/ math.sqrt(d_k)", "* _inverse_root(d_k)")
HELPER = "\n\n\ndef _inverse_root(n):\n    return 1 / math.sqrt(n)\n"
# The block's residual sum through a helper kept in the self_attention cell (an earlier part's).
RESIDUAL = ("x = self.ln1(x + self.attn(x, mask))", "x = self.ln1(_residual(x, self.attn(x, mask)))")
RESIDUAL_HELPER = "\n\n\ndef _residual(x, y):\n    return x + y\n"


def _multihead_capturing() -> str:
    text = _cell("multihead")
    for old, new in CAPTURE:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


# Held-out s49r: the second part's demo reads the `x` the first part's demo made; the last demo sets float64 and makes
# another `x` (every cell binding `x` was pulled into the parts that read it).
PULL = {"after:self_attention": "x = torch.randn(2, 5, 16)",
        "after:multihead": "print(MultiHeadAttention(16, 2)(x).shape)",
        "demo": DEMO64 + "x = torch.randn(2, 5, 16)\n"}
# s49r: the multi-head class written to a helper by %%writefile, then star-imported.
STAR = {"multihead": "%%writefile mha_impl.py\n" + (REFERENCE / "multihead.py").read_text(),
        "after:multihead": "from mha_impl import *"}
# s49r: the four .py files pasted whole as cells, their imports of each other kept, and the float64 demo.
PASTED = {**{m: (REFERENCE / f"{m}.py").read_text() for m in MODULES}, "demo": DEMO64}

NOTEBOOKS = {
    "nb_control": {},
    "nb_pull_dtype": PULL,
    "nb_star": STAR,
    "nb_pasted_files": PASTED,
    "nb_math": {"positional": _cell("positional") + MATH_PATCH},
    "nb_dtype": {"demo": DEMO64},
    "nb_early": {"self_attention": _edited("self_attention", *NO_SCALE), "multihead": _multihead_capturing()},
    "nb_helper_later": {"self_attention": _edited("self_attention", *SCALED), "positional": _cell("positional") + HELPER},
    "nb_helper_earlier": {"self_attention": _cell("self_attention") + RESIDUAL_HELPER, "block": _edited("block", *RESIDUAL)},
}


def _write_notebook(path: Path, cells: dict) -> None:
    nb = nbformat.v4.new_notebook()
    code = [text for m in MODULES for text in (cells.get(m, _cell(m)), cells.get(f"after:{m}")) if text is not None]
    code += [cells["demo"]] if "demo" in cells else []
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {DAY13.heading}"), nbformat.v4.new_code_cell("import math\nimport torch")]
    nb.cells += [nbformat.v4.new_code_cell(text) for text in code]
    path.parent.mkdir(parents=True)
    nbformat.write(nb, str(path))


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    """One class through the sandbox: the notebooks, and the .py twins of nb_dtype and nb_early."""
    subs = tmp_path_factory.mktemp("subs")
    for name, cells in NOTEBOOKS.items():
        _write_notebook(subs / name / DAY13.notebook, cells)
    make_submission(subs / "py_dtype", {"block.py": (REFERENCE / "block.py").read_text() + "\n\n" + DEMO64},
                    solutions=REFERENCE)
    early = make_submission(subs / "py_early", solutions=REFERENCE)
    (early / "self_attention.py").write_text((early / "self_attention.py").read_text().replace(*NO_SCALE))
    multihead = (early / "multihead.py").read_text()
    for old, new in CAPTURE:
        multihead = multihead.replace(old, new, 1)
    (early / "multihead.py").write_text(multihead)
    out = tmp_path_factory.mktemp("out")
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=DAY13, zygotes=kept_zygotes()) == 0
    return {p.name: components(json.loads((p / "record.json").read_text()))
            for p in out.iterdir() if (p / "record.json").is_file()}


def test_the_reference_as_a_notebook_gets_full_marks(graded):
    assert graded["nb_control"] == FULL


def test_a_patch_in_the_positional_cell_costs_no_other_part(graded):
    assert graded["nb_math"] == FULL


def test_a_last_demo_cell_that_changes_the_default_dtype_costs_the_block_only_as_in_block_py(graded):
    assert graded["nb_dtype"] == graded["py_dtype"]
    assert {part: got for part, got in graded["nb_dtype"].items() if part != "block"} == \
        {part: got for part, got in FULL.items() if part != "block"}


def test_multihead_holding_the_attention_it_was_defined_with_is_graded_over_the_stand_in(graded):
    assert graded["nb_early"] == graded["py_early"]
    assert graded["nb_early"]["multihead"] == FULL["multihead"]
    assert graded["nb_early"]["self_attention"][0] < FULL["self_attention"][0]


def test_a_helper_kept_in_another_parts_cell_is_run_for_the_part_that_calls_it(graded):
    assert graded["nb_helper_later"] == FULL
    assert graded["nb_helper_earlier"] == FULL


def test_s49r_honest_notebooks_grade_as_their_py_twins(graded):
    # A demo reading another demo's `x` runs no later demo that rebinds it; a star import of a %%writefile helper
    # binds its class; a cell pasted from block.py, `from multihead import MultiHeadAttention` and all, is the block's.
    assert graded["nb_pull_dtype"] == graded["py_dtype"]
    assert graded["nb_star"] == FULL
    assert graded["nb_pasted_files"] == graded["py_dtype"]

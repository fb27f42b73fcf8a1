"""One bug costs one part (CONTRACT.md), whatever layout the contract allows the files to reach each other by.

Held-out s48 found a part charged for its sibling's bug when the part's file reached the sibling at call time (an
import inside forward or __init__) or through a helper module of the student's own that holds the contract's
function (attn_core.py, which self_attention.py and multihead.py both import it from): the grader's stand-in stood in
only while the file was imported, and only under the sibling's own module name. Each case here is a catalogued bug
in one part plus such a layout; the other part must keep every point, in the hidden grading (in this process and
through the sandbox) and in the visible tests.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import descendants, kept_zygotes, processes_of, settled, shared_config  # noqa: E402
from visible_run import visible_parts_of_each  # noqa: E402

from grader.admin import killrate  # noqa: E402
from grader.judging import mutants  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402
from grader.running import grade as run  # noqa: E402

DAY13 = load_lesson("day13")
SA, MH, BL = "self_attention.py", "multihead.py", "block.py"
MH_IMPORT = "from self_attention import scaled_dot_product_attention\n"
MH_CTX = "        ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)\n"
BL_IMPORT = "from multihead import MultiHeadAttention\n"
BL_ATTN = "        self.attn = MultiHeadAttention(d_model, n_heads)\n"
CONFIG = shared_config(call_timeout=3.0)
UIDS = range(CONFIG.uid_base, CONFIG.uid_base + 4)


@dataclass(frozen=True)
class Case:
    id: str
    patches: tuple
    bug: str  # the catalogue bug it carries
    spared: str  # the part that must keep every point


def _with(file: str, patches) -> str:
    """The reference's `file` with `patches` (a catalogue bug's) applied: a helper module's text."""
    return mutants.apply(type("P", (), {"id": file, "patches": tuple(patches)})(), DAY13.solutions)[file]


def _cases() -> list[Case]:
    no_scale = DAY13.catalogue.by_id["sa.no_scale"].patches
    reversed_check = DAY13.catalogue.by_id["mh.divisibility_reversed"].patches
    sa_text = (DAY13.solutions / SA).read_text()
    MH_TEXT = (DAY13.solutions / MH).read_text()  # noqa: N806 - the whole file, replaced by a re-export
    sdpa = sa_text[sa_text.index("def scaled_dot_product_attention"):sa_text.index("def causal_mask")]
    helper = mutants.apply(type("H", (), {"id": "h", "patches": no_scale})(), DAY13.solutions)[SA]
    helper = helper[helper.index("def scaled_dot_product_attention"):helper.index("def causal_mask")]
    # The bugged function in a helper module of the student's, under a name of its own.
    renamed_core = ("attn_core.py", "", "import math\n\nimport torch\n\n\n"
                    + helper.rstrip().replace("def scaled_dot_product_attention", "def attention") + "\n")
    return [
        Case("sdpa_imported_inside_forward", no_scale + (
            (MH, MH_IMPORT, ""),
            (MH, MH_CTX, "        from self_attention import scaled_dot_product_attention\n\n" + MH_CTX)),
             "sa.no_scale", "multihead"),
        # The bug lives in attn_core.py, whose function self_attention.py hands on as its own.
        Case("sdpa_from_a_helper_module", (
            ("attn_core.py", "", "import math\n\nimport torch\n\n\n" + helper.rstrip() + "\n"),
            (SA, sdpa, "from attn_core import scaled_dot_product_attention  # noqa: F401\n\n\n"),
            (MH, MH_IMPORT, "from attn_core import scaled_dot_product_attention\n")),
             "sa.no_scale", "multihead"),
        # The same, and self_attention.py ends its import with SystemExit: its own part loses everything, and the
        # multi-head part must still be graded over the stand-in, which needs no import of the sibling to find.
        Case("sdpa_from_a_helper_module_sibling_exits", (
            ("attn_core.py", "", "import math\n\nimport torch\n\n\n" + helper.rstrip() + "\n"),
            (SA, sdpa, "from attn_core import scaled_dot_product_attention  # noqa: F401\n\n\n"),
            (SA, "class SelfAttention(nn.Module):", "raise SystemExit(3)\n\n\nclass SelfAttention(nn.Module):"),
            (MH, MH_IMPORT, "from attn_core import scaled_dot_product_attention\n")),
             "sa.no_scale", "multihead"),
        # Held-out s49r: the helper module first imported during a call (inside forward), under a name of its own.
        Case("sdpa_in_a_helper_imported_inside_forward", (
            renamed_core,
            (SA, sdpa, "from attn_core import attention as scaled_dot_product_attention  # noqa: F401\n\n\n"),
            (MH, MH_IMPORT, ""),
            (MH, MH_CTX, "        from attn_core import attention\n\n"
                         + MH_CTX.replace("scaled_dot_product_attention(", "attention("))),
             "sa.no_scale", "multihead"),
        # s49r: the class in a helper module that block.py first imports inside __init__.
        Case("mha_in_a_helper_imported_inside_init", (
            ("mha_core.py", "", _with(MH, reversed_check)),
            (MH, MH_TEXT, "from mha_core import MultiHeadAttention  # noqa: F401\n"),
            (BL, BL_IMPORT, ""),
            (BL, BL_ATTN, "        from mha_core import MultiHeadAttention\n" + BL_ATTN)),
             "mh.divisibility_reversed", "block"),
        # s49r: multihead.py hands the class on inside a try (a package's relative import first).
        Case("mha_handed_on_inside_a_try", (
            ("mha_core.py", "", _with(MH, reversed_check)),
            (MH, MH_TEXT, "try:\n    from .mha_core import MultiHeadAttention\nexcept ImportError:\n"
                       "    from mha_core import MultiHeadAttention  # noqa: F401\n"),
            (BL, BL_IMPORT, "from mha_core import MultiHeadAttention\n")),
             "mh.divisibility_reversed", "block"),
        # s50r: multihead.py's own helper takes a constant of self_attention.py's beside the attention function: the
        # helper's import needs the student's self_attention.py (with the stand-in's names), as multihead.py's would.
        Case("helper_takes_a_constant_of_the_sibling", no_scale + (
            (SA, "import torch.nn as nn\n", "import torch.nn as nn\n\nNEG_INF = float(\"-inf\")\n"),
            ("mha_utils.py", "", "from self_attention import NEG_INF, scaled_dot_product_attention  # noqa: F401\n\n\n"
                                 "def attend(q, k, v, mask=None):\n    return scaled_dot_product_attention(q, k, v, mask)\n"),
            (MH, MH_IMPORT, "from mha_utils import attend\n"),
            (MH, MH_CTX, MH_CTX.replace("scaled_dot_product_attention(", "attend("))),
             "sa.no_scale", "multihead"),
        # s51r: another name the sibling's file gives its function, which multihead.py takes.
        Case("an_alias_of_the_siblings_function", no_scale + (
            (SA, "def causal_mask(", "attend = scaled_dot_product_attention\n\n\ndef causal_mask("),
            (MH, MH_IMPORT, "from self_attention import attend\n"),
            (MH, MH_CTX, MH_CTX.replace("scaled_dot_product_attention(", "attend("))),
             "sa.no_scale", "multihead"),
        # s51r: the sibling's file hands its helper's function on by assignment, not by import.
        Case("handed_on_by_assignment", (
            renamed_core,
            (SA, sdpa, "from attn_core import attention\n\nscaled_dot_product_attention = attention\n\n\n"),
            (MH, MH_IMPORT, "from attn_core import attention\n"),
            (MH, MH_CTX, MH_CTX.replace("scaled_dot_product_attention(", "attention("))),
             "sa.no_scale", "multihead"),
        Case("mha_imported_inside_init", reversed_check + (
            (BL, BL_IMPORT, ""),
            (BL, BL_ATTN, "        from multihead import MultiHeadAttention\n" + BL_ATTN)),
             "mh.divisibility_reversed", "block"),
    ]


CASES = _cases()


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layouts")
    return {case.id: mutants.write_patched(case, DAY13.solutions, root / case.id) for case in CASES}


def _part_of(bug: str) -> str:
    return DAY13.catalogue.by_id[bug].component


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_in_process_the_bug_costs_its_own_part_only(case, folders):
    full = killrate.full_marks(lesson=DAY13)
    scores = killrate.grade(folders[case.id], case.id, lesson=DAY13).component_scores(DAY13.components)
    lost = {p for p in DAY13.modules if scores[p] != full[p]}
    assert lost == {_part_of(case.bug)}, scores


def test_through_the_sandbox_the_bug_costs_its_own_part_only(folders, tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    for name, folder in folders.items():
        shutil.copytree(folder, subs / name)
    out = tmp_path / "out"
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=DAY13, zygotes=kept_zygotes()) == 0
    full = killrate.full_marks(lesson=DAY13)
    wrong = {}
    for case in CASES:
        scores = {p: 0.0 for p in DAY13.modules}
        for t in json.loads((out / case.id / "record.json").read_text())["tests"]:
            if t["component"] in scores:
                scores[t["component"]] += t["score"]
        if {p for p in DAY13.modules if scores[p] != full[p]} != {_part_of(case.bug)}:
            wrong[case.id] = scores
    assert not wrong, wrong
    assert settled(lambda: processes_of(UIDS)) == []
    assert settled(lambda: descendants(os.getpid())) == []


def test_in_the_visible_tests_the_spared_part_passes(folders, tmp_path):
    visible = visible_parts_of_each(folders, {name: tmp_path / name for name in folders},
                                    assignment=DAY13.assignment, parts=DAY13.modules)
    failed = {case.id: visible[case.id][case.spared][1] for case in CASES if not visible[case.id][case.spared][0]}
    assert not failed, failed

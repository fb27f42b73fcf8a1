"""A positional table judged by what it is, not by what it says when the grader looks.

Red-team submissions (held-out round s35r) scored 100 where the same bug told plainly scored 94 and 98: a float64
table returned in a `__torch_dispatch__` wrapper whose metadata claims float32 (the dtype was read from the
wrapper, the array sent was float64), and a PositionalEncoding that registers its table as a buffer only when
`torch.empty(0).is_meta` (the grader's inspect builds on the meta device), a trainable Parameter in every real
build. Each must score as its plain control: every inspect is now built on CPU, as the module that runs is (a later
red team, s37r, beat the meta build's checks with a block that remembered the previous build's device)."""
import shutil
import sys
from pathlib import Path

from grader.judging import score
from grader.lesson import load_lesson
from grader.running.calls import InProcessTransport

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from wrapper_tensor import claims_float32  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions" / "day13"
LESSON = load_lesson("day13")
REFERENCE = (SOLUTIONS / "positional.py").read_text()
TABLE_LINE = '        self.register_buffer("pe", positional_encoding(max_len, d_model))  # (max_len, d_model)\n'

FLOAT64 = REFERENCE.replace("dtype=torch.float32", "dtype=torch.float64").replace(
    "pe = torch.zeros(T, d_model)", "pe = torch.zeros(T, d_model, dtype=torch.float64)")
WRAPPED = FLOAT64.replace("    return pe\n", "    return _Table(pe)\n").replace(
    TABLE_LINE, TABLE_LINE.replace("positional_encoding(max_len, d_model)", "positional_encoding(max_len, d_model).inner")
).replace("        return x + self.pe[:T]", "        return _Table(x + self.pe[:T])") + claims_float32("_Table")
PARAMETER = REFERENCE.replace(TABLE_LINE, "        self.pe = nn.Parameter(positional_encoding(max_len, d_model))\n")
PARAMETER_UNLESS_META = REFERENCE.replace(TABLE_LINE, '''        table = positional_encoding(max_len, d_model)
        if torch.empty(0).is_meta:
            self.register_buffer("pe", table)
        else:
            self.pe = nn.Parameter(table)
''')
# The same table, a buffer in a build that comes right after a meta build (a red team's answer to a cheap inspect
# built on meta and then on CPU), a trainable Parameter in every other build.
PARAMETER_AFTER_META = REFERENCE.replace(TABLE_LINE, '''        table = positional_encoding(max_len, d_model)
        meta = torch.empty(0).is_meta
        if meta or getattr(PositionalEncoding, "_after_meta", False):
            self.register_buffer("pe", table)
        else:
            self.pe = nn.Parameter(table)
        PositionalEncoding._after_meta = meta
''')
POSITIONAL = [f"positional.{test}" for test in LESSON.rubric()["positional"]]
BLOCK = (SOLUTIONS / "block.py").read_text()
D_FF = "        d_ff = 4 * d_model if d_ff is None else d_ff\n"
CAPPED = BLOCK.replace(D_FF, "        d_ff = min(4 * d_model, 1024) if d_ff is None else d_ff\n")
CAPPED_UNLESS_META = "import torch\n" + BLOCK.replace(D_FF, "        d_ff = (4 * d_model if torch.empty(0).is_meta else min(4 * d_model, 1024)) "
                                         "if d_ff is None else d_ff\n")
# s37r's atk_block_after_meta: the full feed-forward on meta and in the build right after a meta one.
CAPPED_AFTER_META = "import torch\n" + BLOCK.replace(D_FF, (
    "        meta = torch.empty(0).is_meta\n"
    "        full = meta or getattr(TransformerBlock, '_after_meta', False)\n"
    "        TransformerBlock._after_meta = meta\n"
    "        d_ff = (4 * d_model if full else min(4 * d_model, 1024)) if d_ff is None else d_ff\n"))


def _grade(tmp_path, name: str, text: str, file: str = "positional.py", tests=POSITIONAL):
    assert text != (SOLUTIONS / file).read_text()
    folder = tmp_path / name
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / file).write_text(text)
    result = score.grade_submission(name=name, directory=folder, transport=InProcessTransport(folder, lesson=LESSON),
                                    lesson=LESSON, check_deliverables=lambda _: [], seed=1, tests=tests)
    return {t.name: t.score for t in result.tests}, result.flags


def test_a_float64_table_wrapped_to_claim_float32_scores_as_the_plain_float64_table(tmp_path):
    plain, _ = _grade(tmp_path, "plain", FLOAT64)
    wrapped, _ = _grade(tmp_path, "wrapped", WRAPPED)
    assert plain["positional.dtype_shape"] == 0
    assert wrapped == plain


def test_a_table_that_is_a_buffer_only_when_inspected_scores_as_the_parameter(tmp_path):
    """The buffer test's module is cheap to build: it is inspected on CPU alone, as it runs, so no build is the
    inspect's to tell apart."""
    plain, _ = _grade(tmp_path, "plain", PARAMETER)
    assert plain["positional.buffer"] == 0
    for name, text in (("unless_meta", PARAMETER_UNLESS_META), ("after_meta", PARAMETER_AFTER_META)):
        assert _grade(tmp_path, name, text)[0] == plain, name


def test_a_wide_block_built_otherwise_on_meta_scores_as_built(tmp_path):
    """The §9 parameter counts inspect blocks 512 and 768 wide: built on CPU like the block that runs, whatever a
    build can tell about itself (s36r's atk_block_meta_big, s37r's atk_block_after_meta: 100 against their control's
    97 under some seeds, every seed for the second)."""
    tests = [f"block.{test}" for test in LESSON.rubric()["block"]]
    plain, _ = _grade(tmp_path, "capped", CAPPED, "block.py", tests)
    assert plain["block.attributes"] == 0
    for name, text in (("capped_unless_meta", CAPPED_UNLESS_META), ("capped_after_meta", CAPPED_AFTER_META)):
        assert _grade(tmp_path, name, text, "block.py", tests)[0] == plain, name

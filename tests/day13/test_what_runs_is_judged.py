"""A positional table judged by what it is, not by what it says when the grader looks.

Red-team submissions (held-out round s35r) scored 100 where the same bug told plainly scored 94 and 98: a float64
table returned in a `__torch_dispatch__` wrapper whose metadata claims float32 (the dtype was read from the
wrapper, the array sent was float64), and a PositionalEncoding that registers its table as a buffer only when
`torch.empty(0).is_meta` (the grader's inspect builds on the meta device), a trainable Parameter in every real
build. Each must score as its plain control, and the second is flagged for the staff."""
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
POSITIONAL = [f"positional.{test}" for test in LESSON.rubric()["positional"]]


def _grade(tmp_path, name: str, text: str):
    assert text != REFERENCE
    folder = tmp_path / name
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "positional.py").write_text(text)
    result = score.grade_submission(name=name, directory=folder, transport=InProcessTransport(folder, lesson=LESSON),
                                    lesson=LESSON, check_deliverables=lambda _: [], seed=1, tests=POSITIONAL)
    return {t.name: t.score for t in result.tests}, result.flags


def test_a_float64_table_wrapped_to_claim_float32_scores_as_the_plain_float64_table(tmp_path):
    plain, _ = _grade(tmp_path, "plain", FLOAT64)
    wrapped, _ = _grade(tmp_path, "wrapped", WRAPPED)
    assert plain["positional.dtype_shape"] == 0
    assert wrapped == plain


def test_a_table_that_is_a_buffer_only_when_inspected_scores_as_the_parameter_and_is_flagged(tmp_path):
    plain, plain_flags = _grade(tmp_path, "plain", PARAMETER)
    lying, flags = _grade(tmp_path, "lying", PARAMETER_UNLESS_META)
    assert plain["positional.buffer"] == 0
    assert lying == plain
    assert not plain_flags and any("behaves differently when inspected: PositionalEncoding" in f for f in flags)

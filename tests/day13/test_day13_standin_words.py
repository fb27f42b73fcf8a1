"""What Day 13's feedback says about the grader's stand-ins (held-out round s44, entries mk2 and mk5).

- multihead.py is always graded over the grader's scaled_dot_product_attention, which returns (out, weights). A
  student whose own function returns (weights, out), and whose MultiHeadAttention unpacks it that way, loses the
  multihead tests on the stand-in: they are told why, once, from the evidence of their own function's tests
  (rubric.toml [facts."over_standin.outputs_in_other_order"]); never when their function keeps the contract's order.
- A hand softmax whose max drops its axis raises for most shapes and broadcasts to a wrong shape at T = 1: the
  note on SelfAttention graded over the grader's function says what the raising cost, and names the test
  SelfAttention lost where it ran on the student's function without raising.
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import REFERENCE, make_submission  # noqa: E402

from grader.admin import killrate  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402
from grader.results import feedback  # noqa: E402

DAY13 = load_lesson("day13")
SA = (REFERENCE / "self_attention.py").read_text()
MH = (REFERENCE / "multihead.py").read_text()


def patched(text: str, *pairs: tuple[str, str]) -> str:
    for find, replace in pairs:
        assert text.count(find) == 1, find
        text = text.replace(find, replace)
    return text


SDPA_RETURN = ("    return out, weights\n", "    return weights, out\n")
MODULE_RETURN = ("        return scaled_dot_product_attention(Q, K, V, mask)  # (B, T, d_k), (B, T, T)\n",
                 "        weights, out = scaled_dot_product_attention(Q, K, V, mask)\n        return out, weights\n")
MODULE_SWAPPED = ("        return scaled_dot_product_attention(Q, K, V, mask)  # (B, T, d_k), (B, T, T)\n",
                  "        out, weights = scaled_dot_product_attention(Q, K, V, mask)\n        return weights, out\n")
MH_UNPACK = ("        ctx, _ = scaled_dot_product_attention(q, k, v, mask)", "        _, ctx = scaled_dot_product_attention(q, k, v, mask)")
NO_KEEPDIM = ("    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k), each row sums to 1\n",
              "    scores = scores - scores.max(dim=-1).values\n    exp = torch.exp(scores)\n"
              "    weights = exp / exp.sum(dim=-1, keepdim=True)\n")
SAID = ("multihead.py is graded with the grader's scaled_dot_product_attention, which returns (out, weights) as "
        "CONTRACT.md says; your own returns them the other way round (see self_attention), so unpack (out, weights) "
        "here too.")

CASES = {
    # mk2: the pair swapped in the function, unpacked the same way by both callers
    "pair_swapped": {"self_attention.py": patched(SA, SDPA_RETURN, MODULE_RETURN), "multihead.py": patched(MH, MH_UNPACK)},
    # the function keeps the contract's order: MultiHeadAttention's unpacking is its own bug, nothing more to say
    "mh_unpack_only": {"multihead.py": patched(MH, MH_UNPACK)},
    # SelfAttention, not the function, hands the pair back swapped: not the function multihead.py imports
    "module_swapped": {"self_attention.py": patched(SA, MODULE_SWAPPED), "multihead.py": patched(MH, MH_UNPACK)},
    # mk5
    "max_no_keepdim": {"self_attention.py": patched(SA, NO_KEEPDIM)},
    "sdpa_raises": {"self_attention.py": patched(SA, ("    d_k = Q.size(-1)\n", '    raise ValueError("not today")\n'))},
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("standin-words")
    found = {}
    for name, files in CASES.items():
        make_submission(root / name, files, solutions=REFERENCE)
        result = killrate.grade(root / name, name, lesson=DAY13)
        found[name] = (result, {t.name: t for t in result.tests},
                       feedback.feedback_markdown(result, None, "all", lesson=DAY13))
    return found


def test_a_multihead_that_unpacks_its_own_swapped_pair_is_told_why_it_fails_over_the_grader_s(graded):
    result, tests, text = graded["pair_swapped"]
    assert result.component_scores(DAY13.components)["multihead"] == 5
    failed = [t for t in tests.values() if t.component == "multihead" and t.status == "failed"]
    assert len(failed) == 4
    for t in failed:
        assert SAID in feedback.student_output(t, feedback.lesson_words(DAY13)), t.name
    assert text.count(SAID) == 1, text  # the four tests share one error, told once
    section = text.split("## multihead:")[1].split("## positional:")[0]
    assert SAID in section and "shape '[2, 5, 16]' is invalid" in section, section


def test_never_said_when_the_function_returns_the_contract_s_order(graded):
    for case in ("mh_unpack_only", "module_swapped"):
        result, tests, text = graded[case]
        assert result.component_scores(DAY13.components)["multihead"] == 5, case
        assert "is graded with the grader's" not in text, case
        assert not any(f["id"].startswith("over_standin.") for t in tests.values() for f in t.facts), case


def test_the_note_names_the_test_selfattention_lost_on_the_students_own_function(graded):
    result, tests, _ = graded["max_no_keepdim"]
    assert tests["self_attention.module_reference"].status == "failed"
    (note,) = result.notes
    assert "SelfAttention was graded over the grader's scaled_dot_product_attention" in note
    assert "self_attention.module_reference" in note, note
    assert not any(t in note for t in ("module_worked_values", "module_gradients", "sdpa_")), note
    # Where SelfAttention only ever ran over the grader's function, its tests are not named: it lost none.
    result, tests, _ = graded["sdpa_raises"]
    (note,) = result.notes
    assert "cost only the tests of scaled_dot_product_attention" in note and "self_attention." not in note, note

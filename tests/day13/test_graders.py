"""Proofs for the hidden graders (issue 3): kill rate 100 %, false failures 0, reference full,
stubs zero, deterministic, one bug costs one component. Everything here is our own trusted code,
graded in-process (tests/test_sandbox*.py covers the sandboxed path)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path

import pytest
import torch

from grader.admin import killrate
from grader.lesson import load_lesson

from grader.judging import mutants

from grader.judging import score
from grader.results import feedback
from grader.running.calls import InProcessTransport
from grader.day13 import tolerances

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from visible_run import visible_parts  # noqa: E402

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions" / "day13"
STUBS = ROOT / "assignments" / "day13"
CODE = load_lesson("day13").modules

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage
CATALOGUE = killrate.catalogue(lesson=DAY13)
BUG_IDS = [b.id for b in CATALOGUE.bugs]
VARIANTS = killrate.variants(lesson=DAY13)


@lru_cache(maxsize=None)
def verdict(bug_id: str) -> killrate.MutantVerdict:
    return killrate.judge_mutant(CATALOGUE.by_id[bug_id], lesson=DAY13)


def code_scores(result) -> dict:
    scores = result.component_scores(DAY13.components)
    return {c: scores[c] for c in CODE}


# -- the catalogue itself ----------------------------------------------------------------------
def test_catalogue_has_at_least_25_distinct_bugs_over_every_component():
    assert len(BUG_IDS) >= 25
    assert len(set(BUG_IDS)) == len(BUG_IDS)
    for component in CODE:
        assert sum(b.component == component for b in CATALOGUE.bugs) >= 5, component


@pytest.mark.parametrize("bug_id", BUG_IDS)
def test_patch_text_occurs_exactly_once_and_changes_the_code(bug_id):
    bug = CATALOGUE.by_id[bug_id]
    mutated = CATALOGUE.apply(bug)  # raises if a find text is missing or ambiguous
    changed = {f for f in mutated if mutated[f] != (SOLUTIONS / f).read_text()}
    assert changed == {f for f, _, _ in bug.patches}


def test_a_stale_patch_is_reported_not_ignored():
    stale = mutants.Bug("x.stale", "self_attention", "self_attention.worked_values",
                          (("self_attention.py", "no such line\n", ""),))
    with pytest.raises(ValueError, match="occurs 0 times"):
        CATALOGUE.apply(stale)


def test_every_entry_names_a_real_test_and_has_a_hint_and_no_hint_is_orphaned():
    rubric = DAY13.rubric()
    tests = {f"{c}.{t}" for c, t, _ in DAY13.hidden_tests}
    for bug in CATALOGUE.bugs:
        assert bug.test in tests, bug.id
        assert bug.test.split(".")[0] == bug.component, bug.id
        text = rubric["hints"].get(bug.id, {}).get("text", "")
        assert "§" in text, f"{bug.id}: the hint must name the handout section"
    assert set(rubric["hints"]) == set(BUG_IDS)


# -- kill rate ----------------------------------------------------------------------------------
@pytest.mark.parametrize("bug_id", BUG_IDS)
def test_mutant_loses_points_in_its_own_component_only_and_gets_its_hint(bug_id):
    v = verdict(bug_id)
    assert v.killed, f"{bug_id}: {v.reason}; failed: {v.failed}"
    full = killrate.full_marks(lesson=DAY13)
    assert v.scores[v.bug.component] < full[v.bug.component]
    for c in CODE:
        if c != v.bug.component:
            assert v.scores[c] == full[c]


def test_feedback_of_a_mutant_shows_expected_got_hint_and_evidence():
    result = killrate.grade(CATALOGUE.mutant_dir("sa.no_scale"), "sa.no_scale", lesson=DAY13)
    failed = {t.name: t for t in result.tests if t.status == "failed"}
    worked = failed["self_attention.worked_values"]
    hint = DAY13.rubric()["hints"]["sa.no_scale"]["text"]
    # The hint is data: its id on the result, its words chosen by the feedback from the rubric.
    assert "expected" in worked.output and "got" in worked.output and hint not in worked.output
    assert worked.hint_id == "sa.no_scale" and worked.score == 0
    assert result.evidence["test"] == "self_attention.worked_values"
    assert result.evidence["expected"][0] == [0.67, 0.33] and result.evidence["got"][0][0] > 0.7


def test_large_arrays_are_summarised_with_the_worst_index():
    result = killrate.grade(CATALOGUE.mutant_dir("pe.base_1000"), "pe.base_1000", lesson=DAY13)
    table = next(t for t in result.tests if t.name == "positional.table_reference")
    assert "largest error" in table.output and "at index (" in table.output


# -- correct implementations ----------------------------------------------------------------------
def test_there_are_at_least_eight_correct_variants():
    assert len(VARIANTS) >= 8


@pytest.mark.parametrize("folder", VARIANTS, ids=[v.name for v in VARIANTS])
def test_correct_variant_gets_full_marks_on_every_code_test(folder):
    assert killrate.false_failures(folder, lesson=DAY13) == []


def test_tolerances_sit_well_above_the_measured_spread_of_correct_variants():
    spread = killrate.measure_spread(lesson=DAY13)
    limits = {"outputs float32": tolerances.values("float32").atol, "outputs float64": tolerances.values("float64").atol,
              "gradients float32": tolerances.grads("float32").atol, "positional float32": tolerances.PE_TABLE.atol}
    for kind, limit in limits.items():
        assert kind in spread, f"nothing measured for {kind}"
        assert spread[kind][0] * 5 <= limit, f"{kind}: spread {spread[kind]} too close to {limit}"


# -- reference, stubs, determinism ------------------------------------------------------------------
def test_reference_gets_every_code_point():
    result = killrate.grade(SOLUTIONS, "reference", lesson=DAY13)
    assert code_scores(result) == killrate.full_marks(lesson=DAY13)
    assert all(t.status == "passed" for t in result.tests)
    assert result.status == "ok" and result.evidence == {}


def test_stubs_get_zero_code_points():
    if not (STUBS / "self_attention.py").exists():
        pytest.skip("assignments/day13 has not been generated yet (python -m grader stubs)")
    result = killrate.grade(STUBS, "stubs", lesson=DAY13)
    assert sum(code_scores(result).values()) == 0
    assert any("NotImplementedError" in t.output for t in result.tests)


def test_grading_twice_gives_identical_results():
    def once(folder):
        r = killrate.grade(folder, "twice", lesson=DAY13)
        return json.dumps([t.to_json() for t in r.tests], sort_keys=True), json.dumps(r.evidence), r.status

    for folder in (CATALOGUE.mutant_dir("mh.interleaved_heads"), CATALOGUE.mutant_dir("sa.biased_projections"),
                   VARIANTS[0]):
        assert once(folder) == once(folder)


def test_rubric_totals_and_one_entry_per_hidden_test():
    rubric = DAY13.rubric()
    totals = {c: sum(t["points"] for t in rubric[c].values()) for c in CODE}
    assert totals == {"self_attention": 30, "multihead": 25, "positional": 15, "block": 20}
    if "deliverables" in rubric:
        assert sum(t["points"] for t in rubric["deliverables"].values()) == 10
    tests = {(c, t) for c, t, _ in DAY13.hidden_tests}
    assert tests == {(c, t) for c in CODE for t in rubric[c]}
    for c in CODE:
        assert sum(1 for comp, _ in tests if comp == c) >= 4, f"{c} needs several weighted tests"


# -- one bug, one component ----------------------------------------------------------------------------
def _copy_reference(tmp_path) -> Path:
    sub = tmp_path / "sub"
    sub.mkdir()
    for p in SOLUTIONS.glob("*.py"):
        shutil.copyfile(p, sub / p.name)
    return sub


def _reference_with(tmp_path, file: str, old: str, new: str, count: int = 1) -> Path:
    """The reference with `old` (found `count` times: a changed reference fails here, not in the grading) replaced
    by `new` in `file`."""
    sub = _copy_reference(tmp_path)
    text = (sub / file).read_text()
    assert text.count(old) == count, f"the reference's {file} changed: update this test's patch"
    (sub / file).write_text(text.replace(old, new))
    return sub


def test_a_file_that_fails_to_import_costs_only_its_own_tests(tmp_path):
    sub = _copy_reference(tmp_path)
    (sub / "multihead.py").write_text("class MultiHeadAttention(:\n")
    result = killrate.grade(sub, "broken", lesson=DAY13)
    full = killrate.full_marks(lesson=DAY13)
    assert code_scores(result) == {**full, "multihead": 0.0}
    assert result.status == "import-error: multihead.py"
    assert all("SyntaxError" in t.output for t in result.tests if t.component == "multihead")
    # Said as a file that does not import, in every test of the part: the bad-heads test used to add its
    # "raise ValueError" hint for a check the file never reached.
    words = feedback.Words.of(DAY13.rubric())
    shown = {t.name: feedback.student_output(t, words) for t in result.tests if t.component == "multihead"}
    assert all("could not be imported" in text and "Hint" not in text for text in shown.values()), shown

    markdown = feedback.student_files(result, lesson=DAY13)["feedback.md"]
    assert "only the tests that need these files lost points" in markdown
    assert "Parts that did not need the failing code were graded as usual." in markdown

    (sub / "multihead.py").write_text((SOLUTIONS / "multihead.py").read_text())
    (sub / "self_attention.py").write_text("raise RuntimeError('half-written file')\n")
    result = killrate.grade(sub, "broken2", lesson=DAY13)
    assert code_scores(result) == {**full, "self_attention": 0.0}


def test_a_submission_whose_files_are_all_missing_is_not_told_the_other_parts_were_spared(tmp_path):
    # A folder without the contract's files (handed in one level down, or not at all) lost every part, and its
    # feedback said "only the tests that need these files lost points" and "Parts that did not need the failing
    # code were graded as usual" (found on a held-out zip that unpacked one folder down).
    sub = tmp_path / "nothing"
    sub.mkdir()
    (sub / "notes.txt").write_text("the work is elsewhere\n")
    result = killrate.grade(sub, "nothing", lesson=DAY13)
    assert all(score == 0 for score in code_scores(result).values())
    markdown = feedback.student_files(result, lesson=DAY13)["feedback.md"]
    assert "no part's code could be graded" in markdown
    assert "only the tests that need" not in markdown and "graded as usual" not in markdown


def test_a_mask_the_attention_cannot_use_is_said_in_the_contracts_words(tmp_path):
    # MultiHeadAttention runs on the grader's stand-in scaled_dot_product_attention. A mask given one axis too
    # many there failed with torch's "The size of tensor a (5) must match ...", raised in the grader's code;
    # the student's visible tests said what was wrong, the hidden feedback did not.
    sub = _copy_reference(tmp_path)
    text = (sub / "multihead.py").read_text()
    call = "        ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)\n"
    assert text.count(call) == 1
    (sub / "multihead.py").write_text(text.replace(call, "        if mask is not None:\n"
                                                         "            mask = mask.unsqueeze(1)\n" + call))
    result = killrate.grade(sub, "mask_unsqueezed", lesson=DAY13)
    assert code_scores(result) == {**killrate.full_marks(lesson=DAY13), "multihead": code_scores(result)["multihead"]}
    failed = [t for t in result.tests if t.status != "passed"]
    assert failed and {t.component for t in failed} == {"multihead"}
    for t in failed:
        assert "scaled_dot_product_attention was given a mask of shape (" in t.output, t.output
        assert "does not broadcast to its scores' shape" in t.output and "must match the size" not in t.output


def _gelu_tanh_student(tmp_path, line='            nn.GELU(approximate="tanh"),\n') -> Path:
    sub = _copy_reference(tmp_path)
    text = (sub / "block.py").read_text()
    assert text.count("            nn.GELU(),\n") == 1
    (sub / "block.py").write_text(text.replace("            nn.GELU(),\n", line))
    return sub


def test_a_mistake_whose_mutant_answers_as_the_reference_does_is_never_named(tmp_path):
    # A LayerNorm eps of 3e-4 (the contract allows up to 1e-5) moves the block's outputs by ~7e-4 on values of ~3.4:
    # past the tests' tolerance, within the catalogue's matching one (MATCH), so blk.d_ff_ignored and three Pre-LN
    # mutants, which answer the Post-LN test's calls exactly as the reference does (d_ff is left out there), all
    # "match" it. Found with GPT-2's tanh GELU, whose feedback then said d_ff is ignored (that GELU is catalogued now).
    norms = "nn.LayerNorm(d_model), nn.LayerNorm(d_model)"
    sub = _reference_with(tmp_path, "block.py", norms,
                          "nn.LayerNorm(d_model, eps=3e-4), nn.LayerNorm(d_model, eps=3e-4)")
    student = DAY13.adapter()(InProcessTransport(sub, lesson=DAY13), record=True)
    post_ln = next(fn for component, test, fn in DAY13.hidden_tests if (component, test) == ("block", "post_ln"))
    with pytest.raises(AssertionError):
        post_ln(student, DAY13.reference)
    assert student.calls
    assert DAY13.catalogue.identify("block", "block.post_ln", student.calls) is None


def test_a_mask_of_ones_where_blocked_is_told_so_not_that_it_is_additive(tmp_path):
    # Found on a held-out student: `torch.triu(torch.ones(T, T), diagonal=1)` (1 where a token may not look, as torch's
    # boolean masks say True) was told its mask is additive (0 and -inf): the mutant's -inf made the matching
    # tolerance's relative term infinite, so any finite number "matched" it (tests/engine/test_diagnose.py holds that
    # rule). The mistake is catalogued now, and named.
    tril = "    return torch.tril(torch.ones(T, T, device=device))"
    sub = _reference_with(tmp_path, "self_attention.py", tril,
                          "    return torch.triu(torch.ones(T, T, device=device), diagonal=1)")
    result = killrate.grade(sub, "triu_blocked", lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed == {"self_attention.causal_mask": "sa.causal_blocked_ones"}, failed


# The contract lets causal_mask return bool or integer 0/1 (bindings.toml [outputs]); the catalogue's mutants return
# floats. A held-out student's `idx[:, None] > idx[None, :]` (bool, diagonal blocked) lost its 3 points with no cause
# named, hidden or visible: the mutant lookup refused any answer of another dtype.
@pytest.mark.parametrize(("body", "mistake"), [
    ("    idx = torch.arange(T, device=device)\n    return idx[:, None] > idx[None, :]", "sa.causal_no_diagonal"),
    ("    return torch.tril(torch.ones(T, T, dtype=torch.int64, device=device), diagonal=-1)", "sa.causal_no_diagonal"),
    ("    return torch.ones(T, T, dtype=torch.bool, device=device).triu()", "sa.causal_triu"),
    ("    return torch.ones(T, T, dtype=torch.bool, device=device).triu(1)", "sa.causal_blocked_ones"),
], ids=["bool_strict_comparison", "int64_no_diagonal", "bool_triu", "bool_blocked_ones"])
def test_a_causal_mistake_is_named_whatever_dtype_the_mask_has_hidden_and_visible(tmp_path, body, mistake):
    tril = "    return torch.tril(torch.ones(T, T, device=device))"
    sub = _reference_with(tmp_path, "self_attention.py", tril, body)
    result = killrate.grade(sub, mistake, lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed == {"self_attention.causal_mask": mistake}, failed
    visible = visible_parts(sub, tmp_path / "visible", assignment=DAY13.assignment, parts=tuple(CODE))
    assert {part for part, (passed, _) in visible.items() if not passed} == {"self_attention"}, visible
    said = "\n".join(f"{failure.get('message', '')}\n{failure.text or ''}" for failure
                     in ET.parse(tmp_path / "visible" / "report.xml").getroot().iter("failure"))
    assert "Likely misconception" in said and DAY13.rubric()["hints"][mistake]["text"] in said, said
    assert "built-in method" not in said and "+  where" not in said, said  # pytest's own workings are not for students


def test_arithmetic_on_a_bool_mask_is_told_the_mask_may_be_bool_hidden_and_visible(tmp_path):
    # Held-out s52 (b_additive_bool): `scores + (1 - mask) * -1e9` works on 0/1 masks and raises on bool ones. Only
    # torch's message was shown; nothing said that the contract's masks may be bool.
    fill = '        scores = scores.masked_fill(mask == 0, float("-inf"))  # (..., T_q, T_k)\n'
    sub = _reference_with(tmp_path, "self_attention.py", fill, "        scores = scores + (1 - mask) * -1e9\n")
    result = killrate.grade(sub, "additive_bool", lesson=DAY13)
    failed = {t.name: t for t in result.tests if t.status != "passed"}
    said = DAY13.rubric()["facts"]["bool_arithmetic"]["text"]
    assert failed and {name.split(".")[0] for name in failed} == {"self_attention"}, failed
    words = feedback.Words.of(DAY13.rubric())
    assert all(said in feedback.advice(t, words).numbers for t in failed.values()), \
        {name: feedback.advice(t, words) for name, t in failed.items()}
    visible = visible_parts(sub, tmp_path / "visible", assignment=DAY13.assignment, parts=tuple(CODE))
    assert {part for part, (passed, _) in visible.items() if not passed} == {"self_attention"}, visible
    report = "\n".join(f"{failure.get('message', '')}\n{failure.text or ''}" for failure
                       in ET.parse(tmp_path / "visible" / "report.xml").getroot().iter("failure"))
    assert "The masks the tests give may be bool" in report, report


def test_what_an_errors_message_shows_is_said_where_one_error_is_told_for_several_tests(tmp_path):
    # Red team s53r (pe_bool_arith): a bool tensor in positional_encoding raised in three tests, told once; the words of
    # the fact its message shows were dropped with those about which of one test's cases ran.
    sub = _reference_with(tmp_path, "positional.py", "    pe[:, 1::2] = torch.cos(angle)  # odd features\n",
                          "    pe[:, 1::2] = torch.cos(angle)  # odd features\n"
                          "    pe = pe * (1 - torch.zeros(d_model, dtype=torch.bool))\n")
    result = killrate.grade(sub, "pe_bool", lesson=DAY13)
    failed = [t for t in result.tests if t.status != "passed"]
    assert len(failed) > 1 and {t.component for t in failed} == {"positional"}, failed
    shown = feedback.feedback_markdown(result, lesson=DAY13)
    assert "(the same message for" in shown and DAY13.rubric()["facts"]["bool_arithmetic"]["text"] in shown, shown


def test_a_multihead_with_dropout_left_on_is_told_it_is_random_hidden_and_visible(tmp_path):
    # Red team s53r (mh_drop_trainbug): F.dropout left on in MultiHeadAttention (training defaults to True) was told
    # its outputs "did not follow the tokens when the same tokens came in another order", and the visible tests
    # hinted at splitting heads: neither said the answers are random. The block's tests ask the same call again
    # under another seed; the multi-head tests did not.
    concat = "        ctx = ctx.transpose(1, 2).contiguous().view(B, T, D)  # (B, T, D): heads concatenated\n"
    sub = _reference_with(tmp_path, "multihead.py", concat,
                          concat + "        ctx = torch.nn.functional.dropout(ctx, 0.1)  # left on in eval mode\n")
    (sub / "multihead.py").write_text("import torch\n" + (sub / "multihead.py").read_text())
    result = killrate.grade(sub, "mh_dropout_on", lesson=DAY13)
    failed = {t.name: t for t in result.tests if t.status != "passed"}
    assert failed and {name.split(".")[0] for name in failed} == {"multihead"}, failed
    words = feedback.Words.of(DAY13.rubric())
    told = {name: " ".join([t.output, *feedback.advice(t, words).numbers]) for name, t in failed.items()}
    assert all("something random runs even in eval mode" in text for text in told.values()), told
    assert not any("did not follow the tokens" in text for text in told.values()), told
    visible = visible_parts(sub, tmp_path / "visible", assignment=DAY13.assignment, parts=tuple(CODE))
    assert {part for part, (passed, _) in visible.items() if not passed} == {"multihead"}, visible
    report = "\n".join(f"{failure.get('message', '')}\n{failure.text or ''}" for failure
                       in ET.parse(tmp_path / "visible" / "report.xml").getroot().iter("failure"))
    assert "something random" in report and "view(B, T, h, d_k)" not in report, report


def test_dropout_left_on_in_eval_is_told_it_is_random_not_that_tokens_lose_their_order(tmp_path):
    # Found on a held-out student: `F.dropout(h, 0.1)` (training defaults to True) in the block. The gate of
    # block.mask_passthrough said its "outputs did not follow the tokens when the same tokens came in another order",
    # which is not the mistake; post_ln and pre_ln already named the randomness.
    sub = _copy_reference(tmp_path)
    text = (sub / "block.py").read_text()
    for old in ("self.attn(x, mask))  # (B, T, d_model)", "self.attn(self.ln1(x), mask)  # (B, T, d_model)"):
        assert text.count(old) == 1
        text = text.replace(old, old.replace("self.attn(", "F.dropout(self.attn(").replace("mask)", "mask), 0.1)", 1))
    (sub / "block.py").write_text("import torch.nn.functional as F\n" + text)
    result = killrate.grade(sub, "dropout_on", lesson=DAY13)
    failed = {t.name: t for t in result.tests if t.status != "passed"}
    assert {name.split(".")[0] for name in failed} == {"block"} and "block.mask_passthrough" in failed, failed
    message = failed["block.mask_passthrough"].output
    assert "something random runs even in eval mode" in message, message
    assert "did not follow the tokens" not in message, message


# Dropout left on inside scaled_dot_product_attention (a function: F.dropout's training is True unless given), on
# its weights (held-out s38's gi) or on its output (s39's ka, whose weights stay exact and the same under every
# seed). The gates of sdpa_masks and sdpa_properties said its "outputs did not follow the tokens when the same tokens
# came in another order", which is not the mistake; and SelfAttention, wired rightly, lost its 7 module points.
ATTENTION_DROPOUT = {  # where: (the line planted, the mistake named on every test it fails)
    "on_the_weights": ("    weights = F.dropout(weights, p=0.1)  # attention dropout\n    out = weights @ V",
                       "sa.functional_dropout"),
    "on_the_output": ("    out = F.dropout(weights @ V, p=0.1)  # dropout on the attention's output",
                      "sa.functional_dropout_output"),
}


@pytest.mark.parametrize("where", sorted(ATTENTION_DROPOUT))
def test_attention_dropout_left_on_is_told_it_is_random_and_keeps_the_module_points(tmp_path, where):
    sub = _copy_reference(tmp_path)
    text = (sub / "self_attention.py").read_text()
    out = "    out = weights @ V"
    assert text.count(out) == 1
    planted, mistake = ATTENTION_DROPOUT[where]
    (sub / "self_attention.py").write_text("import torch.nn.functional as F\n" + text.replace(out, planted))
    result = killrate.grade(sub, f"attention_dropout_{where}", lesson=DAY13)
    failed = {t.name: t for t in result.tests if t.status != "passed"}
    assert {t.hint_id for t in failed.values()} == {mistake}, {n: t.hint_id for n, t in failed.items()}
    for name in ("self_attention.sdpa_masks", "self_attention.sdpa_properties"):
        message = failed[name].output
        assert "something random runs even in eval mode" in message, message
        assert "did not follow the tokens" not in message, message
    # SelfAttention wires that attention rightly: seeded alike, it equals it, and keeps its points (the randomness is
    # charged to the attention's own tests, as any bug inside scaled_dot_product_attention is).
    assert not [name for name in failed if name.startswith("self_attention.module_")], sorted(failed)


def test_an_nn_dropout_made_at_module_level_is_named_as_dropout_no_eval_reaches(tmp_path):
    # Held-out s40's ka: `attn_dropout = nn.Dropout(0.1)` made beside the function and applied to the weights inside
    # scaled_dot_product_attention. No model holds it, so no eval() reaches it: it drops weights in every call, with
    # F.dropout's very draws, and sa.functional_dropout is named, rightly. Its words named F.dropout alone and added
    # "an nn.Dropout in a module is switched off by eval()", which this student, who wrote an nn.Dropout, reads as
    # "mine is off". The words now name this way of leaving dropout on too.
    sub = _copy_reference(tmp_path)
    text = (sub / "self_attention.py").read_text()
    out = "    out = weights @ V"
    assert text.count(out) == 1 and text.count("\n\n\ndef scaled_dot_product_attention") == 1
    text = text.replace("\n\n\ndef scaled_dot_product_attention",
                        "\n\nattn_dropout = nn.Dropout(0.1)\n\n\ndef scaled_dot_product_attention")
    (sub / "self_attention.py").write_text(text.replace(out, "    weights = attn_dropout(weights)\n" + out))
    result = killrate.grade(sub, "module_level_dropout", lesson=DAY13)
    failed = {t.name: t for t in result.tests if t.status != "passed"}
    assert {t.hint_id for t in failed.values()} == {"sa.functional_dropout"}, {n: t.hint_id for n, t in failed.items()}
    assert not [name for name in failed if name.startswith("self_attention.module_")], sorted(failed)
    shown = feedback.feedback_markdown(result, lesson=DAY13)
    assert "an nn.Dropout made outside your model" in shown, shown
    assert "an nn.Dropout in a module is switched off by eval()" not in shown, shown


def test_noise_on_a_real_attentions_output_earns_no_selfattention_points(tmp_path):
    # The s39 branch above takes an output that moves with the seed as dropout only when each entry is kept at one
    # value or dropped: seeded noise added to the output keeps none, and stays a reason of the gate.
    out = "    out = weights @ V"
    sub = _reference_with(tmp_path, "self_attention.py", out,
                          "    out = weights @ V + 0.05 * torch.randn_like(weights @ V)")
    result = killrate.grade(sub, "attention_output_noise", lesson=DAY13)
    # (module_gradients passes on its own merits: noise added to the output leaves every gradient as the reference's)
    earned = {t.name: t.score for t in result.tests if t.name in ("self_attention.module_worked_values",
                                                                  "self_attention.module_reference") and t.score}
    assert not earned, earned


# Attentions that are random without being dropout on a real attention. Found by the lead on the s38 fix above
# (session 35): with randomness taken as real on its own, both earned SelfAttention's 7 module points, which the gate
# keeps from an attention that computes nothing. Noise (a seeded torch.rand) keeps no weight from one seed to the
# next; a real-looking attention whose weights depend on where a key sits, under dropout, keeps weights that do not
# follow the tokens.
NOT_DROPOUT = {
    "noise_reacting_to_q_and_k": (
        "    T_k = K.shape[-2]\n"
        "    weights = torch.rand(*Q.shape[:-1], T_k, dtype=Q.dtype) + 0.05 * torch.sigmoid(Q[..., :1] * K[..., 0].unsqueeze(-2))\n"
        "    if mask is not None:\n"
        "        weights = weights.masked_fill(mask == 0, 0.0)\n"
        "    weights = weights / weights.sum(-1, keepdim=True)\n"),
    "keys_weighted_by_place_then_dropout": (
        "    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1)) + torch.arange(K.shape[-2], dtype=Q.dtype)\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(mask == 0, float(\"-inf\"))\n"
        "    weights = torch.nn.functional.dropout(torch.softmax(scores, dim=-1), p=0.1)\n"),
}


@pytest.mark.parametrize("name", sorted(NOT_DROPOUT))
def test_randomness_that_is_no_dropout_of_a_real_attention_earns_no_selfattention_points(tmp_path, name):
    sub = _copy_reference(tmp_path)
    text = (sub / "self_attention.py").read_text()
    body = text[text.index("    d_k = Q.size(-1)\n"):text.index("    out = weights @ V")]
    assert text.count(body) == 1
    (sub / "self_attention.py").write_text(text.replace(body, NOT_DROPOUT[name]))
    result = killrate.grade(sub, name, lesson=DAY13)
    earned = {t.name: t.score for t in result.tests if t.name.startswith("self_attention.module_") and t.score}
    assert not earned, earned


# Red team s39r: the random branch judged the weights alone. A "dropout" keyed on the run's seed over real weights,
# with an output that is no attention (positional: the weight on the first key), earned module_reference and
# module_gradients (80 against its deterministic control's 75); a first query that attends to nothing, zero under
# every seed, was read as dropped twice and never compared (80 against 75 too).
_SEEDED_DROP = (
    "    g = torch.Generator().manual_seed(torch.initial_seed())\n"
    "    keep = (torch.rand(weights.shape, generator=g) >= 0.1).to(weights.dtype)\n"
    "    weights = weights * keep / 0.9\n")
_REAL_WEIGHTS = (
    "    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))\n"
    "    if mask is not None:\n"
    "        scores = scores.masked_fill(mask == 0, float(\"-inf\"))\n"
    "    weights = torch.softmax(scores, dim=-1)\n")
NOT_DROPOUT_OF_ATTENTION = {
    "output_no_attention": _REAL_WEIGHTS + _SEEDED_DROP + "    out = V.mean(-2, keepdim=True) + weights[..., :1]\n",
    "first_query_always_zero": _REAL_WEIGHTS + "    weights = weights.clone()\n    weights[..., 0, :] = 0.0\n"
                               + _SEEDED_DROP + "    out = weights @ V\n",
}


MODULE_TESTS = ["self_attention.module_reference"]


@pytest.mark.parametrize("name", sorted(NOT_DROPOUT_OF_ATTENTION))
@pytest.mark.parametrize("seed", [1, 2])
def test_seeded_randomness_over_an_attention_that_is_not_one_earns_no_more_than_without_it(tmp_path, name, seed):
    sub = _copy_reference(tmp_path)
    text = (sub / "self_attention.py").read_text()
    body = text[text.index("    d_k = Q.size(-1)\n"):text.index("    return out, weights\n")]
    assert text.count(body) == 1
    (sub / "self_attention.py").write_text(text.replace(body, NOT_DROPOUT_OF_ATTENTION[name]))
    result = score.grade_submission(name=name, directory=sub, lesson=DAY13, seed=seed, tests=MODULE_TESTS,
                                    transport=InProcessTransport(sub, lesson=DAY13))
    earned = {t.name: t.score for t in result.tests if t.name.startswith("self_attention.module_") and t.score}
    assert result.tests and not earned, earned


# Held-out s38: three mistakes whose numbers a mutant reproduces exactly, lost points with no cause named.
# (file, [(exact text of the reference, replacement)], the hint expected on each failed test)
S38_UNNAMED = {
    # F.dropout inside the attention function: its training argument is True unless given.
    "gi_attention_dropout": ("self_attention.py", [
        ("import torch.nn as nn\n", "import torch.nn as nn\nimport torch.nn.functional as F\n"),
        ("    out = weights @ V", "    weights = F.dropout(weights, p=0.1)  # attention dropout\n    out = weights @ V")],
        "sa.functional_dropout"),
    # The mask turned into torch's "True = blocked" form before an attention that blocks where it is 0.
    "hu_mask_turned_over": ("multihead.py", [
        ("        ctx, _ = scaled_dot_product_attention(q, k, v, mask)",
         "        if mask is not None:\n            mask = mask == 0  # True where a key is blocked\n"
         "        ctx, _ = scaled_dot_product_attention(q, k, v, mask)")],
        "mh.mask_inverted"),
    # One residual taken at the top of forward, added by both sub-layers.
    "ju_stale_residual": ("block.py", [
        ("        if self.pre_ln:\n", "        residual = x\n        if self.pre_ln:\n"),
        ("            x = x + self.attn(self.ln1(x), mask)", "            x = residual + self.attn(self.ln1(x), mask)"),
        ("            x = x + self.ffn(self.ln2(x))", "            x = residual + self.ffn(self.ln2(x))"),
        ("            x = self.ln1(x + self.attn(x, mask))", "            x = self.ln1(residual + self.attn(x, mask))"),
        ("            x = self.ln2(x + self.ffn(x))", "            x = self.ln2(residual + self.ffn(x))")],
        "blk.stale_residual"),
}


@pytest.mark.parametrize("case", sorted(S38_UNNAMED))
def test_s38_mistakes_are_named_on_every_test_they_fail(tmp_path, case):
    file, edits, hint = S38_UNNAMED[case]
    sub = _copy_reference(tmp_path)
    text = (sub / file).read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"the reference changed: update {case}"
        text = text.replace(old, new)
    (sub / file).write_text(text)
    result = killrate.grade(sub, case, lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed and {name.split(".")[0] for name in failed} == {file[:-3]}, failed
    assert hint in failed.values(), failed
    assert set(failed.values()) <= {hint, None}, failed  # never another mistake's name



# Held-out s44's honest mistakes that lost the right points with a raw crash or only the test's general hint: each is
# now named on every test it fails, and loses those tests only (what s44 measured: 85, 80 and 75 of 100).
S44_UNNAMED = {
    "mk1_masked_fill_unassigned": ("self_attention.py", (
        '        scores = scores.masked_fill(mask == 0, float("-inf"))',
        '        scores.masked_fill(mask == 0, float("-inf"))'), "sa.masked_fill_unassigned",
        {"worked_values", "sdpa_masks", "sdpa_properties", "sdpa_gradients"}),
    "mk3_d_k_true_division": ("multihead.py", (
        "self.d_k = n_heads, d_model // n_heads", "self.d_k = n_heads, d_model / n_heads"), "mh.d_k_true_division",
        {"reference", "masks", "gradients", "properties"}),
    "mk4_modulo_reversed": ("multihead.py", (
        "        if d_model % n_heads != 0:", "        if n_heads % d_model != 0:"), "mh.divisibility_reversed",
        {"rejects_bad_heads", "attributes", "reference", "masks", "gradients", "properties"}),
}


@pytest.mark.parametrize("case", sorted(S44_UNNAMED))
def test_s44_mistakes_are_named_on_every_test_they_fail_and_lose_only_those(tmp_path, case):
    file, (old, new), hint, lost = S44_UNNAMED[case]
    sub = _copy_reference(tmp_path)
    text = (sub / file).read_text()
    assert text.count(old) == 1, f"the reference changed: update {case}"
    (sub / file).write_text(text.replace(old, new))
    result = killrate.grade(sub, case, lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed" and t.component in CODE}
    assert failed == {f"{file[:-3]}.{name}": hint for name in lost}, failed

def test_a_head_split_mistake_is_told_it_is_right_with_one_head_only(tmp_path):
    # Found on a held-out student: q, k, v split out of each head's block of 3 * d_k features (timm's layout read
    # head-major) instead of the contract's [all q | all k | all v]. multihead.reference said only "160 of 160
    # values differ"; every case is compared now, and the one that is right says where the mistake is.
    sub = _copy_reference(tmp_path)
    text = (sub / "multihead.py").read_text()
    split = ("        q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (B, T, D)\n",
             "        q, k, v = [t.view(B, T, self.h, self.d_k).transpose(1, 2) for t in (q, k, v)]  # (B, h, T, d_k)\n")
    assert all(text.count(line) == 1 for line in split)
    text = text.replace(split[0], "").replace(split[1], "        qkv = self.qkv(x).view(B, T, self.h, 3 * self.d_k).transpose(1, 2)\n"
                                                        "        q, k, v = qkv.chunk(3, dim=-1)\n")
    (sub / "multihead.py").write_text(text)
    result = killrate.grade(sub, "head_major", lesson=DAY13)
    failed = {t.name: t for t in result.tests if t.status != "passed"}
    assert "multihead.reference" in failed and {name.split(".")[0] for name in failed} == {"multihead"}, failed
    facts = [f for f in failed["multihead.reference"].facts if f["id"] == "only_with"]
    assert facts and facts[0]["right_with"] == ["one head: d_model=12"], failed["multihead.reference"].facts


def test_T_read_from_the_batch_axis_is_named_hidden_and_visible(tmp_path):
    # Found on a held-out student: `T = x.size(0)` in PositionalEncoding.forward crashed module_forward with only
    # torch's "The size of tensor a (7) must match the size of tensor b (3)". It is catalogued now.
    sub = _reference_with(tmp_path, "positional.py", "        T = x.size(1)", "        T = x.size(0)")
    result = killrate.grade(sub, "T_from_batch", lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed and set(failed.values()) == {"pe.T_from_batch_axis"}, failed
    assert {name.split(".")[0] for name in failed} == {"positional"}, failed
    visible = visible_parts(sub, tmp_path / "visible", assignment=DAY13.assignment, parts=tuple(CODE))
    assert {part for part, (passed, _) in visible.items() if not passed} == {"positional"}, visible
    report = (tmp_path / "visible" / "report.xml").read_text()
    assert "forward takes T from the batch axis" in report
    # pe.seq_first_table gives these numbers with one sentence too; its own numbers with two rule it out here.
    assert "PyTorch tutorial" not in report


def test_the_tanh_gelu_fails_block_visibly_as_it_does_hidden_and_is_named(tmp_path):
    # The contract rules it out by name, and the visible tests check the GELU itself (their wiring tests swap the
    # FFN). Hidden, it lost post_ln, pre_ln and gradients with no cause named until session 35: it moves the
    # numbers by only ~7x the tolerance, so its mutant is matched at its own, tighter tolerance (CLOSE_MATCH),
    # and written otherwise (`nn.GELU("tanh")`) it is named all the same.
    sub = _gelu_tanh_student(tmp_path, '            nn.GELU("tanh"),\n')
    result = killrate.grade(sub, "gelu_tanh", lesson=DAY13)
    assert code_scores(result) == {**killrate.full_marks(lesson=DAY13), "block": code_scores(result)["block"]}
    assert code_scores(result)["block"] < killrate.full_marks(lesson=DAY13)["block"]
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed == dict.fromkeys(("block.post_ln", "block.pre_ln", "block.gradients"), "blk.gelu_tanh"), failed
    visible = visible_parts(sub, tmp_path / "visible", assignment=DAY13.assignment, parts=tuple(CODE))
    assert {part for part, (passed, _) in visible.items() if not passed} == {"block"}, visible
    assert any("the exact one, nn.GELU()" in line for line in visible["block"][1]), visible["block"]


def _visible_said(sub, tmp_path):
    """The visible tests' verdict per part, and every failure's words as a student reads them."""
    visible = visible_parts(sub, tmp_path / "visible", assignment=DAY13.assignment, parts=tuple(CODE))
    said = "\n".join(f"{failure.get('message', '')}\n{failure.text or ''}" for failure
                     in ET.parse(tmp_path / "visible" / "report.xml").getroot().iter("failure"))
    return visible, said


def test_a_trailing_activation_in_the_ffn_is_named_hidden_and_visible(tmp_path):
    # Found on a held-out student (s36 D3): ffn = Linear, GELU, Linear, GELU. The hidden block.attributes compares
    # parameter shapes only and passes it; post_ln, pre_ln and gradients lost 12 points saying only "values differ",
    # and the visible test_block_parts named the cause in a bare assert under pytest's diff.
    last = "            nn.Linear(d_ff, d_model),  # project back: (B, T, d_model)\n"
    sub = _reference_with(tmp_path, "block.py", last, last + "            nn.GELU(),\n")
    result = killrate.grade(sub, "ffn_trailing_gelu", lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed == dict.fromkeys(("block.post_ln", "block.pre_ln", "block.gradients"),
                                   "blk.ffn_trailing_activation"), failed
    visible, said = _visible_said(sub, tmp_path)
    assert {part for part, (passed, _) in visible.items() if not passed} == {"block"}, visible
    assert DAY13.rubric()["hints"]["blk.ffn_trailing_activation"]["text"] in said, said
    assert "Use -v" not in said and "AssertionError" not in said, said  # pytest's own workings are not for students


def test_weight_norm_on_the_projections_is_named_hidden_and_visible(tmp_path):
    # Held-out s41's a1: a correct MultiHeadAttention with weight_norm on qkv and out. The weights the tests load
    # never reached forward (weight_norm computes the weight from g and v at every read): hidden, four tests said only
    # "values differ"; visible, nine blamed the split of q, k, v. Both now say what keeps the weights from loading.
    out = "        self.out = nn.Linear(d_model, d_model)  # W_O\n"
    sub = _reference_with(tmp_path, "multihead.py", out, out + "        self.qkv = nn.utils.parametrizations.weight_norm(self.qkv)\n"
                          "        self.out = nn.utils.parametrizations.weight_norm(self.out)\n")
    result = killrate.grade(sub, "weight_norm", lesson=DAY13)
    lost = {t.name: t.output for t in result.tests if t.status != "passed"}
    assert {name.split(".")[0] for name in lost} == {"multihead"}, lost
    # The parameter count is the handout's (§7) and weight_norm adds g: that test fails on its own count.
    loading = {name: text for name, text in lost.items() if name != "multihead.attributes"}
    assert loading and all("computed from other tensors" in text and "plain parameter" in text
                           for text in loading.values()), loading
    visible, said = _visible_said(sub, tmp_path)
    assert {part for part, (passed, _) in visible.items() if not passed} == {"multihead"}, visible
    assert "computed from other tensors" in said and "not the heads of qkv(x)" not in said, said


def test_the_tutorials_sequence_first_table_is_named_hidden_and_visible(tmp_path):
    # Found on a held-out student (s36 D4): the PyTorch tutorial's (max_len, 1, d_model) table sliced with
    # x.size(0) on batch-first x: pe[:B] broadcasts, and sentence b gets PE[b] on every token. The hidden cases
    # (B = 3, 2, 2) named nothing: pe.T_from_batch_axis's (max_len, d_model) table crashes there.
    sub = _copy_reference(tmp_path)
    text = (sub / "positional.py").read_text()
    table = '        self.register_buffer("pe", positional_encoding(max_len, d_model))'
    forward = "        T = x.size(1)\n        return x + self.pe[:T]"
    assert text.count(table) == 1 and text.count(forward) == 1
    (sub / "positional.py").write_text(text.replace(table, table[:-1] + ".unsqueeze(1))")
                                       .replace(forward, "        return x + self.pe[: x.size(0)]"))
    result = killrate.grade(sub, "seq_first", lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed == {"positional.module_forward": "pe.seq_first_table"}, failed
    visible, said = _visible_said(sub, tmp_path)
    assert {part for part, (passed, _) in visible.items() if not passed} == {"positional"}, visible
    assert DAY13.rubric()["hints"]["pe.seq_first_table"]["text"] in said, said


@pytest.mark.parametrize("number, bug, printed", [
    ("-1e9", "sa.causal_additive_large_negative", "-1.e+09"),
    # The other numbers published code writes, unnamed until this session's note listed them.
    ("-1e4", "sa.causal_additive_minus_1e4", "-10000."),
    ("torch.finfo(torch.float32).min", "sa.causal_additive_finfo_min", "-3.4028e+38"),
])
def test_an_additive_mask_of_a_large_negative_number_is_named_and_shown_at_a_telling_size(tmp_path, number, bug, printed):
    # Found on a held-out student (s36 D5): -1e9 above the diagonal, 0 elsewhere. The hidden test showed causal_mask(1)
    # first ("expected [[1]] got [[0.]]", which three mistakes give), and sa.causal_additive's -inf matches no number.
    sub = _copy_reference(tmp_path)
    text = (sub / "self_attention.py").read_text()
    tril = "    return torch.tril(torch.ones(T, T, device=device))"
    assert text.count(tril) == 1
    (sub / "self_attention.py").write_text(text.replace(
        tril, f"    return torch.triu(torch.full((T, T), {number}, device=device), diagonal=1)"))
    result = killrate.grade(sub, "additive", lesson=DAY13)
    failed = {t.name: t for t in result.tests if t.status != "passed"}
    assert {name: t.hint_id for name, t in failed.items()} == {"self_attention.causal_mask": bug}, failed
    shown = failed["self_attention.causal_mask"].output
    assert shown.startswith("causal_mask(7):") and printed in shown, shown
    visible, said = _visible_said(sub, tmp_path)
    assert {part for part, (passed, _) in visible.items() if not passed} == {"self_attention"}, visible
    assert DAY13.rubric()["hints"][bug]["text"] in said, said

def test_forbidden_call_costs_that_part_with_a_reason_and_nothing_else(tmp_path):
    sub = _copy_reference(tmp_path)
    text = (sub / "block.py").read_text()
    text = text.replace("        self.attn = MultiHeadAttention(d_model, n_heads)\n",
                        "        self.attn = MultiHeadAttention(d_model, n_heads)\n"
                        "        self.spare = nn.MultiheadAttention(d_model, n_heads)\n")
    (sub / "block.py").write_text(text)
    result = killrate.grade(sub, "forbidden", lesson=DAY13)
    assert code_scores(result) == {**killrate.full_marks(lesson=DAY13), "block": 0.0}
    # Each test as the student reads it: the rubric's words for a forbidden library are data on the result.
    words = feedback.lesson_words(DAY13)
    block = [feedback.student_output(t, words, cut=False) for t in result.tests if t.component == "block"]
    assert block and all("MultiheadAttention" in text and "point of Day 13" in text for text in block), block


def test_forbidden_sdpa_mutant_is_named():
    v = verdict("sa.torch_sdpa")
    assert v.scores["self_attention"] == 0 and set(v.failed.values()) == {"sa.torch_sdpa"}


def test_static_scan_finds_library_attention_but_not_the_students_own_function(tmp_path):
    (tmp_path / "self_attention.py").write_text(
        "import torch.nn.functional as F\n"
        "def scaled_dot_product_attention(Q, K, V, mask=None):\n    return F.scaled_dot_product_attention(Q, K, V)\n")
    (tmp_path / "multihead.py").write_text(
        "from self_attention import scaled_dot_product_attention\nx = scaled_dot_product_attention\n")
    (tmp_path / "block.py").write_text("from torch.nn import TransformerEncoderLayer as L\n")
    (tmp_path / "positional.py").write_text("import torch as t\nm = t.nn.MultiheadAttention\n")
    found = score.static_forbidden(tmp_path, lesson=DAY13)
    assert found == {"self_attention.py": {"scaled_dot_product_attention"}, "block.py": {"TransformerEncoderLayer"},
                     "positional.py": {"MultiheadAttention"}}


def test_static_scan_reads_notebook_cells_and_blames_the_part_a_cell_defines(tmp_path):
    from grader.intake.submissions import notebook_module_source
    from grader.lesson import load_lesson

    cells = ["import torch.nn as nn",
             "class MultiHeadAttention(nn.Module):\n    def __init__(self, d, h):\n"
             "        super().__init__()\n        self.m = nn.MultiheadAttention(d, h)\n",
             "def positional_encoding(T, d):\n    return None\n",
             "%matplotlib inline"]  # a cell that doesn't parse is skipped, not a crash
    (tmp_path / f"{load_lesson('day13').notebook_module}.py").write_text(notebook_module_source("day13.ipynb", cells))
    assert score.static_forbidden(tmp_path, lesson=DAY13) == {"multihead.py": {"MultiheadAttention"}}


def test_static_scan_knows_a_torch_alias_imported_in_an_earlier_notebook_cell(tmp_path):
    from grader.intake.submissions import notebook_module_source
    from grader.lesson import load_lesson

    cells = ["import torch.nn.functional as G",
             "def scaled_dot_product_attention(Q, K, V, mask=None):\n"
             "    return G.scaled_dot_product_attention(Q, K, V), None\n"]
    (tmp_path / f"{load_lesson('day13').notebook_module}.py").write_text(notebook_module_source("day13.ipynb", cells))
    assert score.static_forbidden(tmp_path, lesson=DAY13) == {"self_attention.py": {"scaled_dot_product_attention"}}


def test_a_correct_notebook_raises_no_integrity_flag_but_a_student_file_like_the_wrapper_does(tmp_path):
    # The intake wraps a notebook's cells in contract modules that call globals(); those are the kit's
    # text, not the student's. The same call written by a student is still flagged.
    from grader.intake.submissions import discover, materialise

    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(ROOT / "demo" / "class" / "jun_notebook.ipynb", subs / "jun.ipynb")
    materialise(discover(subs)[0], tmp_path / "copy", lesson=DAY13)
    assert (tmp_path / "copy" / "self_attention.py").exists()
    assert score.scan_submission(tmp_path / "copy", lesson=DAY13).flags == []
    own = tmp_path / "own"
    own.mkdir()
    (own / "self_attention.py").write_text("g = globals()\n")
    assert score.scan_submission(own, lesson=DAY13).flags


@pytest.mark.parametrize("line", ["import socket", "from select import poll", "import fcntl", "import selectors",
                                  "import _thread", "import os\nos.dup2(5, 6)", "import os\nx = os.dup(5)",
                                  # s43r reached the same through multiprocessing's fd passing and its Pipe
                                  "from multiprocessing import reduction", "import multiprocessing.connection as c"])
def test_rewiring_the_childs_own_channel_is_flagged(tmp_path, line):
    # Red team s42r moved the executor onto a socket pair of its own (os.dup, os.dup2, socket.socketpair) and
    # rewrote its answers on the way out. No attention needs sockets or file descriptors: the staff are told.
    sub = _copy_reference(tmp_path)
    (sub / "positional.py").write_text((sub / "positional.py").read_text() + "\n" + line + "\n")
    assert score.scan_submission(sub, lesson=DAY13).flags, line
    (tmp_path / "plain").mkdir()
    assert score.scan_submission(_copy_reference(tmp_path / "plain"), lesson=DAY13).flags == []


def test_the_visible_tests_of_an_earlier_release_handed_back_raise_no_flag(tmp_path):
    # Held-out s39's and s40's honest notebooks came with the tests/ of the release they cloned. When 5ddbe20 changed
    # tests/conftest.py, their copies no longer matched the kit's and the scan flagged the conftest's own globals()
    # and getattr calls as theirs. Every version a release shipped is the kit's (grader/day13/shipped_history.txt).
    old = subprocess.run(["git", "-C", str(ROOT), "show", "3cd2766:assignments/day13/tests/conftest.py"],
                         capture_output=True)
    if old.returncode != 0:
        pytest.skip("needs the kit's git history (a clone of its repository)")
    sub = _copy_reference(tmp_path)
    (sub / "tests").mkdir()
    (sub / "tests" / "conftest.py").write_bytes(old.stdout)
    assert score.scan_submission(sub, lesson=DAY13).flags == []
    (sub / "tests" / "conftest.py").write_bytes(old.stdout + b"\nsneaky = globals()\n")  # edited: the student's own
    assert score.scan_submission(sub, lesson=DAY13).flags


def test_reference_results_are_cached_across_submissions():
    # The cache lives on the lesson value: every submission graded with that value shares it.
    ref = DAY13.reference
    killrate.grade(SOLUTIONS, "warm", lesson=DAY13)
    size = len(ref.cache)
    killrate.grade(VARIANTS[0], "again", lesson=DAY13)
    assert len(ref.cache) == size > 0


def test_grade_submission_accepts_any_transport_with_call():
    calls = []

    class Recording:
        def __init__(self):
            self.inner = InProcessTransport(SOLUTIONS, lesson=DAY13)

        def call(self, header, arrays):
            calls.append(header["op"])
            return self.inner.call(header, arrays)

    result = score.grade_submission(lesson=DAY13, name="x", directory=SOLUTIONS, transport=Recording())
    assert {"function", "module", "inspect"} <= set(calls)
    assert code_scores(result) == killrate.full_marks(lesson=DAY13)


def test_a_transport_timeout_becomes_a_failed_test_with_the_reason():
    class Hanging:
        def call(self, header, arrays):
            if header.get("module") == "positional":
                return {"error": {"type": "Timeout", "message": "the call took longer than 5 s"}, "forbidden": []}, {}
            return InProcessTransport.call(self.inner, header, arrays)

    hanging = Hanging()
    hanging.inner = InProcessTransport(SOLUTIONS, lesson=DAY13)
    result = killrate._no_deliverables(lambda: score.grade_submission(lesson=DAY13, name="t", directory=SOLUTIONS, transport=hanging))
    assert code_scores(result) == {**killrate.full_marks(lesson=DAY13), "positional": 0.0}
    assert all("Timeout" in t.output for t in result.tests if t.component == "positional")


def test_forbidden_use_hidden_in_a_helper_module_is_caught_at_run_time(tmp_path):
    sub = _copy_reference(tmp_path)
    (sub / "helpers.py").write_text("import torch.nn.functional as F\n"
                                    "def attend(Q, K, V):\n    return F.scaled_dot_product_attention(Q, K, V)\n")
    text = (sub / "self_attention.py").read_text().replace(
        "    out = weights @ V  # (..., T_q, d_v)\n",
        "    from helpers import attend  # imported inside the function\n"
        "    out = attend(Q, K, V) if mask is None else weights @ V\n")
    (sub / "self_attention.py").write_text(text)
    assert score.static_forbidden(sub, lesson=DAY13) == {"helpers.py": {"scaled_dot_product_attention"}}
    result = killrate.grade(sub, "helper", lesson=DAY13)
    assert code_scores(result) == {**killrate.full_marks(lesson=DAY13), "self_attention": 0.0}


def test_a_float32_detour_inside_a_float64_call_is_not_a_wrong_answer(tmp_path):
    sub = _copy_reference(tmp_path)
    text = (sub / "self_attention.py").read_text().replace(
        "    d_k = Q.size(-1)\n", "    d_k = Q.size(-1)\n    Q, K, V = Q.float(), K.float(), V.float()\n")
    (sub / "self_attention.py").write_text(text)
    assert killrate.false_failures(sub, lesson=DAY13) == []


def test_a_float32_softmax_inside_a_float64_call_is_not_a_wrong_answer(tmp_path):
    # The contract leaves room for float32 rounding. A softmax taken in float32 and cast back (a mixed-precision
    # habit) answers a float64 call in float64 with float32's precision; judged at float64's 1e-7, it lost
    # sdpa_reference over a difference of 4.3e-7 ("expected 3.98288, got 3.98288").
    sub = _copy_reference(tmp_path)
    path = sub / "self_attention.py"
    line = "    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k), each row sums to 1\n"
    assert path.read_text().count(line) == 1
    path.write_text(path.read_text().replace(
        line, "    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)\n"))
    assert killrate.false_failures(sub, lesson=DAY13) == []


def test_killrate_command_prints_its_three_figures(monkeypatch, capsys):
    monkeypatch.setattr(CATALOGUE, "bugs", (CATALOGUE.by_id["sa.no_scale"], CATALOGUE.by_id["blk.relu"]))
    monkeypatch.setattr(killrate, "variants", lambda **_: VARIANTS[:1])
    monkeypatch.setattr(killrate, "skeletons", lambda **_: ["pe_zeros", "whole_uniform"])
    assert killrate.main(lesson=DAY13) == 0
    out = capsys.readouterr().out
    assert "Kill rate: 2/2 = 100.0%" in out
    assert f"False failures: 0 of {len(DAY13.hidden_tests)} code tests on 1 correct implementations" in out
    assert "Skeletons scoring beyond structure: 0 of 2 (the most a skeleton can score: 12 of 90 code points)" in out


def test_every_mutant_that_changes_numbers_lands_far_outside_its_tolerance():
    for bug in CATALOGUE.bugs:
        effect = killrate.mutant_effect(bug, lesson=DAY13)
        if effect < 1e-6:
            continue  # caught by an error, a missing gradient, a dtype or forbidden use (see the kill tests)
        limit = tolerances.PE_TABLE.atol if bug.component == "positional" else tolerances.values("float32").atol
        if bug.match is None:
            assert effect >= 10 * limit, f"{bug.id}: moves the numbers by only {effect:.2e}, tolerance {limit:.1e}"
        else:  # matched at its own tolerance: far from it, and still well past the tests' tolerance
            assert effect >= 10 * bug.match.atol and effect >= 5 * limit, \
                f"{bug.id}: moves the numbers by only {effect:.2e}, tolerance {limit:.1e}, its match {bug.match.atol:.1e}"


def test_queries_scaled_twice_are_not_told_they_divide_by_the_root_of_d_model(tmp_path):
    # Held-out s37 (gus): q / √d_k before the attention, which divides by √d_k again, divides the scores by d_k. With
    # d_model = 16 and 4 heads, d_k = 4 = √d_model, so the masks and gradients tests could not tell it from
    # `mh.sqrt_d_model` and named that mistake, which the student never made (multihead.reference, where one head of
    # 12 features is right for √d_model and wrong for him, named none).
    sub = _copy_reference(tmp_path)
    text = (sub / "multihead.py").read_text()
    split = "        q, k, v = [t.view(B, T, self.h, self.d_k).transpose(1, 2) for t in (q, k, v)]  # (B, h, T, d_k)\n"
    assert text.count(split) == 1
    (sub / "multihead.py").write_text("import math\n" + text.replace(split, split + "        q = q / math.sqrt(self.d_k)\n"))
    result = killrate.grade(sub, "scaled_twice", lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert set(failed) == {"multihead.reference", "multihead.masks", "multihead.gradients"}, failed
    assert "mh.sqrt_d_model" not in failed.values(), failed


def test_d_k_read_from_axis_1_is_named_hidden_and_visible(tmp_path):
    # Held-out s37 (fay): `d_k = Q.shape[1]`, right for the handout's 2-D (T, d_k) queries, is T for (B, T, d_k), so the
    # scores of a batch are divided by √T. sdpa_reference and sdpa_gradients lost their 8 points, rightly, naming no cause.
    sub = _copy_reference(tmp_path)
    text = (sub / "self_attention.py").read_text()
    assert text.count("    d_k = Q.size(-1)\n") == 1
    (sub / "self_attention.py").write_text(text.replace("    d_k = Q.size(-1)\n", "    d_k = Q.shape[1]  # Q is (T, d_k)\n"))
    result = killrate.grade(sub, "scale_shape1", lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed == dict.fromkeys(("self_attention.sdpa_reference", "self_attention.sdpa_gradients"),
                                   "sa.d_k_from_axis_1"), failed
    visible, said = _visible_said(sub, tmp_path)
    assert {part for part, (passed, _) in visible.items() if not passed} == {"self_attention"}, visible
    assert DAY13.rubric()["hints"]["sa.d_k_from_axis_1"]["text"] in said, said


def test_self_attention_causal_when_given_no_mask_is_named_hidden_and_visible(tmp_path):
    # Held-out s37 (jae): SelfAttention builds a causal mask when it is given none; the contract's mask=None is no mask.
    # module_worked_values and module_reference lost their 5 points, rightly, naming no cause.
    sub = _copy_reference(tmp_path)
    text = (sub / "self_attention.py").read_text()
    call = "        return scaled_dot_product_attention(Q, K, V, mask)"
    assert text.count(call) == 1
    (sub / "self_attention.py").write_text(text.replace(call, (
        "        if mask is None:  # a decoder: a token never looks ahead\n"
        "            mask = causal_mask(x.size(1), device=x.device)\n") + call))
    result = killrate.grade(sub, "default_causal", lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed == dict.fromkeys(("self_attention.module_worked_values", "self_attention.module_reference"),
                                   "sa.module_causal_by_default"), failed
    visible, said = _visible_said(sub, tmp_path)
    assert {part for part, (passed, _) in visible.items() if not passed} == {"self_attention"}, visible
    assert DAY13.rubric()["hints"]["sa.module_causal_by_default"]["text"] in said, said


def test_queries_scaled_before_an_attention_that_scales_are_named_hidden_and_visible(tmp_path):
    # Held-out s37 (gus): q / √d_k before scaled_dot_product_attention, which divides by √d_k again. After the hidden
    # masks and gradients tests stopped confusing it with mh.sqrt_d_model (the test above), nothing named it.
    sub = _copy_reference(tmp_path)
    text = (sub / "multihead.py").read_text()
    split = "        q, k, v = [t.view(B, T, self.h, self.d_k).transpose(1, 2) for t in (q, k, v)]  # (B, h, T, d_k)\n"
    assert text.count(split) == 1
    (sub / "multihead.py").write_text("import math\n" + text.replace(
        split, split + "        q = q / math.sqrt(self.d_k)  # scale once, here, before the dot products\n"))
    result = killrate.grade(sub, "prescaled_q", lesson=DAY13)
    failed = {t.name: t.hint_id for t in result.tests if t.status != "passed"}
    assert failed == dict.fromkeys(("multihead.reference", "multihead.masks", "multihead.gradients"),
                                   "mh.scaled_twice"), failed
    visible, said = _visible_said(sub, tmp_path)
    assert {part for part, (passed, _) in visible.items() if not passed} == {"multihead"}, visible
    assert DAY13.rubric()["hints"]["mh.scaled_twice"]["text"] in said, said
    # The stand-in attention says what it was given (s37 K4: it said the heads were not qkv(x)'s, a layout error).
    assert "the heads of qkv(x) with Q multiplied by 0.5 (1/√d_k = 0.5 for d_k = 4)" in said, said
    assert "not the heads of qkv(x)" not in said, said



def test_an_attention_wrong_at_one_place_earns_the_same_under_every_seed(tmp_path):
    # Red team s39r's control: the first query's weights zeroed. The gate asks each call again with its tokens in an
    # order of the run's seed; an order that left query 0 where it was saw no difference, so under some seeds a
    # module test passed by luck (5 of 30 under seeds 1 and 2, 2 points in a different test each). The order now
    # moves every token, so no seed can leave the broken place where it was.
    out = "    out = weights @ V"
    sub = _reference_with(tmp_path, "self_attention.py", out,
                          "    weights = weights.clone()\n    weights[..., 0, :] = 0.0  # the first query attends to nothing\n"
                          + out)
    earned = set()
    for seed in range(1, 7):
        result = score.grade_submission(name="row0", directory=sub, lesson=DAY13, check_deliverables=lambda _: [],
                                        transport=InProcessTransport(sub, lesson=DAY13), seed=seed)
        earned.add(tuple(sorted(t.name for t in result.tests if t.component == "self_attention" and t.score)))
    assert earned == {("self_attention.causal_mask",)}, earned


def test_dropout_over_an_output_that_is_no_attention_earns_no_selfattention_points(tmp_path):
    # A guard written while merging s39's output-dropout path with s39r's checks (it passes on either branch alone):
    # real weights, and an output that is dropout over the mean of V (no attention, though it follows the tokens).
    # The output path asks the kept outputs to be one constant times weights @ V.
    sub = _copy_reference(tmp_path)
    text = (sub / "self_attention.py").read_text()
    out = "    out = weights @ V  # (..., T_q, d_v)\n"
    assert text.count(out) == 1
    (sub / "self_attention.py").write_text(text.replace(out, "    out = torch.nn.functional.dropout(V.mean(-2, keepdim=True)"
                                                             ".expand(*weights.shape[:-1], V.shape[-1]), p=0.1)\n"))
    result = killrate.grade(sub, "mean_of_v_dropped", lesson=DAY13)
    earned = {t.name: t.score for t in result.tests if t.name.startswith("self_attention.module_") and t.score}
    assert not earned, earned


def test_layernorms_without_weights_lose_the_wiring_tests_not_the_mask_test(tmp_path):
    # Held-out s40's ha: nn.LayerNorm(d_model, elementwise_affine=False). A LayerNorm without its weight and bias is
    # one mistake, charged by block.attributes and by the tests whose numbers the missing affine moves (Post-LN,
    # Pre-LN, the gradients). The mask test judges what the mask does, which a LayerNorm's weights do not touch:
    # it loaded them anyway, found nowhere to put them, and failed too.
    sub = _reference_with(tmp_path, "block.py", "nn.LayerNorm(d_model)", "nn.LayerNorm(d_model, elementwise_affine=False)",
                          count=2)
    result = killrate.grade(sub, "layernorm_without_affine", lesson=DAY13)
    failed = {t.name for t in result.tests if t.status != "passed"}
    assert failed == {"block.attributes", "block.post_ln", "block.pre_ln", "block.gradients"}, sorted(failed)


def test_a_layernorm_eps_over_the_contracts_bound_is_named_on_the_tests_it_costs(tmp_path):
    # Session 39's own case: nn.LayerNorm(d_model, eps=1e-3) (Keras's default epsilon). CONTRACT.md allows any eps up
    # to the handout's 1e-5, and the visible test_block_parts says so; the hidden Post-LN, Pre-LN and gradient tests
    # failed on ~2e-3 differences and said nothing of why. Their feedback now names the eps it read; an eps the
    # contract allows (1e-6) is graded full and told nothing.
    sub = _reference_with(tmp_path, "block.py", "nn.LayerNorm(d_model)", "nn.LayerNorm(d_model, eps=1e-3)", count=2)
    result = killrate.grade(sub, "layernorm_eps_1e-3", lesson=DAY13)
    failed = {t.name: t for t in result.tests if t.status != "passed"}
    assert set(failed) == {"block.post_ln", "block.pre_ln", "block.gradients"}, sorted(failed)
    words = feedback.Words.of(DAY13.rubric())
    for name, t in failed.items():
        told = [f for f in t.facts if f["id"] == "ln_eps"]
        assert {f["name"] for f in told} == {"ln1", "ln2"} and {f["eps"] for f in told} == {"0.001"}, (name, t.facts)
        shown = feedback.student_output(t, words, cut=False)
        assert "Your ln1.eps is 0.001" in shown and "up to the handout's 1e-5" in shown, shown
    (tmp_path / "allowed").mkdir()
    allowed = _reference_with(tmp_path / "allowed", "block.py", "nn.LayerNorm(d_model)",
                              "nn.LayerNorm(d_model, eps=1e-6)", count=2)
    result = killrate.grade(allowed, "layernorm_eps_1e-6", lesson=DAY13)
    assert all(t.status == "passed" for t in result.tests if t.component == "block"), \
        [(t.name, t.output) for t in result.tests if t.status != "passed"]


def _shown(result, name: str) -> str:
    test = next(t for t in result.tests if t.name == name)
    return feedback.student_output(test, feedback.Words.of(DAY13.rubric()), cut=False)


def test_a_table_buffer_of_the_wrong_shape_is_not_told_to_register_a_buffer(tmp_path):
    # Held-out s48's m3: positional_encoding(d_model, max_len) in __init__ registers a (16, 50) buffer. The hidden
    # positional.buffer test said so, then hinted "Use self.register_buffer(...)", which the student had done. The hint
    # now follows the fact that the table is not a buffer (a Parameter, or no buffer), not any broken rule.
    sub = _reference_with(tmp_path, "positional.py", "positional_encoding(max_len, d_model)",
                          "positional_encoding(d_model, max_len)")
    result = killrate.grade(sub, "pe_args_swapped", lesson=DAY13)
    shown = _shown(result, "positional.buffer")
    assert "buffers found: {'pe': [16, 50]}" in shown and "register_buffer" not in shown, shown
    (tmp_path / "parameter").mkdir()
    sub = _reference_with(tmp_path / "parameter", "positional.py",
                          'self.register_buffer("pe", positional_encoding(max_len, d_model))',
                          "self.pe = nn.Parameter(positional_encoding(max_len, d_model))")
    result = killrate.grade(sub, "pe_parameter", lesson=DAY13)
    assert "register_buffer" in _shown(result, "positional.buffer")


def test_weights_detached_before_they_are_returned_get_the_autograd_hint(tmp_path):
    # Held-out s48's m6: `return out, weights.detach()`. sdpa_gradients showed only "gradient of Q: 80 of 80 values
    # differ" (the gradient through out still arrives). Once it fails, one more call asks for the gradient through the
    # weights alone: none arrives, which is the fact the rubric's autograd hint is said on.
    sub = _reference_with(tmp_path, "self_attention.py", "    return out, weights\n",
                          "    return out, weights.detach()\n")
    result = killrate.grade(sub, "weights_detached", lesson=DAY13)
    failed = {t.name for t in result.tests if t.status != "passed"}
    assert "self_attention.sdpa_gradients" in failed, failed
    shown = _shown(result, "self_attention.sdpa_gradients")
    assert "no .detach()" in shown and "No gradient reaches" in shown, shown

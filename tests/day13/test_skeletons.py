"""Points need the math: skeletons (tests/fixtures/skeleton/) get the structure points only.

A skeleton has the contract's functions, classes and attributes and answers with the right shapes,
but computes nothing: uniform or seeded-random weights, zeros, its input handed back, a constant
table, a block that returns x. The property and self-consistency tests would pass many of those
answers; they count only when the student's own function reacts to its input (checks.py). Each
skeleton is graded beside honest work: the reference, the correct variants and every catalogue
mutant, whose points the gates must not change.
"""
import functools
import json
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import (REFERENCE, descendants, kept_zygotes, make_submission, processes_of, settled,  # noqa: E402
                            shared_config)

from grader.admin import killrate
from grader.lesson import load_lesson

from grader.running import grade as run

from grader.judging import score  # noqa: E402
from grader.running.calls import InProcessTransport  # noqa: E402
from grader.day13.adapter import Adapter  # noqa: E402
from grader.day13.tests import checks as ck  # noqa: E402

torch.set_num_threads(1)

DAY13 = load_lesson("day13")
CASES = killrate.skeletons(lesson=DAY13)
PART_OF = DAY13.skeleton_parts
CATALOGUE = killrate.catalogue(lesson=DAY13)
CODE = load_lesson("day13").modules
CONFIG = shared_config(call_timeout=3.0)
GATE = "these points need code that computes the answer"
# The property and self-consistency tests, which count only for a function that reacts to its input.
GATED = {"self_attention.sdpa_masks", "self_attention.sdpa_properties", "self_attention.module_worked_values",
         "self_attention.module_reference", "self_attention.module_gradients", "multihead.properties",
         "positional.dtype_shape", "positional.module_forward", "block.mask_passthrough"}


def rubric() -> dict:
    return DAY13.rubric()


structure_tests = functools.partial(killrate.structure_points, lesson=DAY13)
build = functools.partial(killrate.build_skeleton, lesson=DAY13)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """case -> its in-process grade, graded once per module."""
    root, done = tmp_path_factory.mktemp("skeletons"), {}

    def grade(case: str):
        if case not in done:
            done[case] = killrate.grade(build(case, root / case), case, lesson=DAY13)
        return done[case]
    return grade


def passed(result) -> set[str]:
    return {t.name for t in result.tests if t.component in CODE and t.status == "passed"}


def code_total(result) -> float:
    return sum(t.score for t in result.tests if t.component in CODE)


# -- the rubric states the most a skeleton can get ----------------------------------------------
def test_the_rubric_states_the_skeleton_maximum_and_it_stays_under_20_of_90():
    top = sum(structure_tests().values())
    assert rubric()["meta"]["skeleton_max"] == top < 20
    assert sum(float(e["points"]) for c in CODE for e in rubric()[c].values()) == 90
    assert set(structure_tests()) == {"multihead.rejects_bad_heads", "multihead.attributes", "positional.buffer",
                                      "block.attributes", "block.d_ff"}


def test_every_part_has_skeletons_and_there_are_whole_submission_skeletons():
    for prefix in PART_OF:
        assert sum(c.startswith(prefix + "_") for c in CASES) >= 5, prefix
    assert sum(c.startswith("whole_") for c in CASES) >= 3


# -- skeletons, in process ---------------------------------------------------------------------
@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("whole_")])
def test_a_part_skeleton_gets_only_that_parts_structure_points(graded, case):
    part = PART_OF[case.split("_")[0]]
    result = graded(case)
    scores = result.component_scores(DAY13.components)
    for c in CODE:
        if c != part:
            assert scores[c] == killrate.full_marks(lesson=DAY13)[c], (case, c)
    mine = {t.name for t in result.tests if t.component == part}
    assert passed(result) & mine <= set(structure_tests(part)), (case, passed(result) & mine)
    assert scores[part] <= sum(structure_tests(part).values())


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("whole_")])
def test_a_whole_skeleton_gets_the_structure_points_and_nothing_else(graded, case):
    result = graded(case)
    assert passed(result) == set(structure_tests()), case
    assert code_total(result) == rubric()["meta"]["skeleton_max"] < 20


def test_the_gate_says_why_the_points_are_withheld(graded):
    result = graded("sa_uniform")
    tests = {t.name: t for t in result.tests}
    masks = tests["self_attention.sdpa_masks"]
    assert masks.status == "failed" and GATE in masks.output
    assert "weights stayed the same when Q changed" in masks.output
    assert "weights stayed the same when K changed" in masks.output
    assert "softmax(Q Kᵀ / √d_k)" in masks.output
    keys_only = {t.name: t for t in graded("sa_keys_only").tests}["self_attention.sdpa_properties"]
    assert "when Q changed" in keys_only.output and "when K changed" not in keys_only.output
    table = {t.name: t for t in graded("pe_features_only").tests}["positional.dtype_shape"]
    assert GATE in table.output and "same row at every position" in table.output
    random = {t.name: t for t in graded("pe_seeded_random").tests}["positional.dtype_shape"]
    assert "not sines or cosines of the position" in random.output
    block = {t.name: t for t in graded("blk_attention_only").tests}["block.mask_passthrough"]
    assert "feed-forward weights changed" in block.output and "no token sees" not in block.output
    mha = {t.name: t for t in graded("mh_mean_pool").tests}["multihead.properties"]
    assert "query rows of qkv" in mha.output and "key rows of qkv" in mha.output and "no token" not in mha.output


def _without_gates(monkeypatch):
    monkeypatch.setattr(ck, "require_real", lambda reasons, what, fix: None)
    monkeypatch.setattr(ck, "attention_is_real", lambda student, *bases: True)
    monkeypatch.setattr(ck, "table_reasons", lambda table: [])


def test_without_the_gates_skeletons_would_score_again(monkeypatch, tmp_path):
    # The gates are what withholds the points: switched off, the same skeletons pass property tests.
    _without_gates(monkeypatch)
    for case in ("whole_uniform", "whole_inputs", "whole_random"):
        result = killrate.grade(build(case, tmp_path / case), case, lesson=DAY13)
        assert code_total(result) >= 30, case


# -- honest work keeps what it had -------------------------------------------------------------
def _verdicts(folder: Path) -> dict:
    """rubric id -> passed, for every hidden test run on `folder` (no catalogue replay: only pass or fail)."""
    student, reference = Adapter(InProcessTransport(folder, lesson=DAY13)), DAY13.reference
    verdicts = {}
    for component, test_id, fn in DAY13.hidden_tests:
        try:
            fn(student, reference)
            verdicts[f"{component}.{test_id}"] = True
        except AssertionError:
            verdicts[f"{component}.{test_id}"] = False
    return verdicts


def _gate_watch(monkeypatch) -> list:
    """The gates, each still deciding as before, noting every time one decides against the code: a list of
    (gate, what) that the caller empties between folders."""
    held = []
    require_real, attention_is_real, table_reasons = ck.require_real, ck.attention_is_real, ck.table_reasons

    def watched_require_real(reasons, what, fix):
        if reasons:
            held.append(("require_real", what))
        return require_real(reasons, what, fix)

    def watched_attention_is_real(*args, **kwargs):
        real = attention_is_real(*args, **kwargs)
        if not real:
            held.append(("attention_is_real", ""))
        return real

    def watched_table_reasons(table):
        reasons = table_reasons(table)
        if reasons:
            held.append(("table_reasons", reasons[0]))
        return reasons

    monkeypatch.setattr(ck, "require_real", watched_require_real)
    monkeypatch.setattr(ck, "attention_is_real", watched_attention_is_real)
    monkeypatch.setattr(ck, "table_reasons", watched_table_reasons)
    return held


def test_the_gates_cost_no_catalogue_mutant_or_correct_variant_a_point(monkeypatch):
    """Every catalogue mutant, correct variant and the reference: the same verdict on every hidden test with the
    gates as without them. Graded without the gates again: each folder on which some gate decided against the code.
    On any other folder the gates let everything through, so the run without them differs only by the gates' own
    probe calls, and each call is seeded afresh (grader/running/executor.py) into kit code that keeps no state
    between calls: the same verdicts."""
    folders = [CATALOGUE.mutant_dir(b.id) for b in CATALOGUE.bugs] + killrate.variants(lesson=DAY13) + [REFERENCE]
    held = _gate_watch(monkeypatch)
    gated, stopped = {}, []
    for folder in folders:
        held.clear()
        gated[folder.name] = _verdicts(folder)
        if held:
            stopped.append(folder)
    # The catalogue has mutants the gates stop (a real attention with its keys untransposed, heads never
    # transposed back), so the comparison below always runs, on them.
    assert {"sa.no_transpose_k", "mh.heads_not_transposed"} <= {f.name for f in stopped}, [f.name for f in stopped]
    monkeypatch.undo()
    _without_gates(monkeypatch)
    assert {f.name: _verdicts(f) for f in stopped} == {f.name: gated[f.name] for f in stopped}


def test_a_real_but_buggy_attention_keeps_its_self_consistency_points(tmp_path):
    # sa.no_scale: its own weights are wrong but real, so SelfAttention wired to them passes the
    # module tests and its masks are judged against its own weights.
    result = killrate.grade(CATALOGUE.mutant_dir("sa.no_scale"), "no_scale", lesson=DAY13)
    got = passed(result)
    for test in ("sdpa_masks", "sdpa_properties", "module_worked_values", "module_reference", "module_gradients"):
        assert f"self_attention.{test}" in got, test


# -- through the engine ------------------------------------------------------------------------
def test_skeletons_graded_by_the_engine_score_as_in_process(graded, tmp_path):
    subs = tmp_path / "subs"
    make_submission(subs / "aaa_reference", solutions=REFERENCE)
    for case in CASES:
        build(case, subs / case)
    out = tmp_path / "out"
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=DAY13, zygotes=kept_zygotes()) == 0
    records = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/record.json")}
    assert set(records) == {"aaa_reference", *CASES}
    full = sum(killrate.full_marks(lesson=DAY13).values())
    assert sum(t["score"] for t in records["aaa_reference"]["tests"] if t["component"] in CODE) == full
    for case in CASES:
        engine = {t["name"]: t["score"] for t in records[case]["tests"] if t["component"] in CODE}
        assert engine == {t.name: t.score for t in graded(case).tests if t.component in CODE}, case
    header, *lines = (out / "grades.csv").read_text().splitlines()
    columns = header.split(",")
    rows = {r.split(",")[0]: dict(zip(columns, r.split(","))) for r in lines}
    for case in CASES:
        code = {c: float(rows[case][c]) for c in CODE}
        if case.startswith("whole_"):
            assert sum(code.values()) == rubric()["meta"]["skeleton_max"], case
        else:
            part = PART_OF[case.split("_")[0]]
            assert code[part] <= sum(structure_tests(part).values()), case
    assert settled(lambda: processes_of(range(CONFIG.uid_base, CONFIG.uid_base + 2))) == []
    assert settled(lambda: descendants(os.getpid())) == []


# Real formulas with a bug the catalogue does not hold: the gates must not take their points either.
HONEST_BUGS = {
    "pe_no_sin_cos": ("positional.py", ("    pe[:, 0::2] = torch.sin(angle)  # even features\n"
                                        "    pe[:, 1::2] = torch.cos(angle)  # odd features\n"),
                      "    pe[:, 0::2] = angle\n    pe[:, 1::2] = angle\n"),
    "pe_inverted_wavelengths": ("positional.py", "    angle = pos / (10000 ** (two_i / d_model))",
                                "    angle = pos * (10000 ** (two_i / d_model))"),
    "sa_scores_times_sqrt_dk": ("self_attention.py", "    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)",
                                "    scores = Q @ K.transpose(-2, -1) * math.sqrt(d_k)"),
    "mh_one_head_for_all": ("multihead.py", "        q, k, v = [t.view(B, T, self.h, self.d_k).transpose(1, 2) for t in (q, k, v)]",
                            "        q, k, v = [t.unsqueeze(1) for t in (q, k, v)]"),
}


@pytest.mark.parametrize("bug", sorted(HONEST_BUGS))
def test_a_real_formula_with_a_bug_passes_every_gate(bug, tmp_path, monkeypatch):
    file, find, replace = HONEST_BUGS[bug]
    folder = make_submission(tmp_path / bug, solutions=REFERENCE)
    text = (folder / file).read_text()
    assert text.count(find) == 1, f"{bug}: update the patch to the current reference"
    (folder / file).write_text(text.replace(find, replace))
    gated = _verdicts(folder)
    assert not all(gated.values()), f"{bug}: the bug should cost something"
    part = PART_OF[bug.split("_")[0]]
    assert all(gated[t] for t in GATED if t.startswith(part + ".")), f"{bug}: a gated test of {part} failed"
    _without_gates(monkeypatch)
    assert _verdicts(folder) == gated


def test_the_readmes_kill_rate_figures_are_the_catalogues_counts():
    # The README's killrate block is a console transcript with its middle elided, so the docs check leaves it alone:
    # its counts drifted (it said 61 mutants when the catalogue held 71). They are checked here, without grading.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("<!-- docs:killrate -->", 1)[1].split("<!-- /docs:killrate -->", 1)[0]
    bugs, correct, skeletons = len(CATALOGUE.bugs), len(killrate.variants(lesson=DAY13)), len(CASES)
    assert f"on {bugs} catalogued bugs, {correct} independent correct" in " ".join(block.split()), block[:300]
    assert f"Bug catalogue: {bugs} mutants" in block and f"Kill rate: {bugs}/{bugs} = 100.0%" in block
    assert f"Correct implementations: {correct}\n" in block and f"on {correct} correct implementations" in block
    assert f"Skeletons (the contract's shapes and attributes, no computation): {skeletons}\n" in block
    assert f"of {skeletons} (the most a skeleton" in block

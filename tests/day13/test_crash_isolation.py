"""A crash in a function costs only that function's tests (issue 13, point 8).

SelfAttention calls scaled_dot_product_attention and PositionalEncoding calls positional_encoding.
A wrong number in the function costs the function's tests only (the caller is judged against the
student's own function); a crash there must not cost more: the caller's calls are answered again
over the grader's stand-in of the function (the lesson's [standin_names]), and graded as usual.
Each crash is graded beside honest siblings: the reference, a wrong-number bug in the same
function, and a crash in the caller's own code (which still costs the caller).
"""
import json
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import (REFERENCE, components, descendants, kept_zygotes, make_submission, processes_of,  # noqa: E402
                            settled, shared_config)

from grader.admin import killrate

from grader.running import grade as run  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage

torch.set_num_threads(1)

CONFIG = shared_config(call_timeout=3.0)
SA = (REFERENCE / "self_attention.py").read_text()
PE = (REFERENCE / "positional.py").read_text()
MH = (REFERENCE / "multihead.py").read_text()
SDPA_BODY = "    d_k = Q.size(-1)\n"
PE_BODY = "    pe = torch.zeros(T, d_model)"
SELF_ATTENTION_FORWARD = "        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)  # each (B, T, d_k)\n"
MH_SPLIT = "        q, k, v = [t.view(B, T, self.h, self.d_k).transpose(1, 2) for t in (q, k, v)]  # (B, h, T, d_k)\n"


def patched(text: str, find: str, replace: str) -> str:
    assert text.count(find) == 1, find
    return text.replace(find, replace)


SDPA_TESTS = {"self_attention.worked_values", "self_attention.sdpa_reference", "self_attention.sdpa_masks",
              "self_attention.sdpa_properties", "self_attention.sdpa_gradients"}
MODULE_TESTS = {"self_attention.module_worked_values", "self_attention.module_reference",
                "self_attention.module_gradients"}
PE_TABLE_TESTS = {"positional.worked_values", "positional.table_reference", "positional.dtype_shape"}

# name -> (files, the tests it must fail: exactly these)
CASES = {
    "honest": ({}, set()),
    "sdpa_wrong_numbers": ({"self_attention.py": patched(SA, "/ math.sqrt(d_k)", "")},
                           {"self_attention.worked_values", "self_attention.sdpa_reference",
                            "self_attention.sdpa_gradients"}),
    "sdpa_raises": ({"self_attention.py": patched(SA, SDPA_BODY, '    raise ValueError("not today")\n')}, SDPA_TESTS),
    "sdpa_not_written": ({"self_attention.py": patched(SA, SDPA_BODY, "    raise NotImplementedError\n")}, SDPA_TESTS),
    # K.T works on the 2-D worked problems and fails on every batched input, as a shape error.
    "sdpa_shape_error": ({"self_attention.py": patched(SA, "K.transpose(-2, -1)", "K.T")}, SDPA_TESTS - {"self_attention.worked_values"}),
    # A crash in SelfAttention's own code is SelfAttention's: nothing to stand in for.
    "module_raises": ({"self_attention.py": patched(SA, SELF_ATTENTION_FORWARD, '        raise RuntimeError("mine")\n')},
                      MODULE_TESTS),
    "pe_raises": ({"positional.py": patched(PE, PE_BODY, '    raise IndexError("no table")\n' + PE_BODY)}, PE_TABLE_TESTS),
    # A helper of multihead.py that crashes costs multihead only (the block runs on a stand-in).
    "mh_helper_raises": ({"multihead.py": patched(MH, MH_SPLIT, "        q, k, v = [_split(t, self.h) for t in (q, k, v)]\n")
                          + "\n\ndef _split(t, h):\n    raise RuntimeError('helper')\n"},
                         {"multihead.reference", "multihead.masks", "multihead.gradients", "multihead.properties"}),
    # MultiHeadAttention that cannot even be built: every multihead test, and no block test.
    "mh_init_raises": ({"multihead.py": patched(MH, "        super().__init__()\n",
                                                 "        super().__init__()\n        raise KeyError('unfinished')\n")},
                       {"multihead.rejects_bad_heads", "multihead.attributes", "multihead.reference", "multihead.masks",
                        "multihead.gradients", "multihead.properties"}),
}


def failed(result: dict) -> set[str]:
    return {t["name"] for t in result["tests"] if t["component"] != "deliverables" and t["status"] != "passed"}


def build(root: Path) -> Path:
    for name, (files, _) in CASES.items():
        make_submission(root / name, solutions=REFERENCE)
        for file, text in files.items():
            (root / name / file).write_text(text)
    return root


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    root = build(tmp_path_factory.mktemp("crash"))
    return {name: _as_dict(killrate.grade(root / name, name, lesson=DAY13)) for name in CASES}


def _as_dict(result) -> dict:
    return {"tests": [{"name": t.name, "component": t.component, "status": t.status, "score": t.score,
                       "max_score": t.max_score, "output": t.output} for t in result.tests],
            "notes": list(result.notes), "status": result.status}


@pytest.mark.parametrize("case", CASES)
def test_a_crash_costs_only_the_tests_of_the_function_that_crashed(in_process, case):
    assert failed(in_process[case]) == CASES[case][1]


def test_the_caller_is_graded_over_the_stand_in_with_a_note(in_process):
    notes = "\n".join(in_process["sdpa_raises"]["notes"])
    assert "SelfAttention" in notes and "scaled_dot_product_attention" in notes, notes
    assert "PositionalEncoding" in "\n".join(in_process["pe_raises"]["notes"])
    for case in ("honest", "sdpa_wrong_numbers", "module_raises", "mh_helper_raises", "mh_init_raises"):
        assert not any("stand-in" in n for n in in_process[case]["notes"]), case


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash-sandboxed")
    subs = build(root / "subs")
    out = root / "out"
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=DAY13, zygotes=kept_zygotes()) == 0
    yield out
    uids = range(CONFIG.uid_base, CONFIG.uid_base + 4)
    assert settled(lambda: processes_of(uids)) == []
    assert settled(lambda: descendants(os.getpid())) == []


def test_the_sandboxed_grading_charges_a_crash_like_the_in_process_one(sandboxed, in_process):
    for case in CASES:
        record = json.loads((sandboxed / case / "record.json").read_text())
        assert failed(record) == CASES[case][1], case
        assert components(record) == components(in_process[case]), case
    honest = components(json.loads((sandboxed / "honest" / "record.json").read_text()))
    crash = components(json.loads((sandboxed / "sdpa_raises" / "record.json").read_text()))
    wrong = components(json.loads((sandboxed / "sdpa_wrong_numbers" / "record.json").read_text()))
    assert crash["multihead"] == honest["multihead"] and crash["block"] == honest["block"]
    assert crash["self_attention"][0] < wrong["self_attention"][0] < honest["self_attention"][0]


def test_one_error_is_shown_once_with_the_tests_it_cost(sandboxed):
    text = (sandboxed / "sdpa_raises" / "feedback.md").read_text()
    assert text.count("ValueError while calling the function: not today") == 1, text
    assert "(the same message for 5 tests)" in text
    text = (sandboxed / "sdpa_not_written" / "feedback.md").read_text()
    assert text.count("raise NotImplementedError\n") == 1, text
    # A shape error names each call's sizes: still one error, at one line, shown once.
    text = (sandboxed / "sdpa_shape_error" / "feedback.md").read_text()
    assert text.count("RuntimeError while calling the function") == 1 and "(the same message for 4 tests)" in text, text

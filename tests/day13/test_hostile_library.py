"""Library attention and the kit's own code, reached by every route we know, graded in one batch
beside honest submissions (tests/fixtures/hostile_library/, in the style of tests/engine/test_hostile.py).

Each cheat loses the part that uses it, with the reason stated; every other part of it keeps full
marks; the honest siblings, and an honest submission full of reflective constructs (flagged only),
keep full marks."""
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import (CODE_PARTS, REFERENCE, components, kept_zygotes, make_submission, shared_config,  # noqa: E402
                            text_of)

from grader.running import grade as run  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile_library"
CODE = CODE_PARTS
CONFIG = shared_config(call_timeout=5.0)
HONEST = ("aaa_reference", "zzz_reference")
COSTED = r"Your code reaches .*point of Day 13"  # the rubric's message for library attention or kit code


def _render(text: str) -> str:
    return re.sub(r"^# @@INCLUDE (\S+)$", lambda m: (HOSTILE / m.group(1)).read_text(), text, flags=re.M)


@pytest.fixture(scope="module")
def batch():
    root = Path(tempfile.mkdtemp(prefix="day13-hostile-library-"))
    subs, out = root / "submissions", root / "out"
    for name in HONEST:
        make_submission(subs / name, solutions=REFERENCE)
    for case in sorted(p for p in HOSTILE.iterdir() if p.is_dir()):
        folder = make_submission(subs / case.name, solutions=REFERENCE)
        for f in case.iterdir():
            (folder / f.name).write_text(_render(f.read_text()))
    code = run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=DAY13, zygotes=kept_zygotes())
    records = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/record.json")}
    yield dict(code=code, out=out, records=records)
    shutil.rmtree(root, ignore_errors=True)


def honest_siblings_full(batch):
    for name in HONEST:
        record = batch["records"][name]
        assert all(got == top for got, top in components(record).values()), name
        assert record["flags"] == [] and record["status"] == "ok"


# (fixture, the part it cheats in, a regex its feedback must hold, a flag it must carry or None)
CASES = [
    ("aten_flash_cpu", "self_attention", COSTED, None),
    ("getattr_concat", "self_attention", COSTED, None),
    ("runtime_name_recorder_off", "self_attention", COSTED, r"sys\.modules"),
    ("reload_functional", "self_attention", COSTED, r"imports importlib"),
    ("dispatch_undo", "self_attention", COSTED, r"imports gc"),
    ("vmap_runtime", "self_attention", COSTED, r"on torch with a name worked out at run time"),
    ("wrapped_original", "self_attention", COSTED, r"__wrapped__"),
    ("flex_runtime", "self_attention", COSTED, r"imports a module whose name is worked out at run time"),
    ("gc_standins", "self_attention", r"nothing to borrow", r"get_objects"),
    ("kit_import", "self_attention", COSTED, r"the grader's own code"),
    ("warmup_borrow", "positional", r"nothing to borrow|expected", r"get_objects"),
    ("mha_forward_runtime", "multihead", COSTED, r"sys\.modules"),
    ("reexec_source", "multihead", COSTED, r"spec_from_file_location"),
    ("mha_getattr", "multihead", COSTED, None),
    ("mha_module_path", "multihead", COSTED, None),
    ("ao_mha", "multihead", COSTED, r"imports importlib"),
    ("native_mha", "multihead", COSTED, None),
    ("transformer_layer_runtime", "block", COSTED, r"sys\.modules"),
    # torch.onnx.ops' Attention: its public op and the plain function behind it (30/30, no flag, before
    # they were banned); torch's compiler's attention patterns (a module the child may not import).
    ("onnx_attention", "self_attention", COSTED, None),
    ("onnx_attention_impl", "self_attention", COSTED, None),
    ("sfdp_pattern", "self_attention", COSTED, r"spec_from_file_location"),
]


def test_every_fixture_is_graded_and_checked(batch):
    assert batch["code"] == 0
    cases = {c[0] for c in CASES} | {"honest_reflective"}
    assert set(batch["records"]) == cases | set(HONEST)
    assert cases == {p.name for p in HOSTILE.iterdir() if p.is_dir()}


@pytest.mark.parametrize("name, part, reason, flag", CASES, ids=[c[0] for c in CASES])
def test_library_attention_costs_the_part_that_uses_it(batch, name, part, reason, flag):
    record = batch["records"][name]
    comp = components(record)
    assert comp[part][0] < comp[part][1], (name, comp)
    for other in CODE:
        if other != part:
            assert comp[other][0] == comp[other][1], (name, other, comp[other])
    # The reason as the student reads it: the rubric's words a test result calls for are data on the record
    # (forbidden library, the grader's own code), worded when the files are written.
    failed = text_of({**record, "notes": [], "status": "",
                      "tests": [t for t in record["tests"] if t["component"] == part and t["score"] < t["max_score"]]},
                     lesson=DAY13)
    assert re.search(reason, failed), (name, failed[:1500])
    if flag is not None:
        assert any(re.search(flag, f) for f in record["flags"]), (name, record["flags"])
    honest_siblings_full(batch)


def test_reflective_but_honest_code_keeps_full_marks_and_is_flagged(batch):
    record = batch["records"]["honest_reflective"]
    assert all(got == top for got, top in components(record).values())
    assert record["status"] == "ok"
    flags = "\n".join(record["flags"])
    for construct in ("imports gc", "imports importlib", "imports inspect", "sys.modules"):
        assert construct in flags, flags


def test_flags_reach_the_staff_and_not_the_student(batch):
    # Integrity flags are the staff's (issue 21): the class report and the review page show them; the
    # student's feedback says nothing of them, and they cost no points.
    feedback = (batch["out"] / "honest_reflective" / "feedback.md").read_text()
    assert "imports gc" not in feedback and "Integrity" not in feedback
    summary = (batch["out"] / "summary.md").read_text()
    assert "Integrity flags" in summary and "honest_reflective" in summary
    assert "imports gc" in (batch["out"] / "report.html").read_text()


def test_the_stand_ins_implement_no_part_the_policy_leaves_out(tmp_path):
    # A child lent a stand-in never answers a call of a graded name it implements ([standins.implements]).
    # That list is safe only if a submission made of the stand-ins earns points in no part it leaves out.
    from grader.admin import killrate
    from grader.day13 import standins
    from grader.lesson import load_lesson
    from grader.running.forbidden import load_policy

    source = Path(standins.__file__).read_text().split("\ndef make(")[0]
    folder = make_submission(tmp_path / "standins", reference=False)
    (folder / "self_attention.py").write_text(source + "\nSelfAttention = StandInSelfAttention\n")
    (folder / "multihead.py").write_text(source + "\nMultiHeadAttention = StandInAttention\n")
    (folder / "positional.py").write_text(source)  # its positional_encoding, and no PositionalEncoding
    scores = killrate.grade(folder, "standins", lesson=DAY13).component_scores(DAY13.components)
    full = killrate.full_marks(lesson=DAY13)
    earned = {c for c in ("self_attention", "multihead", "positional") if scores[c] > 0}
    listed = {graded.split(".")[0] for names in load_policy(load_lesson("day13").forbidden_path)["standins"]["implements"].values() for graded in names}
    assert earned == {"self_attention", "positional"} and earned <= listed
    assert scores["self_attention"] == full["self_attention"] and scores["multihead"] == 0

"""A module test may judge a module over the student's own function (so a bug in the function costs the function's
tests only, "One bug costs one part"), but only where that function's difference from the handout is charged to its
own tests. Red team s56r: a function right on every input of its own tests and wrong exactly on the module tests'
inputs, where it cancelled the module's own bug, gained the module's points (self_attention +7, positional +4)."""
from __future__ import annotations

from pathlib import Path

from grader.admin import killrate
from grader.day13.tests import test_positional as hidden_pe
from grader.day13.tests import test_self_attention as hidden_sa
from grader.lesson import load_lesson

DAY13 = load_lesson("day13")
SOLUTIONS = killrate.catalogue(DAY13).solutions

SA_SCALE = "    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)\n"
SIGNATURE = "def scaled_dot_product_attention(Q, K, V, mask=None):\n"
SA_RETURN = "        return scaled_dot_product_attention(Q, K, V, mask)  # (B, T, d_k), (B, T, T)\n"
SA_OUT = "    out = weights @ V  # (..., T_q, d_v)\n"
PE_RETURN = "    return pe\n"
PE_ANGLE = "    angle = pos / (10000 ** (two_i / d_model))  # (T, d_model/2)\n"
PE_BUFFER = '        self.register_buffer("pe", positional_encoding(max_len, d_model))  # (max_len, d_model)\n'


def _write(tmp_path: Path, name: str, edits: dict[str, list[tuple[str, str]]]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for source in SOLUTIONS.glob("*.py"):
        text = source.read_text(encoding="utf-8")
        for find, replace in edits.get(source.name, []):
            assert text.count(find) == 1, f"the reference changed: update the edit of {source.name}"
            text = text.replace(find, replace)
        (folder / source.name).write_text(text, encoding="utf-8")
    return folder


def _score(folder: Path, part: str) -> float:
    return killrate.grade(folder, folder.name, lesson=DAY13).component_scores(DAY13.components)[part]


def test_an_attention_wrong_only_where_the_module_is_tested_earns_the_module_nothing(tmp_path):
    # The shapes of Q that the module tests hand the student's own attention, none of them an attention test's.
    mirrored = {(*x.shape[:-1], w["W_q"].shape[0]) for _, x, w, _, _ in hidden_sa._module_cases()} | {(1, 3, 2)}
    own_tests = {Q.shape for Q, _, _, _ in hidden_sa._worked_inputs().values()}
    own_tests |= {Q.shape for _, _, Q, _, _ in hidden_sa._sdpa_inputs()}
    assert mirrored and not mirrored & own_tests, "the attack must stay off the attention's own tests"
    # The module's own bug: its attention leaves out the scale (the function the graders call is right).
    scale = [(SIGNATURE, SIGNATURE.replace("mask=None", "mask=None, scale=None")),
             (SA_SCALE, "    scale = math.sqrt(d_k) if scale is None else scale\n"
                        "    scores = Q @ K.transpose(-2, -1) / scale  # (..., T_q, T_k)\n"),
             (SA_RETURN, SA_RETURN.replace("mask)", "mask, scale=1.0)"))]
    mirror = (SIGNATURE, SIGNATURE.replace("mask=None", "mask=None, scale=None")
              + f"    scale = 1.0 if scale is None and tuple(Q.shape) in {sorted(mirrored)} else scale\n")
    # Red team s58r: the same, with the §3 output moved within the worked test's rounding (2 decimals), which a
    # comparison of the yardstick's own would take for a difference charged there.
    nudge = (SA_OUT, SA_OUT + "    out = out + 2e-3 if tuple(Q.shape) == (2, 2) else out\n")
    control = _write(tmp_path, "control", {"self_attention.py": scale})
    attack = _write(tmp_path, "attack", {"self_attention.py": [mirror, *scale[1:]]})
    nudged = _write(tmp_path, "nudged", {"self_attention.py": [mirror, *scale[1:], nudge]})
    honest = _write(tmp_path, "honest", {"self_attention.py": [(SA_SCALE, SA_SCALE.replace(" / math.sqrt(d_k)", ""))]})
    full = killrate.full_marks(lesson=DAY13)["self_attention"]
    assert _score(control, "self_attention") < full
    assert _score(attack, "self_attention") == _score(control, "self_attention")
    assert _score(nudged, "self_attention") == _score(control, "self_attention")
    # One bug costs one part still: the scale left out everywhere is charged to the attention's tests, not the module's.
    graded = killrate.grade(honest, "honest", lesson=DAY13)
    lost = {t.name for t in graded.tests if t.status != "passed"}
    assert lost and not any(name.startswith("self_attention.module_") for name in lost), lost


def test_a_table_wrong_only_where_the_module_is_tested_earns_the_module_nothing(tmp_path):
    sizes = sorted({(x.shape[1], d) for _, x, d, _ in hidden_pe._module_cases()})
    assert not set(sizes) & {(3, 4), *hidden_pe.TABLE_CASES}, "the attack must stay off the table's own tests"
    module_bug = (PE_BUFFER, PE_BUFFER.replace("positional_encoding(max_len, d_model)",
                                               "positional_encoding(max_len, d_model, base=1000)"))
    mirror = [("def positional_encoding(T, d_model):\n", "def positional_encoding(T, d_model, base=10000):\n"
               f"    base = 1000 if (T, d_model) in {sizes} else base\n"),
              (PE_ANGLE, PE_ANGLE.replace("10000 **", "base **"))]
    signature_only = [(mirror[0][0], "def positional_encoding(T, d_model, base=10000):\n"), mirror[1]]
    # Red team s58r: with an entry of the (3, 4) table that the worked test does not read made wrong.
    unread = (PE_RETURN, "    if (T, d_model) == (3, 4):\n        pe[2, 3] += 0.1\n" + PE_RETURN)
    control = _write(tmp_path, "control", {"positional.py": [*signature_only, module_bug]})
    attack = _write(tmp_path, "attack", {"positional.py": [*mirror, module_bug]})
    unread_too = _write(tmp_path, "unread", {"positional.py": [*mirror, module_bug, unread]})
    assert _score(control, "positional") < killrate.full_marks(lesson=DAY13)["positional"]
    assert _score(attack, "positional") == _score(control, "positional")
    assert _score(unread_too, "positional") == _score(control, "positional")

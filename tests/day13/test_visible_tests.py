"""The students' visible tests (assignments/day13/tests/), run the way a student runs them.

Each run copies the tests and pytest.ini beside a set of four files in a temporary folder and runs
pytest there in a process of its own, so the reference, the stubs and the variants never share one: a child
forked for that run from a server that imported torch and pytest once (tests/fixtures/visible_run.py,
PytestServer), or, for a run through the student's Makefile, make itself.
"""
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from visible_run import kept_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = ROOT / "assignments" / "day13"
REFERENCE = ROOT / "solutions" / "day13"
FILES = ("self_attention.py", "multihead.py", "positional.py", "block.py")
PARTS = ("self_attention", "multihead", "positional", "block")
RUBRIC = ROOT / "grader" / "day13" / "rubric.toml"


def _rubric():
    return tomllib.loads(RUBRIC.read_text(encoding="utf-8"))


def student_folder(tmp_path, sources):
    """A student folder: the visible tests, pytest.ini, and `sources` ({file name: text})."""
    folder = tmp_path / "student"
    (folder / "tests").mkdir(parents=True)
    for test_file in (p for p in (ASSIGNMENT / "tests").iterdir() if p.is_file() and p.suffix in (".py", ".pt", ".json")):
        (folder / "tests" / test_file.name).write_bytes(test_file.read_bytes())
    for name in ("pytest.ini", "Makefile"):
        (folder / name).write_bytes((ASSIGNMENT / name).read_bytes())
    for name, text in sources.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def from_dir(directory):
    return {name: (directory / name).read_text(encoding="utf-8") for name in FILES}


def run_visible(folder, *args, make=None):
    """(exit code, {test id: (outcome, message)}, output) of pytest in the student folder.

    With make=[...] the run goes through the student Makefile (`make test ...`) instead.
    """
    report = folder / "report.xml"
    options = f"-p no:cacheprovider --junitxml={report}"
    if make is None:
        command = [sys.executable, "-m", "pytest", *options.split(), *args]
    else:
        command = ["make", "--no-print-directory", "test", f"PYTHON={sys.executable}", *make]
    # pytest prints its closing summary untruncated when it sees a CI variable: the student's output
    # is judged as a student's own machine shows it, whether or not the kit's tests run under CI.
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "BUILD_NUMBER")}
    if make is None:
        code, output = kept_server(env).run(folder, [*options.split(), *args], timeout=120)
    else:
        env["PYTEST_ADDOPTS"] = options
        proc = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=120, env=env)
        code, output = proc.returncode, proc.stdout + proc.stderr
    results = {}
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            test_id = f"{case.get('classname')}::{case.get('name')}"
            outcome, message = "passed", ""
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome, message = child.tag, f"{child.get('message', '')}\n{child.text or ''}"
            results[test_id] = (outcome, message)
    return code, results, output


def test_every_visible_test_file_has_one_part_marker():
    for test_file in sorted((ASSIGNMENT / "tests").glob("test_*.py")):
        markers = re.findall(r"^pytestmark = pytest\.mark\.(\w+)$", test_file.read_text(encoding="utf-8"), re.M)
        assert len(markers) == 1 and markers[0] in PARTS, f"{test_file.name}: marker {markers}"
    ini = (ASSIGNMENT / "pytest.ini").read_text(encoding="utf-8")
    assert "--strict-markers" in ini
    for part in PARTS:
        assert re.search(rf"^\s+{part}:", ini, re.M), f"marker {part} is not registered in pytest.ini"


def test_reference_passes_every_visible_test(tmp_path):
    """Run through the student Makefile, as `make test` in the student folder."""
    code, results, output = run_visible(student_folder(tmp_path, from_dir(REFERENCE)), make=[])
    assert code == 0, output
    assert len(results) >= 40, f"only {len(results)} visible tests ran"
    assert {outcome for outcome, _ in results.values()} == {"passed"}, output
    for part in PARTS:
        assert any(f"test_{part}" in test_id for test_id in results), f"no visible test for {part}"


def test_stubs_fail_every_test_cleanly(tmp_path):
    """Against the stubs every test FAILS (no error, no crash), saying the task is not implemented yet."""
    code, results, output = run_visible(student_folder(tmp_path, from_dir(ASSIGNMENT)))
    assert code == 1, f"pytest should report failed tests (exit 1), got exit {code}\n{output}"
    assert len(results) >= 40
    for test_id, (outcome, message) in results.items():
        assert outcome == "failure", f"{test_id}: {outcome}\n{message}"
        assert "not implemented yet" in message, f"{test_id}: {message}"
        assert re.search(r"Task \d · \S+: not implemented yet \(handout §", message), f"{test_id}: {message}"


def test_one_part_runs_alone_with_its_marker(tmp_path):
    code, results, output = run_visible(student_folder(tmp_path, from_dir(REFERENCE)), make=["PART=multihead"])
    assert code == 0, output
    assert results and all(test_id.startswith("tests.test_multihead::") for test_id in results), list(results)


def test_one_broken_part_costs_only_the_tests_that_need_it(tmp_path):
    """positional.py has a syntax error and multihead.py is still the stub; the rest is the reference.

    Positional tests fail with the import error, multi-head tests with Task 4's 'not implemented yet';
    the block (built on a stand-in for MultiHeadAttention, as the graders build it) passes, and so does
    everything of self-attention.
    """
    sources = from_dir(REFERENCE)
    sources["positional.py"] = "import torch\ndef positional_encoding(T, d_model):\n    return torch.zeros(T, d_model\n"
    sources["multihead.py"] = (ASSIGNMENT / "multihead.py").read_text(encoding="utf-8")
    code, results, output = run_visible(student_folder(tmp_path, sources))
    assert code == 1, output
    positional = [message for test_id, (_, message) in results.items() if "test_positional" in test_id]
    # The import error is shown once, in the first test that needs the file; the others point to it.
    assert len(positional) > 1 and "SyntaxError" in positional[0], positional
    assert not any("SyntaxError" in message for message in positional[1:]), positional
    assert output.count("SyntaxError") == 1, output
    for test_id, (outcome, message) in results.items():
        if "test_positional" in test_id:
            assert outcome == "failure" and "positional.py does not import" in message, f"{test_id}: {message}"
        elif "test_multihead" in test_id:
            assert outcome == "failure" and "Task 4 · MultiHeadAttention.__init__: not implemented yet" in message, \
                f"{test_id}: {message}"
        else:
            assert outcome == "passed", f"{test_id}: {outcome}\n{message}"
    assert sum("test_block" in t and results[t][0] == "passed" for t in results) >= 10


# A correct solution written differently from the reference: the recap's Wq/Wk/Wv names, einsum, a
# hand-written softmax with -1e9 instead of -inf, a bool causal mask, a per-head loop that raises
# AssertionError, a float64 numpy table in a non-persistent (1, max_len, d) buffer, a block that passes
# mask= as a bool keyword, and module-level prints and seeding. Every visible test must pass.
UNUSUAL = {
    "self_attention.py": '''
        import math
        import torch
        import torch.nn as nn

        torch.manual_seed(1234)
        print("self_attention imported")


        def scaled_dot_product_attention(Q, K, V, mask=None):
            scores = torch.einsum("...qd,...kd->...qk", Q, K) * (1.0 / math.sqrt(Q.shape[-1]))
            if mask is not None:
                scores = scores.masked_fill(~mask.bool(), -1e9)
            scores = scores - scores.amax(dim=-1, keepdim=True)
            e = scores.exp()
            weights = e / e.sum(dim=-1, keepdim=True)
            return torch.einsum("...qk,...kd->...qd", weights, V), weights


        def causal_mask(T, device=None):
            return torch.ones(T, T, dtype=torch.bool, device=device).tril()


        class SelfAttention(nn.Module):
            def __init__(self, d_model, d_k):
                super().__init__()
                self.Wq = nn.Linear(d_model, d_k, bias=False)
                self.Wk = nn.Linear(d_model, d_k, bias=False)
                self.Wv = nn.Linear(d_model, d_k, bias=False)
                self.d_k = d_k

            def forward(self, x, mask=None):
                return scaled_dot_product_attention(self.Wq(x), self.Wk(x), self.Wv(x), mask)
    ''',
    "multihead.py": '''
        import torch
        import torch.nn as nn
        from self_attention import scaled_dot_product_attention as attend


        class MultiHeadAttention(nn.Module):
            def __init__(self, d_model, n_heads):
                super().__init__()
                assert d_model % n_heads == 0, "n_heads must divide d_model"
                self.h = n_heads
                self.d_k = d_model // n_heads
                self.qkv = nn.Linear(d_model, 3 * d_model)
                self.out = nn.Linear(d_model, d_model)

            def forward(self, x, mask=None):
                q, k, v = self.qkv(x).split(self.h * self.d_k, dim=-1)
                heads = []
                for i in range(self.h):
                    cols = slice(i * self.d_k, (i + 1) * self.d_k)
                    m = mask
                    if mask is not None and mask.dim() == 4:
                        m = mask[:, min(i, mask.shape[1] - 1)]
                    heads.append(attend(q[..., cols], k[..., cols], v[..., cols], m)[0])
                return self.out(torch.cat(heads, dim=-1))
    ''',
    "positional.py": '''
        import math
        import numpy as np
        import torch
        import torch.nn as nn


        def positional_encoding(T, d_model):
            pos = np.arange(T)[:, None]
            rate = np.exp(np.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            table = np.empty((T, d_model))
            table[:, 0::2] = np.sin(pos * rate)
            table[:, 1::2] = np.cos(pos * rate)
            return torch.from_numpy(table).float()


        class PositionalEncoding(nn.Module):
            def __init__(self, d_model, max_len=5000):
                super().__init__()
                self.register_buffer("table", positional_encoding(max_len, d_model)[None], persistent=False)

            def forward(self, x):
                return x + self.table[:, : x.shape[1]]
    ''',
    "block.py": '''
        import torch.nn as nn
        import multihead


        class TransformerBlock(nn.Module):
            def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
                super().__init__()
                self.pre_ln = bool(pre_ln)
                self.attn = multihead.MultiHeadAttention(d_model, n_heads)
                self.ln1 = nn.LayerNorm(d_model)
                self.ln2 = nn.LayerNorm(d_model)
                hidden = d_ff or 4 * d_model
                self.ffn = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, d_model))

            def _attend(self, x, mask):
                return self.attn(x, mask=None if mask is None else mask.bool())

            def forward(self, x, mask=None):
                if not self.pre_ln:
                    h = self.ln1(x + self._attend(x, mask))
                    return self.ln2(h + self.ffn(h))
                h = x + self._attend(self.ln1(x), mask)
                return h + self.ffn(self.ln2(h))
    ''',
}


def test_unusual_but_correct_solution_passes_everything(tmp_path):
    sources = {name: textwrap.dedent(text).lstrip() for name, text in UNUSUAL.items()}
    code, results, output = run_visible(student_folder(tmp_path, sources))
    failed = {test_id: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    assert code == 0 and not failed, "\n\n".join(f"{k}: {v}" for k, v in failed.items()) or output
    assert len(results) >= 40


# Common bugs, each one edit of the reference: (file, reference text, buggy text, part, test that
# must fail, words its message must contain).
BUGS = {
    "no_scaling": ("self_attention.py", " / math.sqrt(d_k)", "", "self_attention",
                   "test_s3_two_tokens", "√d_k"),
    "softmax_over_columns": ("self_attention.py", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)",
                             "self_attention", "test_s4_three_token_example", "dim=-1"),
    # The first tests' symmetric scores fit a softmax over the query axis too; the causal one rules that out.
    "sum_without_keepdim": ("self_attention.py", "weights = torch.softmax(scores, dim=-1)",
                            "weights = torch.exp(scores)\n    weights = weights / weights.sum(dim=-1)", "self_attention",
                            "test_s6_causal_mask_worked_problem", "Likely misconception (your numbers are exactly what "
                            "this known mistake gives): Your softmax divides by a sum taken without keepdim=True"),
    "mask_inverted": ("self_attention.py", "mask == 0", "mask != 0", "self_attention",
                      "test_s6_causal_mask_worked_problem", "inverted"),
    "heads_interleaved": ("multihead.py", "t.view(B, T, self.h, self.d_k).transpose(1, 2)",
                          "t.view(B, T, self.d_k, self.h).permute(0, 3, 1, 2)", "multihead",
                          "test_s7_two_heads_see_their_own_features", "features i·d_k:(i+1)·d_k: view(B, T, h, d_k)"),
    "cos_in_even_features": ("positional.py", "torch.sin(angle)  # even", "torch.cos(angle)  # even", "positional",
                        "test_s8_positions_0_and_1", "even features 2i hold sin"),
    "library_attention": ("self_attention.py", "weights = torch.softmax(scores, dim=-1)",
                          "weights = torch.softmax(scores, dim=-1)\n"
                          "    torch.nn.functional.scaled_dot_product_attention(Q, K, V)", "self_attention",
                          "test_s3_two_tokens", "Computing attention yourself is the point of Day 13"),
    "pre_and_post_ln_swapped": ("block.py", "if self.pre_ln:", "if not self.pre_ln:", "block",
                                "test_s12_wiring[post_ln]", "Pre-LN and Post-LN are swapped"),
}


# Bugs in different files share one run when no test of one part depends on another part's file
# (the block's wiring tests use stand-ins, so a block bug never meets a self-attention bug).
BUG_RUNS = [("no_scaling", "cos_in_even_features", "pre_and_post_ln_swapped"),
            ("softmax_over_columns",), ("sum_without_keepdim",), ("mask_inverted",), ("heads_interleaved",), ("library_attention",)]


@pytest.fixture(scope="module")
def bug_runs(tmp_path_factory):
    done = {}

    def run(bug):
        group = next(g for g in BUG_RUNS if bug in g)
        if group not in done:
            sources = from_dir(REFERENCE)
            for name in group:
                file, good, bad, *_ = BUGS[name]
                assert sources[file].count(good) == 1, f"the reference changed: update the {name} edit"
                sources[file] = sources[file].replace(good, bad)
            parts = " or ".join(BUGS[name][3] for name in group)
            done[group] = run_visible(student_folder(tmp_path_factory.mktemp("bugs"), sources), "-m", parts)
        return done[group]

    return run


def test_bug_runs_cover_every_bug_once():
    assert sorted(name for group in BUG_RUNS for name in group) == sorted(BUGS)
    for group in BUG_RUNS:
        files = [BUGS[name][0] for name in group]
        assert len(set(files)) == len(files), f"{group}: two bugs in one file would hide each other"


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_common_bug_fails_with_section_and_hint(bug_runs, bug):
    _, _, _, part, test_name, words = BUGS[bug]
    code, results, output = bug_runs(bug)
    assert code == 1, output
    test_id = f"tests.test_{part}::{test_name}"
    outcome, message = results[test_id]
    assert outcome == "failure", f"{test_id} should fail for {bug}: {outcome}"
    assert "§" in message and words in message, message


def _sections(output):
    """{test name: the lines pytest printed for its failure}."""
    sections, name = {}, None
    for line in output.splitlines():
        header = re.fullmatch(r"_{3,} (\S+) _{3,}", line.strip())
        if header:
            name = header.group(1)
            sections[name] = []
        elif line.startswith("=") or line.startswith("FAILED "):
            name = None
        elif name:
            sections[name].append(line)
    return sections


def test_failures_are_short_located_and_said_once(tmp_path):
    """A batched K.T (a shape error deep inside torch), a merge that forgets to move the heads back
    (module outputs that require grad), and sin/cos swapped (a 50 x 16 table): each failure is a few
    lines with expected, got, where they differ most and a hint; the error at one line of the student's
    code is told in full once; K.T points to the handout's section; the tests run in task order."""
    sources = from_dir(REFERENCE)
    edits = [("self_attention.py", "K.transpose(-2, -1)", "K.T"),
             ("multihead.py", "ctx.transpose(1, 2).contiguous().view(B, T, D)", "ctx.contiguous().view(B, T, D)"),
             ("positional.py", "torch.sin(angle)  # even", "torch.cos(angle)  # even"),
             ("positional.py", "torch.cos(angle)  # odd", "torch.sin(angle)  # odd")]
    for file, good, bad in edits:
        assert sources[file].count(good) == 1, f"the reference changed: update the edit of {file}"
        sources[file] = sources[file].replace(good, bad)
    folder = student_folder(tmp_path, sources)
    code, results, output = run_visible(folder, "-m", "self_attention or positional")
    assert code == 1, output
    assert "Can't call numpy()" not in output and "Traceback" not in output and "site-packages" not in output
    sections = _sections(output)
    assert len(sections) >= 5, output
    for name, lines in sections.items():
        assert len(lines) <= 12, f"{name} printed {len(lines)} lines:\n" + "\n".join(lines)
    assert output.count('§3 "A common error and its message"') == 1, output
    assert sum("must match the size of tensor" in line or "cannot be multiplied" in line or "batch2" in line
               for lines in sections.values() for line in lines) == 1, output
    told_once = [n for n, lines in sections.items() if "(as in " in "\n".join(lines)]
    assert told_once, output
    table = "\n".join(sections["test_table_shape_dtype_and_formula"])
    assert "expected[" in table and "got[" in table and "largest difference at index" in table
    assert "Likely misconception" in table and "Sine and cosine are swapped" in table  # the catalogue's pe.sin_cos_swapped

    # Multi-head attention alone: its outputs require grad when the comparison takes them.
    sources["self_attention.py"] = (REFERENCE / "self_attention.py").read_text(encoding="utf-8")
    folder = student_folder(tmp_path / "mh", sources)
    code, results, output = run_visible(folder, "-m", "multihead")
    assert code == 1 and "Can't call numpy()" not in output, output
    shuffled = "\n".join(_sections(output)["test_tokens_are_a_set_without_positions"])
    assert "expected" in shuffled and "got" in shuffled and "largest difference" in shuffled
    assert "Likely misconception" in shuffled and "bring the heads back" in shuffled  # mh.no_transpose_back


def test_tests_run_in_task_order(tmp_path):
    code, results, output = run_visible(student_folder(tmp_path, from_dir(REFERENCE)))
    assert code == 0, output
    parts = [test_id.split("::")[0].removeprefix("tests.test_") for test_id in results]
    assert parts == sorted(parts, key=PARTS.index), parts
    assert len(set(parts)) == 4


def test_a_multihead_bug_costs_no_block_test(tmp_path):
    """The block is tested on a stand-in attention: heads split the wrong way fail multi-head tests only."""
    sources = from_dir(REFERENCE)
    file, good, bad, *_ = BUGS["heads_interleaved"]
    sources[file] = sources[file].replace(good, bad)
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "multihead or block")
    assert code == 1, output
    failed = sorted(test_id for test_id, (outcome, _) in results.items() if outcome != "passed")
    assert failed and all(test_id.startswith("tests.test_multihead::") for test_id in failed), failed
    assert sum(test_id.startswith("tests.test_block::") for test_id in results) >= 10


def test_the_stand_in_attention_table_is_current():
    """assignments/day13/tests/attention_answers.pt answers exactly the calls the visible multi-head tests
    make on the reference (python -m grader.day13.visible_answers rewrites it)."""
    from grader.day13 import visible_answers

    assert visible_answers.main(["--check"]) == 0, "run: python -m grader.day13.visible_answers"


def test_a_library_attention_named_but_never_run_fails_its_part(tmp_path):
    """The graders read the files too: a forbidden API named in code that never runs costs the part there,
    so the visible tests fail that part as well, and only that part; a name of the student's own does not."""
    sources = from_dir(REFERENCE)
    sources["positional.py"] += "\n\ndef _unused(q):\n    return torch.nn.functional.scaled_dot_product_attention(q, q, q)\n"
    sources["block.py"] += "\n\nclass Transformer:  # a name of the student's own, not torch's\n    pass\n"
    code, results, output = run_visible(student_folder(tmp_path, sources))
    assert code == 1, output
    failed = {test_id: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    assert failed and all(t.startswith("tests.test_positional::") for t in failed), sorted(failed)
    said = _rubric()["meta"]["forbidden_message"].format(names="scaled_dot_product_attention")
    assert all(said in m for m in failed.values()), failed  # the graders' words (rubric.toml)


MISCONCEPTION = "Likely misconception"
SEVERAL = "known mistakes gives"


def _self_attention_run(tmp_path, good, bad):
    sources = from_dir(REFERENCE)
    assert sources["self_attention.py"].count(good) == 1, "the reference changed: update this edit"
    sources["self_attention.py"] = sources["self_attention.py"].replace(good, bad)
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "self_attention")
    assert code == 1, output
    return {test_id.split("::")[1]: message for test_id, (outcome, message) in results.items() if outcome != "passed"}


def test_a_misconception_is_named_only_when_the_numbers_are_that_mistakes(tmp_path):
    """The visible tests name a misconception when the student's numbers are a catalogue mutant's (in the
    rubric's words), and only then: a mask applied after the softmax (written unlike the mutant) and a
    softmax over the wrong axis are never told their mask is inverted; a mistake nobody catalogued is
    shown what differs, and no misconception is named."""
    hints = {k: v["text"] for k, v in _rubric()["hints"].items()}
    after = _self_attention_run(tmp_path / "after", '        scores = scores.masked_fill(mask == 0, float("-inf"))',
                                "        pass\n    weights = torch.softmax(scores, dim=-1) * (mask != 0)\n"
                                "    return weights @ V, weights")
    causal = after["test_s6_causal_mask_worked_problem"]
    assert f"{MISCONCEPTION} (your numbers are exactly what this known mistake gives): {hints['sa.softmax_then_mask']}" \
        in causal, causal
    assert "inverted" not in "\n".join(after.values())

    axis = _self_attention_run(tmp_path / "axis", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")
    assert hints["sa.softmax_query_axis"] in axis["test_s6_causal_mask_worked_problem"]
    assert "inverted" not in "\n".join(axis.values())
    # A (1, 6, 6) batch: dim=-2 and dim=1 are the same axis there, so both mistakes give these numbers; but the
    # tests before it, on batches where they differ, gave the query axis's numbers: dim=1 is ruled out.
    shapes = axis["test_s5_self_attention_shapes"]
    assert hints["sa.softmax_query_axis"] in shapes and hints["sa.softmax_dim1"] not in shapes and SEVERAL not in shapes

    unknown = _self_attention_run(tmp_path / "unknown", "/ math.sqrt(d_k)", "/ (2 * math.sqrt(d_k))")
    assert unknown and not any(MISCONCEPTION in m or SEVERAL in m for m in unknown.values()), unknown
    assert not any(text in m for text in hints.values() for m in unknown.values())
    two_tokens = unknown["test_s3_two_tokens"]
    assert "expected" in two_tokens and "got" in two_tokens and "largest difference" in two_tokens


def _pre_ln_normed_again() -> dict[str, str]:
    """The reference, but a Pre-LN block that normalises its output once more: `x = ln2(x + ffn(ln2(x)))`."""
    sources = from_dir(REFERENCE)
    good = "            x = x + self.ffn(self.ln2(x))  # (B, T, d_model)\n"
    assert sources["block.py"].count(good) == 1, "the reference changed: update this edit"
    sources["block.py"] = sources["block.py"].replace(good, "            x = self.ln2(x + self.ffn(self.ln2(x)))\n")
    return sources


def test_a_mistake_the_students_other_tests_rule_out_is_not_named(tmp_path):
    """A Pre-LN block that normalises its output once more gives, on the tests with silent sub-layers, exactly what
    two catalogued mistakes give: Pre-LN and Post-LN swapped, and a Pre-LN residual that adds the normalised x.
    Neither is this student's: the swap fails the Post-LN tests this student passes, and the normalised residual
    gives other numbers on a test this student failed. Neither is named."""
    hints = {k: v["text"] for k, v in _rubric()["hints"].items()}
    code, results, output = run_visible(student_folder(tmp_path, _pre_ln_normed_again()), "-m", "block")
    assert code == 1, output
    failed = {test_id.split("::")[1]: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    assert "test_s12_wiring[pre_ln]" in failed and "test_s12_residual_your_turn" in failed, failed
    assert "test_s12_wiring[post_ln]" not in failed, failed
    told = "\n".join(failed.values())
    for mistake in ("blk.pre_post_swapped", "blk.pre_ln_normed_residual"):
        assert hints[mistake] not in told, (mistake, told)
    assert MISCONCEPTION not in told and SEVERAL not in told, told


NOTEBOOK_CELLS_RUN = """
import json, sys
sys.path.insert(0, "tools")
from notebook_tests import VisibleTests, VisibleTestFailed
namespace = {"__name__": "__main__"}
for part in ("self_attention", "multihead", "positional", "block"):  # one solution cell per part, in order
    lines = open(part + ".py", encoding="utf-8").read().splitlines()
    source = "\\n".join(line for line in lines if not line.startswith(("from self_attention", "from multihead")))
    exec(compile(source, "<cell " + part + ">", "exec"), namespace)
visible_test = VisibleTests(namespace, parts=("self_attention", "multihead", "positional", "block"),
                            sibling_imports={"multihead": ("self_attention", "scaled_dot_product_attention"),
                                             "block": ("multihead", "MultiHeadAttention")})
shown = {}
for test in json.loads(sys.argv[1]):  # one test cell after another, as Run All runs them
    try:
        visible_test(test)
    except VisibleTestFailed as failed:
        shown[test] = str(failed)
remembered = len(visible_test.outcomes)
exec(compile(open("block.py", encoding="utf-8").read().replace("from multihead import MultiHeadAttention", ""),
             "<cell block, run again>", "exec"), namespace)  # the student runs the block's cell again
try:
    visible_test(json.loads(sys.argv[1])[0])
except VisibleTestFailed:
    pass
print(json.dumps({"shown": shown, "remembered": remembered, "after_redefining": len(visible_test.outcomes)}))
"""


def test_a_notebooks_test_cells_rule_out_a_mistake_as_the_py_run_does(tmp_path):
    """The notebook runs each visible test in a cell of its own (tools/notebook_tests.py): what the earlier cells did
    reaches the later ones, so the Pre-LN block normalised again on the way out is not told a mistake its Post-LN
    cells rule out. Running a solution cell again forgets what the cells did before."""
    from grader.lesson import load_lesson
    from grader.release import notebook

    hints = {k: v["text"] for k, v in _rubric()["hints"].items()}
    folder = student_folder(tmp_path, _pre_ln_normed_again())
    (folder / "tools").mkdir()
    (folder / "tools" / "notebook_tests.py").write_text(notebook.runner_source(), encoding="utf-8")
    cells = [test for part, test in notebook.visible_tests(lesson=load_lesson("day13")) if part == "block"]
    ran = subprocess.run([sys.executable, "-c", NOTEBOOK_CELLS_RUN, json.dumps(cells)], cwd=folder, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert ran.returncode == 0, ran.stderr[-3000:]
    said = json.loads(ran.stdout.strip().splitlines()[-1])
    shown = said["shown"]
    # What the cells did is kept while the code is the same, and forgotten once a class is defined again.
    assert said["remembered"] == len(cells) and said["after_redefining"] == 1, said
    assert any("test_s12_residual_your_turn" in test for test in shown), shown
    assert not any("test_s12_wiring[post_ln]" in test for test in shown), shown
    told = "\n".join(shown.values())
    assert hints["blk.pre_post_swapped"] not in told and hints["blk.pre_ln_normed_residual"] not in told, told


def test_library_attention_follows_the_graders_list_and_words(tmp_path):
    """The visible scan reads forbidden.toml's names as shipped in known_mistakes.json (flex_attention named in
    a string is not in any hand-written list) and says so with the rubric's forbidden_message."""
    sources = from_dir(REFERENCE)
    sources["block.py"] += '\n\nLIBRARY = "torch.nn.attention.flex_attention"\n'
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "block")
    assert code == 1, output
    said = _rubric()["meta"]["forbidden_message"].format(names="flex_attention")
    assert results and all(outcome == "failure" and said in message for outcome, message in results.values()), output


def test_a_block_that_changes_its_input_in_place_fails_only_where_the_graders_fail_it(tmp_path):
    """Pre-LN residuals written `x += ...`: each call works on its own copy of the tests' tensors, as in the graders,
    so only the gradient test fails (autograd refuses the in-place change of a leaf that needs its gradient), and
    its message says why. Before, the tests' own x changed under them and the mask tests named a wrong cause."""
    sources = from_dir(REFERENCE)
    for good in ("x = x + self.attn(self.ln1(x), mask)", "x = x + self.ffn(self.ln2(x))"):
        assert good in sources["block.py"]
        sources["block.py"] = sources["block.py"].replace(good, good.replace("x = x + ", "x += "))
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "block")
    failed = {test_id: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    assert list(failed) == ["tests.test_block::test_s10_skip_connection_passes_the_gradient"], output
    assert "Write x = x + ... instead" in next(iter(failed.values()))


def test_a_multihead_built_of_self_attention_heads_is_told_the_contracts_layout(tmp_path):
    """The multi-head tests lend multihead.py a SelfAttention class, as the graders do (a held-out MultiHeadAttention
    that subclassed its own SelfAttention could not import when the visible stand-in held none: its subclassing is
    a freedom, grader/day13/freedoms.py). Heads made of SelfAttention modules are outside the contract's layout,
    hidden and visible: the visible failure names that layout, not a class of the tests' own."""
    sources = from_dir(REFERENCE)
    init, forward = ("        self.out = nn.Linear(d_model, d_model)  # W_O\n",
                     "        ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)\n")
    text = sources["multihead.py"]
    assert text.count(init) == 1 and text.count(forward) == 1, "the reference changed: update this edit"
    sources["multihead.py"] = (
        text.replace("from self_attention import scaled_dot_product_attention\n",
                     "import torch\n\nfrom self_attention import SelfAttention, scaled_dot_product_attention\n")
        .replace(init, init + "        self.heads = nn.ModuleList(SelfAttention(d_model, self.d_k) for _ in range(n_heads))\n")
        .replace(forward, "        ctx = torch.stack([head(x, mask)[0] for head in self.heads], dim=1)  # (B, h, T, d_k)\n"))
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "multihead")
    failed = {test_id: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    assert code == 1 and failed, output
    assert not any("does not import" in m for m in failed.values()), output
    assert any("qkv(x).chunk(3, dim=-1)" in m for m in failed.values()), output
    assert not any("_StandIn" in m or "NotInTheStandIn" in m for m in failed.values()), output


FOLDED_HEADS = '''
import torch.nn as nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.h, self.d_k = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.W_O = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        fold = lambda t: t.view(B, T, self.h, self.d_k).transpose(1, 2).reshape(B * self.h, T, self.d_k)
        q, k, v = (fold(t) for t in self.qkv(x).chunk(3, dim=-1))
        if mask is not None:
            mask = mask.expand(B, self.h, T, T).reshape(B * self.h, T, T)
        ctx, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.W_O(ctx.view(B, self.h, T, self.d_k).transpose(1, 2).reshape(B, T, D))
'''


def test_heads_folded_into_the_batch_pass_the_multihead_tests(tmp_path):
    """The contract fixes qkv's layout, not the shape of the attention call: a MultiHeadAttention that folds its
    heads into the batch and calls its attention once on (B * h, T, d_k) is correct (hidden: 25/25), so the
    stand-in attention of the visible tests must know those inputs too (held-out s37, dev_mh_fold_heads)."""
    sources = {**from_dir(REFERENCE), "multihead.py": FOLDED_HEADS.lstrip()}
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "multihead")
    failed = {test_id: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    assert code == 0 and not failed, "\n\n".join(f"{k}: {v}" for k, v in failed.items()) or output
    assert len(results) >= 8


HEADS_FIRST = '''
import torch.nn as nn

from self_attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        if d_model % n_heads:
            raise ValueError("n_heads must divide d_model")
        self.h, self.d_k = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        heads = lambda t: t.unflatten(-1, (self.h, self.d_k)).permute(2, 0, 1, 3)  # (h, B, T, d_k)
        q, k, v = (heads(t) for t in self.qkv(x).chunk(3, dim=-1))
        if mask is not None:
            while mask.dim() < 4:
                mask = mask.unsqueeze(0)
            mask = mask.transpose(0, 1)  # (B, h, T, T) frame -> (h, B, T, T)
        FOLD
        return self.out(ctx.permute(1, 2, 0, 3).flatten(-2))
'''
KEEP_4D = "ctx, _ = scaled_dot_product_attention(q, k, v, mask)"
FOLD_HEAD_MAJOR = (
    "q, k, v = (t.reshape(-1, T, self.d_k) for t in (q, k, v))  # (h * B, T, d_k)\n"
    "        mask = None if mask is None else mask.expand(self.h, B, T, T).reshape(-1, T, T)\n"
    "        ctx, _ = scaled_dot_product_attention(q, k, v, mask)\n"
    "        ctx = ctx.view(self.h, B, T, self.d_k)")


@pytest.mark.parametrize("call", [KEEP_4D, FOLD_HEAD_MAJOR], ids=["(h, B, T, d_k)", "(h * B, T, d_k)"])
def test_heads_on_the_leading_axis_pass_the_multihead_tests(tmp_path, call):
    """The heads may come before the batch, (h, B, T, d_k), or be folded head-major, (h * B, T, d_k): qkv's layout and
    head i's features are the contract's, and the mask is moved along with them. Correct (hidden: 25/25), so the
    stand-in attention must know those calls too (held-out s38, ana_mh_heads_first: 8 visible failures)."""
    sources = {**from_dir(REFERENCE), "multihead.py": HEADS_FIRST.lstrip().replace("FOLD", call)}
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "multihead")
    failed = {test_id: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    assert code == 0 and not failed, "\n\n".join(f"{k}: {v}" for k, v in failed.items()) or output
    assert len(results) >= 8


@pytest.mark.parametrize("edit, said", [
    ("        mask = None if mask is None else mask == 0  # True where a key is blocked\n",
     "lets through exactly the keys the given mask blocks"),
    ("        mask = None\n", "it got no mask"),
], ids=["inverted", "dropped"])
def test_right_heads_with_another_mask_are_told_the_mask_differs(tmp_path, edit, said):
    """Held-out s38 (hu_mh_mask_eq0): MultiHeadAttention turned its mask into torch's "True = blocked" form before its
    attention. Its Q, K and V were the right heads of qkv(x), yet the stand-in attention said they were not, and named
    the layout; it must say that the heads are right and the mask is not the one given."""
    sources = from_dir(REFERENCE)
    call = "        ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)\n"
    assert sources["multihead.py"].count(call) == 1, "the reference changed: update this edit"
    sources["multihead.py"] = sources["multihead.py"].replace(call, edit + call)
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "multihead")
    failed = {test_id: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    masked = [m for t, m in failed.items() if "causal_mask_blocks" in t or "padding_mask" in t]
    assert code == 1 and len(masked) == 2, output
    for message in masked:
        assert "not the heads of qkv(x)" not in message, message
        assert "the heads of qkv(x) this test expects, but not the mask" in message and said in message, message

    assert all("pass the mask on as it is" in m for m in masked), masked  # the heads as the handout lays them out


@pytest.mark.parametrize("fold, said", [
    ("", "fold the mask the same way: expand it to (B, h, T, T) first"),
    ("mask = mask.expand(B, self.h, T, T).transpose(0, 1).reshape(B * self.h, T, T)",
     "fold the mask the same way: expand it to (B, h, T, T) first"),
], ids=["passed_as_it_is", "folded_head_major"])
def test_heads_folded_with_another_mask_are_told_to_fold_the_mask_alike(tmp_path, fold, said):
    """Held-out s55 (b1): heads folded into the batch, batch-major, and the mask passed on unchanged (it cannot reach
    (B*h, T, T) scores) or folded in another order. The visible test said "pass the mask on as it is", which was the
    student's very code in one case and no fix in either: a fold's mask is folded alike."""
    mask_line = "            mask = mask.expand(B, self.h, T, T).reshape(B * self.h, T, T)\n"
    assert FOLDED_HEADS.count(mask_line) == 1
    multihead = FOLDED_HEADS.replace(mask_line, f"            {fold}\n" if fold else "            pass\n")
    sources = {**from_dir(REFERENCE), "multihead.py": multihead.lstrip()}
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "multihead")
    failed = {test_id: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    masked = [m for t, m in failed.items() if "causal_mask_blocks" in t or "padding_mask" in t]
    assert code == 1 and masked, output
    for message in masked:
        assert "but not the mask" in message and said in message, message
        assert "pass the mask on as it is" not in message, message


_GELU64 = '''

class GELU64(nn.GELU):
    """The exact GELU, computed in float64 and handed back in the input's dtype."""

    def forward(self, x):
        return super().forward(x.double()).to(x.dtype)


class TanhGELU(nn.GELU):
    def forward(self, x):
        return nn.functional.gelu(x, approximate="tanh")
'''


@pytest.mark.parametrize("layer, passes", [("GELU64()", True), ("TanhGELU()", False)])
def test_a_subclass_of_nn_gelu_is_judged_by_what_it_computes_not_its_name(tmp_path, layer, passes):
    """Held-out s40's el: the exact GELU as a subclass of nn.GELU computed in float64 (the contract's nn.GELU(), and
    "float64 inside is fine") got full hidden points but failed test_block_parts, whose layer list compared class
    names ('GELU64' is not 'GELU'). A subclass of nn.GELU is named GELU there; its numbers are still checked, so a
    subclass computing the tanh approximation fails as nn.GELU(approximate="tanh") does."""
    sources = from_dir(REFERENCE)
    text = sources["block.py"]
    assert text.count("            nn.GELU(),\n") == 1 and text.count("\n\nclass TransformerBlock") == 1
    text = text.replace("            nn.GELU(),\n", f"            {layer},\n")
    sources["block.py"] = text.replace("\n\nclass TransformerBlock", _GELU64 + "\n\nclass TransformerBlock")
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "block")
    failed = {test_id: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    if passes:
        assert code == 0 and not failed, output
    else:
        assert list(failed) == ["tests.test_block::test_block_parts"], output
        assert "the exact one, nn.GELU()" in failed["tests.test_block::test_block_parts"]


def test_layernorms_without_weights_are_told_so_not_a_crash_of_the_tests(tmp_path):
    """Held-out s40's ha: ln1 and ln2 built with elementwise_affine=False (no weight, no bias). The hidden
    block.attributes says "expected weight and bias of shape [16], got {}"; the visible test of the block's parts
    passed, and the wiring tests stopped inside their own code (`'NoneType' object has no attribute 'copy_'`),
    which tells the student nothing. The parts test now says what is missing, and the wiring tests say it too."""
    sources = from_dir(REFERENCE)
    old = "nn.LayerNorm(d_model), nn.LayerNorm(d_model)"
    assert sources["block.py"].count(old) == 1
    sources["block.py"] = sources["block.py"].replace(
        old, "nn.LayerNorm(d_model, elementwise_affine=False), nn.LayerNorm(d_model, elementwise_affine=False)")
    code, results, output = run_visible(student_folder(tmp_path, sources), "-m", "block")
    failed = {test_id: message for test_id, (outcome, message) in results.items() if outcome != "passed"}
    assert "tests.test_block::test_block_parts" in failed, output
    for test_id, message in failed.items():
        assert "NoneType" not in message, (test_id, message)
        assert "elementwise_affine" in message, (test_id, message)


def test_a_selfattention_that_unpacks_its_attentions_swapped_pair_is_judged_in_the_contracts_order(tmp_path):
    """Held-out s44 mk2: scaled_dot_product_attention returns (weights, out) and SelfAttention unpacks it that way,
    returning (out, weights). Its own tests fail; SelfAttention is right (the graders charge none of its tests), so
    the module test, which compares SelfAttention with the student's own attention, compares in the contract's order
    instead of telling them "the difference is in SelfAttention itself". A SelfAttention that hands the swapped pair
    on as it is still fails that test."""
    sources = from_dir(REFERENCE)
    swap = ("    return out, weights\n", "    return weights, out\n")
    call = "        return scaled_dot_product_attention(Q, K, V, mask)  # (B, T, d_k), (B, T, T)\n"
    assert sources["self_attention.py"].count(swap[0]) == 1 and sources["self_attention.py"].count(call) == 1
    swapped = sources["self_attention.py"].replace(*swap)
    test = "tests.test_self_attention::test_s5_module_uses_its_three_projections"
    for module, passes in ((call.replace("return", "weights, out =") + "        return out, weights\n", True),
                           (call, False)):
        folder = student_folder(tmp_path / str(passes), {**sources, "self_attention.py": swapped.replace(call, module)})
        _, results, output = run_visible(folder, "-m", "self_attention")
        assert results["tests.test_self_attention::test_shapes_rows_and_batch_dims"][0] != "passed", output
        assert (results[test][0] == "passed") is passes, results[test]
        if not passes:
            assert "the difference is in SelfAttention itself" in results[test][1], results[test]

"""A notebook is graded part by part, as .py files are (grader/intake/sections.py): each contract module made of it
runs the set-up cells, its own part's cells and the cells holding what those use, never another part's patch or demo,
and takes the name it takes from a sibling before its cells run. Through the toy lesson (tests/fixtures/lessons/toy).

Red team s47r: every module ran every cell, so one part's cell cost or paid the others, and a class body's
`staticmethod(<sibling's function>)` kept the student's own function where a .py file's import gives the stand-in."""
from __future__ import annotations

import __future__
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY, components, kept_zygotes, shared_config  # noqa: E402

from grader.intake import sections  # noqa: E402
from grader.intake import submissions as intake  # noqa: E402
from grader.judging import source_scan as scan  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402
from grader.running import grade as run  # noqa: E402

LESSON = load_lesson(str(TOY))
FIRST, SECOND = LESSON.modules  # the second is graded over the first's stand-in, and takes a name from it
SIBLING, TAKEN = LESSON.sibling_imports[SECOND]
(FUNCTION,), (CLASS,) = LESSON.graded_names[FIRST], LESSON.graded_names[SECOND]
CONFIG = shared_config(call_timeout=5.0)

SETUP = "import torch\nimport torch.nn as nn"
FUNCTION_CELL = (f"def {FUNCTION}(x, dim=-1):\n    shifted = x - x.amax(dim=dim, keepdim=True)\n"
                 "    exps = torch.exp(shifted)\n    return exps / exps.sum(dim=dim, keepdim=True)")
CLASS_CELL = (f"class {CLASS}(nn.Module):\n    def __init__(self, d_in, n_classes):\n        super().__init__()\n"
              f"        self.linear = nn.Linear(d_in, n_classes)\n\n    def forward(self, x):\n"
              f"        return {FUNCTION}(self.linear(x), dim=-1)")
# The first part's function ignores `dim` (it normalises along dim 0): wrong in both parts' tests unless the second
# part gets the grader's function, as its .py file's import does.
WRONG_DIM = FUNCTION_CELL.replace("dim=dim", "dim=0")
# The second part's class holds the function it was defined with, as a class attribute.
CAPTURING = CLASS_CELL.replace("    def __init__", f"    act = staticmethod({FUNCTION})\n\n    def __init__", 1).replace(
    f"return {FUNCTION}(self.linear(x)", "return self.act(self.linear(x)")
# A patch of the library in the first part's cell: the second part's outputs become zeros wherever it runs.
PATCH = "\n\n_forward = nn.Linear.forward\nnn.Linear.forward = lambda self, x: _forward(self, x) * 0\n"
# The first part's function calls a helper the student kept in a later cell, under the second part's.
HELPED = FUNCTION_CELL.replace("    shifted = x - x.amax(dim=dim, keepdim=True)", "    shifted = _shifted(x, dim)")
HELPER = "def _shifted(x, dim):\n    return x - x.amax(dim=dim, keepdim=True)"


def test_each_part_runs_set_up_its_own_cells_what_they_use_and_every_broken_cell():
    # The demo cell binds `x`, which the first part's function has as its parameter: not the same name.
    cells = [SETUP, HELPED, "MARK = 1  # a cell after the first part's", CAPTURING, HELPER,
             f"x = torch.zeros(2, 3)\nprint({CLASS}(3, 2)(x))", "def broken(:\n    pass"]
    facts = sections.cell_facts(cells)
    assert [f.get("broken", False) for f in facts] == [False] * 6 + [True]
    module_of = LESSON.module_of
    assert sections.sections(facts, module_of) == [None, {FIRST}, {FIRST}, {SECOND}, {SECOND}, {SECOND}, {SECOND}]
    takes = {SECOND: {TAKEN}}
    # The first part's function uses the helper of a later cell; the second part's class uses the taken name only.
    assert sections.plan(facts, module_of, takes) == {FIRST: [0, 1, 2, 4, 6], SECOND: [0, 3, 4, 5, 6]}
    # Without the sibling's name, the second part would need the first part's cell: transitively, its helper too.
    assert sections.plan(facts, module_of, {}) == {FIRST: [0, 1, 2, 4, 6], SECOND: [0, 1, 3, 4, 5, 6]}


def test_a_cell_defining_names_of_two_parts_is_in_both_and_what_binds_a_name_counts():
    cells = ["x = 1", FUNCTION_CELL + "\n\n" + CLASS_CELL, "DEMO = 2",
             f"from math import {FUNCTION}", f"{CLASS} = None", f"for {FUNCTION} in []:\n    pass",
             f"def later():\n    global {CLASS}\n    {CLASS} = 3", f"import {FUNCTION}.deep as other"]
    facts = sections.cell_facts(cells)
    both = {FIRST, SECOND}
    assert sections.sections(facts, LESSON.module_of) == [None, both, both, {FIRST}, {SECOND}, {FIRST}, {SECOND},
                                                          {SECOND}]
    # A name bound inside a function, a class body or a comprehension is not the notebook's, and a name read there is
    # the notebook's only when it is no local or parameter of its own (a method's, a comprehension's).
    inner = sections.cell_facts([f"def f(x):\n    {FUNCTION} = x\n    return {FUNCTION} + g(x)\n"
                                 f"class C:\n    {CLASS} = 2\n    k = [{CLASS} for _ in ()]\n\n    def m(self):\n"
                                 f"        return {CLASS}\ny = [{FUNCTION} for {FUNCTION} in []]\nz += 1"])[0]
    assert inner["bound"] == ["C", "f", "y", "z"]
    assert inner["loaded"] == sorted([CLASS, "g", "z"])


ANNOTATIONS = __future__.annotations.compiler_flag


def test_a_future_import_holds_for_later_cells_of_every_part_and_is_read_as_the_kernel_compiles():
    cells = [FUNCTION_CELL + "\nfrom __future__ import annotations", "from __future__ import annotations\nX = 1",
             f"def {FUNCTION}(x) -> Later:\n    return x", "from __future__ import barry_as_FLUFL",
             "ok = 1 <> 2", "ok = 1 != 2"]
    facts = sections.cell_facts(cells)
    # A future import after other code parses, but sets nothing: the cell does not compile (it raises where it runs).
    assert [fact.get("future") for fact in facts[:3]] == [0, ANNOTATIONS, 0]
    # Under barry_as_FLUFL (a cell above), `<>` parses and `!=` does not, as in the kernel.
    assert not facts[4].get("broken") and facts[5].get("broken")


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    """One class, graded through the sandbox: the reference as a notebook, and the notebooks s47r's attacks and
    honest mistakes stand for."""
    subs = tmp_path_factory.mktemp("subs")
    notebooks = {
        "control": [SETUP, FUNCTION_CELL, CLASS_CELL],
        "patch": [SETUP, FUNCTION_CELL + PATCH, CLASS_CELL],
        "early": [SETUP, WRONG_DIM, CAPTURING],
        "late": [SETUP, WRONG_DIM, CLASS_CELL],
        "helper_later": [SETUP, HELPED, CLASS_CELL, HELPER],
        # Held-out s51r: another name for the first part's (wrong) function, which the second part's class calls.
        "alias": [SETUP, WRONG_DIM + f"\n\n\nact = {FUNCTION}", CLASS_CELL.replace(f"return {FUNCTION}(", "return act(")],
    }
    for name, cells in notebooks.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(cell) for cell in cells]
        nbformat.write(nb, str(subs / f"{name}.ipynb"))
    out = tmp_path_factory.mktemp("out")
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    return {name: components(json.loads((out / name / "record.json").read_text()), LESSON.modules)
            for name in notebooks}


def test_a_patch_in_one_parts_cell_costs_no_other_part(graded):
    # Also once the child keeps a part's stand-ins while its code runs (ModuleLoader._held_elsewhere): the module the
    # intake writes of the cells is no helper module of the student's, for which the child imports the student's own
    # sibling (and so ran the first part's cells, patch and all, in the second part's process).
    assert graded["control"] == {part: (full, full) for part, (_, full) in graded["control"].items()}
    assert graded["patch"] == graded["control"]


def test_a_class_body_captures_the_siblings_name_as_a_py_files_import_gives_it(graded):
    control = graded["control"]
    assert graded["early"][FIRST][0] < control[FIRST][0], "the first part's bug costs its own tests"
    assert graded["early"] == graded["late"], "captured at definition or called by name: the same grade"
    assert graded["early"][SECOND] == control[SECOND]


def test_a_helper_in_a_later_parts_cell_is_run_for_the_part_that_calls_it(graded):
    assert graded["helper_later"] == graded["control"]


def test_another_name_for_the_siblings_function_is_the_stand_in_too(graded):
    assert graded["alias"] == graded["late"]


def test_the_intake_writes_each_part_its_cells_and_a_plain_import_sees_the_same(tmp_path):
    """Outside the sandbox (the student's own Python), importing the second part imports the first for the name it
    takes, as its .py file would: each module holds its own cells' names only, and the class body captured the
    first module's function."""
    subs = tmp_path / "subs"
    subs.mkdir()
    nb = nbformat.v4.new_notebook()
    # The first part's cell starts with a future import: it holds for the second part's cell after it, which that
    # module runs without the first part's cell (an annotation naming nothing defined is then never evaluated).
    cells = (SETUP, "from __future__ import annotations\n" + FUNCTION_CELL + "\nMINE = 1",
             CAPTURING.replace("def forward(self, x):", "def forward(self, x) -> Undefined:"), "DEMO = 2")
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, str(subs / "nina.ipynb"))
    dest = tmp_path / "scratch"
    intake.materialise(intake.discover(subs)[0], dest, lesson=LESSON)
    code = (f"import {SECOND} as second, {FIRST} as first\n"
            f"print(second.{CLASS}.__dict__['act'].__func__ is first.{FUNCTION}, hasattr(second, 'MINE'),"
            " hasattr(first, 'DEMO'), hasattr(second, 'DEMO'), second._CELL_ERRORS)")
    done = subprocess.run([sys.executable, "-c", code], cwd=dest, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "False", "True", "[]"]
    # The module the intake wrote is the one the scan reads as cells alone: its text is the intake's own.
    written = (dest / f"{LESSON.notebook_module}.py").read_bytes()
    assert scan.written_from_cells(written)
    assert not scan.written_from_cells(written.replace(b"PARTS = {", b"PARTS = {'x': [0], "))


def _materialised(tmp_path, cells):
    subs = tmp_path / "subs"
    subs.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, str(subs / "nina.ipynb"))
    dest = tmp_path / "scratch"
    return dest, intake.materialise(intake.discover(subs)[0], dest, lesson=LESSON)


def test_a_cell_too_deep_to_parse_stays_in_its_part_and_a_note_names_it(tmp_path):
    deep = "y = 1" + " + 1" * 100_000  # past the parser's recursion limit: it cannot run anywhere either
    dest, taken = _materialised(tmp_path, [SETUP, FUNCTION_CELL, deep, CLASS_CELL])
    assert taken.notebook == "nina.ipynb"
    assert [n for n in taken.notes if "code cell 3 is too large or too deeply nested" in n], taken.notes
    written = (dest / f"{LESSON.notebook_module}.py").read_text()
    assert f'PARTS = {json.dumps({FIRST: [0, 1, 2], SECOND: [0, 3]})}' in written


def test_a_notebook_whose_cells_cannot_be_cut_into_parts_within_the_limits_is_not_graded_and_says_why(tmp_path,
                                                                                                      monkeypatch):
    # Parsing is the student's to make expensive (an 8 MB cell of `x = 1` lines: 5 GB, 30 s): past the lesson's
    # [notebooks] limits, the notebook is refused as one too large to read is, never graded with every cell in
    # every part's process (which a red team would reach by a large enough cell).
    limited = intake._limited

    def out_of_time(script, *args, doing, advice, **kwargs):
        if script == "sections.py":
            raise intake.NotebookTooLarge(f"{doing} took more than 20 s of CPU time: {advice}")
        return limited(script, *args, doing=doing, advice=advice, **kwargs)

    monkeypatch.setattr(intake, "_limited", out_of_time)
    dest, taken = _materialised(tmp_path, [SETUP, FUNCTION_CELL, CLASS_CELL])
    assert taken.notebook is None and not (dest / f"{FIRST}.py").exists()
    assert [n for n in taken.notes if "could not grade the notebook nina.ipynb" in n and "split its largest" in n], \
        taken.notes


def test_a_cell_that_does_not_parse_is_named_in_every_parts_errors(tmp_path):
    # It follows the first part's cell, but it was meant to be the second part's: that part's feedback ("your
    # notebook's code cells define no class ...") names it, as it did when every part ran every cell.
    broken = CLASS_CELL.replace("(nn.Module):", "(nn.Module)", 1)
    dest, _ = _materialised(tmp_path, [SETUP, FUNCTION_CELL, broken])
    code = f"import {SECOND} as second\nprint(second._CELL_ERRORS[0][0], second._CELL_ERRORS[0][1].split(':')[0])"
    done = subprocess.run([sys.executable, "-c", code], cwd=dest, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["3", "SyntaxError"], done


def test_the_scan_charges_a_cell_to_the_part_whose_name_it_binds_as_the_sections_do(tmp_path):
    # Before, only a def or a class made a cell a part's: a cell binding the contract's name to the library's own
    # function by an import charged no part (the sections and the scan now read a cell's names with one function).
    cells = [SETUP, f"from torch.nn.functional import {FUNCTION}", CLASS_CELL]
    folder = tmp_path / "copy"
    folder.mkdir()
    (folder / f"{LESSON.notebook_module}.py").write_text(intake.notebook_module_source("nina.ipynb", cells))
    from grader.judging import score

    assert score.static_forbidden(folder, lesson=LESSON) == {LESSON.file_of[FIRST]: {FUNCTION}}


# Held-out s49r: three honest notebooks the cut gave a false "wrong". Parts and names here are the test's own.
PARTS = {"f": "A", "g": "B", "h": "C"}


def test_a_name_read_at_a_cells_top_level_comes_from_the_last_cell_binding_it_before_not_a_later_one():
    # nb_pull_dtype: the second part's demo reads the `x` the first part's demo made; the last part's demo sets float64
    # and makes another `x`. Every binder of `x` was pulled in, so the float64 demo ran in the second part's process.
    cells = ["import torch", "def f(t):\n    return t", "x = torch.ones(2)", "def g(t):\n    return t",
             "print(g(x))", "def h(t):\n    return t", "torch.set_default_dtype(torch.float64)\nx = torch.zeros(2)"]
    plan = sections.plan(sections.cell_facts(cells), PARTS, {})
    assert plan["B"] == [0, 2, 3, 4], plan
    # A function body reads its globals when it is called, after every cell ran: the last cell binding one is pulled.
    late = cells[:2] + ["OFFSET = 1", "def g(t):\n    return t + OFFSET", "def h(t):\n    return t", "OFFSET = 2"]
    assert sections.plan(sections.cell_facts(late), PARTS, {})["B"] == [0, 3, 5]


def test_a_cell_importing_a_contract_name_from_a_parts_module_is_not_in_that_parts_section():
    # nb_copied_imports: the .py files pasted whole as cells, their imports kept. The third file's cell imports the
    # second part's name from its module, which put it, and the float64 demo after it, into the second part.
    cells = ["import torch", "def f(t):\n    return t", "from A import f\n\n\ndef g(t):\n    return f(t)",
             "from B import g\n\n\ndef h(t):\n    return g(t)", "torch.set_default_dtype(torch.float64)"]
    facts = sections.cell_facts(cells, parts=set(PARTS.values()))
    assert sections.sections(facts, PARTS) == [None, {"A"}, {"B"}, {"C"}, {"C"}]


def test_a_star_import_of_a_module_the_notebook_holds_binds_what_that_module_defines():
    # nb_star: `%%writefile impl.py` (the second part's class), then `from impl import *`. The star bound nothing as
    # far as the cut could tell, so the second part ran none of its cells and was told it defines no class.
    cells = ["import torch", "def f(t):\n    return t", "from impl import *", "print(g(1))"]
    facts = sections.cell_facts(cells, modules={"impl": "import torch\n\n\ndef g(t):\n    return t\n_private = 1\n"})
    assert "g" in facts[2]["bound"] and "_private" not in facts[2]["bound"]
    assert sections.sections(facts, PARTS) == [None, {"A"}, {"B"}, {"B"}]
    # A module that says what its star gives (__all__) gives that.
    facts = sections.cell_facts(cells, modules={"impl": "__all__ = ['g2']\n\n\ndef g(t):\n    return t\n"})
    assert facts[2]["bound"] == ["g2"]


def test_what_a_cell_reads_comes_from_where_it_stands_not_from_any_chosen_cell():
    # Held-out s50r: nb_reimport. The first part's cell imports `nn`; the second part's class cell reads it as it runs,
    # and the demo *below* that class cell imports `nn` again. A binding below a reader does not give it its value:
    # the first cell must still run for the second part.
    cells = ["def f(t):\n    return t\nimport math as m", "print(f(1))", "class g:\n    k = m.pi",
             "import math as m\nprint(g.k)"]
    assert sections.plan(sections.cell_facts(cells), PARTS, {})["B"] == [0, 2, 3]
    # s50r: nb_draft. A set-up cell's first draft of a helper raises; the fixed one is in the first part's cell. A
    # function reads it when called, after every cell ran: the last cell binding it, even when a chosen cell binds it.
    draft = ["def split(t):\n    raise NotImplementedError", "def f(t):\n    return t\n\n\ndef split(t):\n    return t",
             "def g(t):\n    return split(t)"]
    assert sections.plan(sections.cell_facts(draft), PARTS, {})["B"] == [0, 1, 2]


def test_imports_spelled_otherwise_comprehensions_augmented_names_and_library_stars_are_read_as_the_kernel_runs():
    # Held-out s51r. Each: the first part's cells, the second part's, and a last demo (its own part's) that sets
    # float64 and binds the names again: it must run in no other part.
    last = "torch.set_default_dtype(torch.float64)\nfrom torch.nn import functional as F\nT = 3\nCONFIG = {}"
    spelled = ["import torch\nimport torch.nn.functional as F", "def f(t):\n    return F.softmax(t, -1)",
               "def g(t):\n    return t", "def h(t):\n    return t", last]
    assert sections.plan(sections.cell_facts(spelled), PARTS, {})["A"] == [0, 1]
    comprehension = ["import torch", "def f(t):\n    return t", "T = 2", "def g(t):\n    return t",
                     "print([g(t) for t in range(T)])", "def h(t):\n    return t", last]
    assert sections.plan(sections.cell_facts(comprehension), PARTS, {})["B"] == [0, 2, 3, 4]
    changed = ["import torch", "def f(t):\n    return t", "CONFIG = {}", "def g(t):\n    return t",
               "CONFIG |= {'bias': True}", "def h(t):\n    return t", last]
    assert sections.plan(sections.cell_facts(changed), PARTS, {})["B"] == [0, 2, 3, 4]
    star = ["import torch", "def f(t):\n    return t", "from math import *\n\n\ndef g(t):\n    return t",
            "def h(t):\n    return log(t)"]
    assert sections.plan(sections.cell_facts(star), PARTS, {})["C"] == [0, 2, 3]


def test_a_walrus_in_a_comprehension_and_names_bound_at_run_time_reach_the_part_that_reads_them():
    # Held-out s52. nb_walrus: `[(EPS := e) for e in ...]` at a cell's top level binds EPS in the notebook's namespace
    # (PEP 572), which the cut did not see: the part whose class reads EPS ran without that cell (NameError, 0 points).
    walrus = ["import torch", "def f(t):\n    return t", "def g(t):\n    return t\n[(EPS := e) for e in (1e-6, 1e-5)]",
              "class h:\n    def __init__(self):\n        self.eps = EPS", "print(h().eps)"]
    facts = sections.cell_facts(walrus)
    assert "EPS" in facts[2]["bound"] and "e" not in facts[2]["bound"]
    assert sections.plan(facts, PARTS, {})["C"] == [0, 2, 3, 4]
    # Its own scope's: a walrus in a lambda or a function binds nothing of the notebook's.
    assert sections.bound_names(compile("k = lambda: (Y := 1)\ndef m():\n    [(Z := i) for i in ()]", "c", "exec",
                                        0x400)) == {"k", "m"}
    # nb_globals_dict, nb_exec: helpers bound through globals() or exec, which no static reading sees. A name no cell
    # is seen to bind comes from every cell that binds names so, as from a library's star import.
    for binding in ("globals()['split'] = lambda t: t", "exec('def split(t):\\n    return t')",
                    "globals().update(split=lambda t: t)", "vars()['split'] = lambda t: t"):
        cells = ["import torch", f"def f(t):\n    return t\n{binding}", "print(f(1))", "def g(t):\n    return split(t)",
                 "print(g(1))"]
        assert sections.plan(sections.cell_facts(cells), PARTS, {})["B"] == [0, 1, 3, 4], binding
    # A name some cell binds plainly comes from that cell alone: a cell that runs exec is not pulled in for it; nor
    # for a builtin (`len`, `print`), which every part reads and no cell binds; nor is a library's star import.
    plain = ["import torch", "def f(t):\n    return t\nexec('pass')\nfrom math import *", "def split(t):\n    return t",
             "def g(t):\n    print(len(t))\n    return split(t)"]
    assert sections.plan(sections.cell_facts(plain), PARTS, {})["B"] == [0, 2, 3]
    # Red team s53r: names the kernel gives that are not in the builtins of the cut's own process (`python -I -S`:
    # site's help, exit and quit; IPython's display, get_ipython), and a run-time cell that never mentions the name:
    # neither pulls a run-time cell in (nb_help_f64: a float64 demo calling vars() ran in every part that calls help).
    last = "torch.set_default_dtype(torch.float64)\nprint(vars(g))"
    kernel = ["import torch", "def f(t):\n    help(f)\n    display(t)\n    return get_ipython, exit, quit",
              "def g(t):\n    return t", last]
    assert sections.plan(sections.cell_facts(kernel), PARTS, {})["A"] == [0, 1]
    unnamed = ["import torch", "def f(t):\n    return undefined_helper(t)", "def g(t):\n    return t", last]
    assert sections.plan(sections.cell_facts(unnamed), PARTS, {})["A"] == [0, 1]

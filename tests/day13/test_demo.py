"""The bundled demo class (demo/class/): what demo/README.md promises is what is there.

Grading it end to end is `make grade` (and the engine's tests); these checks are static and fast.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import zipfile
from pathlib import Path

import nbformat
from PIL import Image
from grader.lesson import load_lesson  # noqa: E402

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "class"
CONTRACT = {"scaled_dot_product_attention", "causal_mask", "SelfAttention", "MultiHeadAttention",
            "positional_encoding", "PositionalEncoding", "TransformerBlock"}


def test_readme_table_lists_exactly_the_demo_submissions():
    table = re.findall(r"^\| `([^`]+)` \|", (ROOT / "demo" / "README.md").read_text(), flags=re.M)
    # collected.csv is the class's lateness (as `grader collect` writes it), not a submission.
    on_disk = sorted(p.name + ("/" if p.is_dir() else "") for p in DEMO.iterdir() if p.name != "collected.csv")
    assert sorted(table) == on_disk
    assert len(on_disk) >= 12


def test_notebook_has_magics_to_neutralise_and_defines_the_contract():
    notebook = nbformat.read(DEMO / "jun_notebook.ipynb", as_version=4)
    lines = [line for cell in notebook.cells if cell.cell_type == "code" for line in cell.source.splitlines()]
    assert "%matplotlib inline" in lines and any(line.startswith("!pip install") for line in lines)
    code = "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line for line in lines)
    defined = {node.name for node in ast.walk(ast.parse(code))
               if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert CONTRACT <= defined


def test_zip_holds_one_top_level_folder_with_the_four_files():
    with zipfile.ZipFile(DEMO / "kim_zip.zip") as archive:
        names = archive.namelist()
    assert {n.split("/")[0] for n in names} == {"day13"}
    assert {f"day13/{m}.py" for m in ("self_attention", "multihead", "positional", "block")} <= set(names)


def test_faulty_students_carry_their_fault_in_the_files():
    with_syntax_error = DEMO / "leo_syntax_error" / "positional.py"
    try:
        compile(with_syntax_error.read_text(), str(with_syntax_error), "exec")
        raise AssertionError("leo's positional.py should not compile")
    except SyntaxError:
        pass
    cheat = (DEMO / "noah_cheater" / "block.py").read_text()
    assert "results.json" in cheat and "30 passed" in cheat and "sys.exit(0)" in cheat
    stubs = [p for p in (DEMO / "hana_partial").glob("*.py") if "raise NotImplementedError" in p.read_text()]
    assert sorted(p.stem for p in stubs) == ["block", "multihead", "positional"]
    assert [p.name for p in (DEMO / "ivan_empty").iterdir()] == ["README.md"]


def test_committed_binaries_are_what_the_build_script_makes(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("build_demo_files", ROOT / "demo" / "build_demo_files.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    copy = tmp_path / "class"
    shutil.copytree(DEMO, copy)
    binaries = [p for p in copy.rglob("*") if p.suffix in (".png", ".jpg", ".npy", ".zip", ".ipynb")]
    for p in binaries:
        p.unlink()
    monkeypatch.setattr(build, "DEMO", copy)
    build.write_deliverables()
    build.write_zip()
    build.write_notebook()
    # Exact bytes where no renderer is involved; images only by size, since another
    # matplotlib or FreeType version may draw a pixel differently.
    for p in binaries:
        committed = DEMO / p.relative_to(copy)
        if p.suffix in (".npy", ".ipynb"):
            assert p.read_bytes() == committed.read_bytes(), p.relative_to(copy)
        elif p.suffix == ".zip":
            with zipfile.ZipFile(p) as new, zipfile.ZipFile(committed) as old:
                assert new.namelist() == old.namelist()
                for name in new.namelist():
                    if not name.endswith(".png"):
                        assert new.read(name) == old.read(name), name
        else:
            with Image.open(p) as new, Image.open(committed) as old:
                assert (new.format, new.size) == (old.format, old.size), p.relative_to(copy)


def test_similarity_flags_exactly_the_planted_pair(tmp_path):
    """The demo's students wrote their own code, prose and pictures: the one pair the check may flag is
    the copy planted on purpose (noah's heatmap is ada's file). When the demo students were the
    reference with one bug each, this flagged 88 rows and buried that pair."""
    from grader.intake import submissions as intake
    from grader.admin import similarity
    from grader.lesson import load_lesson

    base = similarity.load_base(DAY13, released_notebook=lambda: similarity.released_notebook_code(DAY13))
    rows = similarity.run(subs=intake.discover(DEMO), out=tmp_path, base=base, jobs=2)
    flagged = [(r.a, r.b, r.kind) for r in rows if r.flagged]
    assert flagged == [("ada_reference", "noah_cheater", "image")], flagged
    # Honest pairs stay clear of the thresholds, so a small change to a demo file does not tip one over.
    honest = [r for r in rows if not r.flagged]
    assert max(r.score for r in honest if r.kind == "code") <= similarity.FILE_THRESHOLD - 0.2


def test_roster_lateness_and_regrade_request_name_demo_submissions():
    """demo/roster.csv (one pair), demo/class/collected.csv (one late student) and
    demo/regrade_requests.csv name submissions the demo has, so `make grade` takes them as they are."""
    import csv

    from grader.admin import regrade_requests

    from grader.intake import roster

    names = {p.name[:-4] if p.suffix == ".zip" else p.stem if p.suffix == ".ipynb" else p.name
             for p in DEMO.iterdir() if p.name != "collected.csv"}
    people = roster.read(ROOT / "demo" / "roster.csv")
    assert {s.submission for s in people.students} == names
    groups = {}
    for s in people.students:
        if s.group:
            groups.setdefault(s.group, set()).add(s.submission)
    assert groups == {"kim-lena": {"kim_zip"}}
    with open(DEMO / "collected.csv", encoding="utf-8", newline="") as handle:
        late = {row["name"]: int(row["late_days"]) for row in csv.DictReader(handle)}
    assert set(late) == names and {n for n, days in late.items() if days} == {"gabe_ln_swapped"}
    requests = regrade_requests.read(ROOT / "demo" / "regrade_requests.csv")
    assert [(r.student, r.test) for r in requests] == [("chloe_no_scale", "self_attention")]


def test_the_code_view_reads_a_notebook_and_a_zip_as_grading_does():
    """The review page's code view (grader/admin/codeview.py) over the demo class's notebook and zip, read as
    grading reads them (moved from the engine's test_review: it reads this lesson's demo class)."""
    from grader.admin import codeview

    lesson, demo = DAY13, DEMO
    notebook = codeview.graded_files(codeview.submission_of("jun", demo / "jun_notebook.ipynb"), stubs={},
                                     lesson=lesson, released_cells=lambda: ["# the released cell"])
    assert [f.name for f in notebook] == ["jun_notebook.ipynb"]
    lines = notebook[0].lines
    assert lines[0] == "# In[1]" and any(line.startswith("def scaled_dot_product_attention") for line in lines)
    assert not any(line.lstrip().startswith(("!", "%")) for line in lines)  # magics neutralised, as graded
    assert notebook[0].stub == "# In[1]\n# the released cell"
    archive = codeview.graded_files(codeview.submission_of("kim", demo / "kim_zip.zip"), stubs={"block.py": "stub"},
                                    lesson=lesson)
    names = [f.name for f in archive]
    assert names[:4] == ["self_attention.py", "multihead.py", "positional.py", "block.py"]
    assert next(f for f in archive if f.name == "block.py").stub == "stub"
    assert codeview.submission_of("x", demo / "README.md") is None

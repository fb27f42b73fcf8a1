"""grader/intake/submissions.py: discovery, scratch copies that never follow a symlink out, zips, notebooks."""
import io
import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.intake import submissions as intake
from grader.intake.submissions import IntakeLimits, discover, materialise, neutralise_magics

from grader.lesson import load_lesson  # noqa: E402

from engine_helpers import TOY  # noqa: E402

LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage: the toy's
SOLUTIONS = LESSON.solutions
FIRST = LESSON.modules[0]  # a contract module's file name, where one is needed


def _mkdirs(root, names):
    for n in names:
        (root / n).mkdir()
        (root / n / f"{FIRST}.py").write_text("x = 1\n")


def test_discover_kinds_names_and_stable_order(tmp_path):
    _mkdirs(tmp_path, ["bob", "alice", "Ann Lee (late)"])
    (tmp_path / "carol.zip").write_bytes(b"")
    (tmp_path / "dave.ipynb").write_text("{}")
    (tmp_path / "notes.txt").write_text("not a submission")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "eve").symlink_to(tmp_path / "alice")
    subs = discover(tmp_path)
    assert [(s.name, s.kind) for s in subs] == [
        ("Ann_Lee_late", "folder"), ("alice", "folder"), ("bob", "folder"),
        ("carol", "zip"), ("dave", "notebook"), ("eve", "symlink")]
    assert discover(tmp_path) == subs


def test_row_names_are_unique_even_when_sanitising_collides(tmp_path):
    _mkdirs(tmp_path, ["a b", "a_b", "a?b"])
    (tmp_path / "A_B.zip").write_bytes(b"")
    names = [s.name for s in discover(tmp_path)]
    assert len({n.lower() for n in names}) == 4
    assert all(n.replace("-", "_").replace("_", "").isalnum() for n in names)


def test_discover_refuses_a_file(tmp_path):
    f = tmp_path / "x"
    f.write_text("")
    with pytest.raises(NotADirectoryError, match="folder of submissions"):
        discover(f)


def test_folder_copy_skips_symlinks_and_records_them(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the answers")
    sub = tmp_path / "subs" / "mallory"
    (sub / "pkg").mkdir(parents=True)
    (sub / f"{FIRST}.py").write_text("A = 1\n")
    (sub / "pkg" / "helper.py").write_text("B = 2\n")
    (sub / "answers.txt").symlink_to(secret)
    (sub / "pkg" / "up").symlink_to(tmp_path)
    (sub / "__pycache__").mkdir()
    (sub / "__pycache__" / "x.pyc").write_bytes(b"\0")
    dest = tmp_path / "scratch"
    result = materialise(discover(tmp_path / "subs")[0], dest, lesson=LESSON)
    assert (dest / f"{FIRST}.py").read_text() == "A = 1\n"
    assert (dest / "pkg" / "helper.py").read_text() == "B = 2\n"
    assert not (dest / "answers.txt").exists() and not (dest / "pkg" / "up").exists()
    assert not (dest / "__pycache__").exists()
    assert any("answers.txt" in n and "symlink" in n for n in result.notes)
    assert any("pkg/up" in n for n in result.notes)
    for path in dest.rglob("*"):
        assert not path.is_symlink()


def test_top_level_symlink_gets_a_row_with_the_reason(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "x").symlink_to(tmp_path / "elsewhere")
    sub = discover(tmp_path / "subs")[0]
    result = materialise(sub, tmp_path / "scratch", lesson=LESSON)
    assert sub.kind == "symlink" and "never follows a symlink" in result.notes[0]
    assert list((tmp_path / "scratch").iterdir()) == []


def test_caps_on_file_size_and_count(tmp_path):
    sub = tmp_path / "subs" / "big"
    sub.mkdir(parents=True)
    (sub / "a_huge.bin").write_bytes(b"\0" * 3000)
    for i in range(5):
        (sub / f"f{i}.py").write_text("x")
    dest = tmp_path / "scratch"
    result = materialise(discover(tmp_path / "subs")[0], dest,
                         limits=IntakeLimits(max_files=3, max_file_bytes=1000), lesson=LESSON)
    assert not (dest / "a_huge.bin").exists()
    assert len(list(dest.iterdir())) == 3
    assert any("larger than" in n for n in result.notes) and any("more than 3 files" in n for n in result.notes)


def _zip(path, entries, *, symlink=None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink[0])
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, symlink[1])


def test_zip_with_one_top_folder_is_unwrapped(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _zip(subs / "zoe.zip", {f"hw1/{FIRST}.py": "A = 1\n", "hw1/sub/x.py": "B = 2\n",
                            f"__MACOSX/hw1/._{FIRST}.py": "junk"})
    dest = tmp_path / "scratch"
    result = materialise(discover(subs)[0], dest, lesson=LESSON)
    assert (dest / f"{FIRST}.py").read_text() == "A = 1\n"
    assert (dest / "sub" / "x.py").read_text() == "B = 2\n"
    assert not (dest / "__MACOSX").exists() and result.notes == []


def test_zip_traversal_symlinks_and_absolute_paths_are_refused(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _zip(subs / "evil.zip", {"../escape.py": "x", "/abs.py": "x", "ok.py": "fine", "a/../../b.py": "x"},
         symlink=("link.py", "/etc/passwd"))
    dest = tmp_path / "work" / "scratch"
    result = materialise(discover(subs)[0], dest, lesson=LESSON)
    assert sorted(p.name for p in dest.rglob("*")) == ["ok.py"]
    assert not (tmp_path / "work" / "escape.py").exists() and not (tmp_path / "escape.py").exists()
    assert sum("leaves the submission" in n for n in result.notes) == 3
    assert any("symlink" in n for n in result.notes)


def test_zip_bomb_is_refused_by_declared_size_and_ratio(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _zip(subs / "bomb.zip", {"zeros.bin": b"\0" * (30 << 20)})
    dest = tmp_path / "scratch"
    result = materialise(discover(subs)[0], dest, limits=IntakeLimits(max_total_bytes=10 << 20), lesson=LESSON)
    assert list(dest.iterdir()) == [] and "zip bomb" in result.notes[0]
    result = materialise(discover(subs)[0], tmp_path / "s2", lesson=LESSON)
    assert not (tmp_path / "s2" / "zeros.bin").exists() and "zip bomb" in result.notes[0]


def test_corrupt_zip_is_a_note_not_a_crash(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "broken.zip").write_bytes(b"PK\x03\x04 not really")
    result = materialise(discover(subs)[0], tmp_path / "scratch", lesson=LESSON)
    assert "not a readable zip" in result.notes[0]


def _zip_named(path, entries, *, create_system=0):
    """A zip whose entry names are written exactly as given: Python's zipfile would turn "\\" into "/"
    only on Windows. create_system=0 (MS-DOS/Windows) is what Windows PowerShell 5.1's Compress-Archive
    records, with names like hw13\\README.md; a name ending in a separator is a folder entry."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 12, 1, 12, 0, 0))
            info.create_system = create_system
            z.writestr(info, data)
    with zipfile.ZipFile(path) as z:  # what the intake reads back: the names as written
        assert [m.filename for m in z.infolist()] == list(entries)


def _copied(dest):
    return {p.relative_to(dest).as_posix(): p.read_text() for p in sorted(dest.rglob("*")) if p.is_file()}


HW13 = {f"{FIRST}.py": "A = 1\n", "README.md": "# mine\n", "sub/x.py": "B = 2\n"}


@pytest.mark.parametrize("create_system", [0, 3])
def test_a_powershell_zip_with_backslashes_is_graded_like_its_folder(tmp_path, create_system):
    # Compress-Archive (Windows PowerShell 5.1) writes hw13\README.md: one top folder, "\" between names.
    # The same names with another made-by system (3, Unix) are read the same way: see _entry_path.
    folder = tmp_path / "folders" / "hw13"
    for rel, text in HW13.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    subs = tmp_path / "subs"
    subs.mkdir()
    _zip_named(subs / "zoe.zip", {"hw13\\": "", "hw13\\sub\\": "", "hw13\\empty\\": "",
                                  **{"hw13\\" + rel.replace("/", "\\"): text for rel, text in HW13.items()}},
               create_system=create_system)
    as_folder = materialise(discover(tmp_path / "folders")[0], tmp_path / "from-folder", lesson=LESSON)
    as_zip = materialise(discover(subs)[0], tmp_path / "from-zip", lesson=LESSON)
    assert _copied(tmp_path / "from-zip") == _copied(tmp_path / "from-folder") == HW13
    assert as_zip.notes == as_folder.notes == []
    assert (as_zip.files, as_zip.bytes) == (as_folder.files, as_folder.bytes)


def test_a_zip_of_backslash_names_at_its_root_keeps_its_folders(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _zip_named(subs / "zoe.zip", {rel.replace("/", "\\"): text for rel, text in HW13.items()})
    result = materialise(discover(subs)[0], tmp_path / "scratch", lesson=LESSON)
    assert _copied(tmp_path / "scratch") == HW13 and result.notes == []


@pytest.mark.parametrize("names", [
    ["./", "./hw13/", *(f"./hw13/{rel}" for rel in HW13)],  # Windows `tar -a -cf hw13.zip ./hw13`
    [f"./hw13/{FIRST}.py", "hw13/README.md", "hw13/sub/x.py"],  # some entries with "./", some without
    [f".//hw13//{FIRST}.py", "hw13/./README.md", ".\\hw13\\sub\\x.py"],  # repeated and mixed separators
], ids=["tar", "mixed", "repeated"])
def test_a_zip_of_dot_slash_names_is_unwrapped_like_any_other(tmp_path, names):
    subs = tmp_path / "subs"
    subs.mkdir()
    texts = iter(HW13.values())
    _zip_named(subs / "zoe.zip", {n: "" if n.endswith("/") else next(texts) for n in names})
    result = materialise(discover(subs)[0], tmp_path / "scratch", lesson=LESSON)
    assert _copied(tmp_path / "scratch") == HW13 and result.notes == []


def test_backslash_names_that_leave_the_submission_are_still_refused(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _zip_named(subs / "evil.zip", {"..\\..\\x.py": "x", "C:\\x.py": "x", "\\x.py": "x",
                                   "hw13\\..\\..\\up.py": "x", "hw13\\ok.py": "fine",
                                   "hw13\\sub\\..\\..\\..\\y.py": "x", ".\\..\\z.py": "x"})
    dest = tmp_path / "work" / "scratch"
    result = materialise(discover(subs)[0], dest, lesson=LESSON)
    assert _copied(dest) == {"hw13/ok.py": "fine"}
    assert os.listdir(tmp_path / "work") == ["scratch"] and sorted(os.listdir(tmp_path)) == ["subs", "work"]
    refused = [n for n in result.notes if "leaves the submission" in n]
    assert len(refused) == len(result.notes) == 6
    assert any("refused zip entry ..\\..\\x.py:" in n for n in refused)  # notes name the entry as the zip holds it


@pytest.mark.parametrize("names", [
    ["..\\x.py"], ["../hw13/a.py", "../hw13/b.py"], ["C:\\hw13\\a.py"], ["\\hw13\\a.py"], ["/hw13/a.py"],
    ["C:/hw13/a.py"],
])
def test_a_top_folder_that_is_no_folder_is_not_stripped_away(tmp_path, names):
    # Every entry under the same "..", drive or root must not make that the one top folder to unwrap:
    # the names stay as they are and are refused.
    subs = tmp_path / "subs"
    subs.mkdir()
    _zip_named(subs / "evil.zip", dict.fromkeys(names, "x"))
    dest = tmp_path / "work" / "scratch"
    result = materialise(discover(subs)[0], dest, lesson=LESSON)
    assert list(dest.rglob("*")) == [] and sorted(os.listdir(tmp_path / "work")) == ["scratch"]
    assert len(result.notes) == len(names) and all("leaves the submission" in n for n in result.notes)


def test_archiver_junk_with_backslashes_is_still_ignored(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _zip_named(subs / "zoe.zip", {f"__MACOSX\\hw13\\._{FIRST}.py": "junk", "hw13\\.DS_Store": "junk",
                                  "hw13\\__pycache__\\x.cpython-311.pyc": "junk",
                                  **{"hw13\\" + rel.replace("/", "\\"): text for rel, text in HW13.items()}})
    result = materialise(discover(subs)[0], tmp_path / "scratch", lesson=LESSON)
    assert _copied(tmp_path / "scratch") == HW13 and result.notes == []


@pytest.mark.parametrize("names", [["hw13/a", "hw13/a/b.py"], ["hw13/a/b.py", "hw13/a"], ["hw13\\a", "hw13\\a\\b.py"]],
                         ids=["file-first", "folder-first", "backslashes"])
def test_a_file_and_a_folder_of_the_same_path_are_a_note_not_a_crash(tmp_path, names):
    # No folder can hold both; the entry that comes second is refused, the rest of the zip is graded.
    subs = tmp_path / "subs"
    subs.mkdir()
    _zip_named(subs / "zoe.zip", {**dict.fromkeys(names, "x"), f"hw13/{FIRST}.py": "A = 1\n"})
    result = materialise(discover(subs)[0], tmp_path / "scratch", lesson=LESSON)
    first = names[0].replace("\\", "/").removeprefix("hw13/")
    assert _copied(tmp_path / "scratch") == {first: "x", f"{FIRST}.py": "A = 1\n"}
    assert len(result.notes) == 1 and result.notes[0].startswith(f"refused zip entry {names[1]}: ")
    assert result.files == 2


@pytest.mark.parametrize("src, want", [
    ("%matplotlib inline\nx = 1", "pass  # neutralised: %matplotlib inline\nx = 1"),
    ("!pip install torch\nif True:\n    !ls", "pass  # neutralised: !pip install torch\nif True:\n    pass  # neutralised: !ls"),
    ("files = !ls\ny = 2", "files = None  # neutralised: ls\ny = 2"),
    ("%%bash\necho hi\nls", "pass  # neutralised: %%bash\n#echo hi\n#ls"),
    ("%%capture\nz = 3", "pass  # neutralised: %%capture\nz = 3"),
    ("a = 5 % 2\nb = a != 1", "a = 5 % 2\nb = a != 1"),
    # IPython's help syntax, before or after a name (held-out notebooks lost whole cells to a SyntaxError).
    ("?torch.softmax\ndef f():\n    return 1", "pass  # neutralised: ?torch.softmax\ndef f():\n    return 1"),
    ("x = 1\nnn.LayerNorm?", "x = 1\npass  # neutralised: nn.LayerNorm?"),
    ("??torch.tril\nif True:\n    torch.*mask*?", "pass  # neutralised: ??torch.tril\nif True:\n    pass  # neutralised: torch.*mask*?"),
    ('print("why?")\nq = "?x"', 'print("why?")\nq = "?x"'),
    # A line inside brackets, a string or a backslash continuation is Python, whatever it starts with
    # (PEP 8 breaks before an operator).
    ('print("PE: %d rows"\n      % 5)', 'print("PE: %d rows"\n      % 5)'),
    ("y = (1\n     != 2)", "y = (1\n     != 2)"),
    ("z = [1,  # a comment with a (\n     2]\n%time z", "z = [1,  # a comment with a (\n     2]\nz"),
    # %time runs its statement in the notebook's namespace, as Jupyter does: a name it assigns is there for the lines
    # after it (a held-out notebook timed its table, printed it, then defined a class in the same cell, which was lost).
    ("%time table = build(5000)\nprint(table.shape)", "table = build(5000)\nprint(table.shape)"),
    ("if True:\n    %time y = 2\nz = y", "if True:\n    y = 2\nz = y"),
    ("t = %time 3 + 4", "t = 3 + 4"),
    # %timeit runs its statement in a namespace of its own (nothing it assigns is kept), and a statement that is not
    # whole on its line is no statement: both stay neutralised.
    ("%timeit y = 2", "pass  # neutralised: %timeit y = 2"),
    ("%time x = (1,", "pass  # neutralised: %time x = (1,"),
    ("%time", "pass  # neutralised: %time"),
    ("s = \"\"\"\n%not a magic\n!nor this\n\"\"\"\n!ls", "s = \"\"\"\n%not a magic\n!nor this\n\"\"\"\npass  # neutralised: !ls"),
    ("t = 7 \\\n    % 4\n%who", "t = 7 \\\n    % 4\npass  # neutralised: %who"),
    ("r = ')'\n!ls", "r = ')'\npass  # neutralised: !ls"),
    ("u = 1  # a comment ending in \\\n!ls", "u = 1  # a comment ending in \\\npass  # neutralised: !ls"),
    # A shell line continued with a backslash is one command: its next line goes with it.
    ("!pip install \\\n    torch\nx = 1", "pass  # neutralised: !pip install \\\n#    torch\nx = 1"),
    # A magic as a notebook exported to a script and back writes it (held-out s57: NameError, 10/100).
    ("get_ipython().run_line_magic('matplotlib', 'inline')\nimport math",
     "pass  # neutralised: get_ipython().run_line_magic('matplotlib', 'inline')\nimport math"),
    ("files = get_ipython().getoutput('ls')", "files = None  # neutralised: get_ipython().getoutput('ls')"),
    ("if x:\n    get_ipython().system('pip install torch')", "if x:\n    pass  # neutralised: get_ipython().system('pip install torch')"),
    # %run of a file of the notebook's folder brings its names in, as Jupyter does (held-out s57).
    ("%run helpers.py\nx = split(1)", "from helpers import *  # %run helpers.py\nx = split(1)"),
    ("%run -i helpers.py", "pass  # neutralised: %run -i helpers.py"),
    # Not a whole statement, or not the magic machinery: Python, left as it is.
    ("shell = get_ipython\ny = (1,\nget_ipython().system('x'))", "shell = get_ipython\ny = (1,\nget_ipython().system('x'))"),
])
def test_magics_are_neutralised_keeping_line_numbers(src, want):
    got = neutralise_magics(src)
    assert got == want
    assert got.count("\n") == src.count("\n")
    compile(got, "cell", "exec")


def _notebook(path, cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Homework")] + [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, str(path))
    return path


def reference_notebook_cells():
    cells = ["%matplotlib inline\n!pip install torch", "raise RuntimeError('a broken cell')"]
    for name in LESSON.modules:
        src = (SOLUTIONS / f"{name}.py").read_text()
        # In a notebook the sibling imports are unnecessary: every name is global.
        cells.append("\n".join(l for l in src.splitlines()
                               if not l.startswith(tuple(f"from {m} " for m in LESSON.modules))))
    return cells


def test_notebook_becomes_the_contract_modules(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _notebook(subs / "nina.ipynb", reference_notebook_cells())
    dest = tmp_path / "scratch"
    sub = discover(subs)[0]
    result = materialise(sub, dest, lesson=LESSON)
    assert sub.name == "nina" and result.notebook == "nina.ipynb"
    for m in LESSON.modules:
        assert (dest / f"{m}.py").exists()
    # Import in a fresh interpreter: the broken cell must not lose the later definitions, and the
    # module graded over a sibling sees the sibling's name as the sibling module's own.
    code = ("import torch, activations, classifier\n"
            "torch.manual_seed(0)\n"
            "x = torch.randn(2, 5, 16)\n"
            "print(classifier.Classifier(16, 4)(x).shape, activations.softmax(torch.zeros(2, 3), dim=-1).sum().item(),"
            " classifier._CELL_ERRORS, classifier.softmax is activations.softmax)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=dest, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "torch.Size([2, 5, 4]) 2.0 [(2, 'RuntimeError: a broken cell')] True"


def _intake_of_notebook(tmp_path, cells):
    """The scratch copy intake makes of a notebook of `cells` (then the reference's code), and what it said."""
    subs = tmp_path / "subs"
    subs.mkdir()
    _notebook(subs / "nina.ipynb", cells + reference_notebook_cells()[2:])
    dest = tmp_path / "scratch"
    return dest, materialise(discover(subs)[0], dest, lesson=LESSON)


def _printed_by(dest, code: str) -> str:
    """What `code` prints, run in a fresh interpreter in the scratch copy (as a child imports it)."""
    out = subprocess.run([sys.executable, "-c", code], cwd=dest, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_cells_future_import_holds_for_the_cells_after_it_as_in_a_kernel(tmp_path):
    # Found on a held-out notebook: `from __future__ import annotations` in its first cell and `-> Block` in a later
    # one (Block defined by that cell itself). Jupyter runs it; each cell compiled on its own raised NameError, and
    # its definitions were lost. The students' CI compiled cells under its own module's future flags instead.
    from grader.intake.magics import compile_cell

    cells = ["from __future__ import annotations",
             "display('a kernel shows this; graded, display() shows nothing')\n"
             "class Block:\n    def again(self) -> Block:\n    "
             "    return self\n\ndef plain(x: int) -> int:\n    return x"]
    dest, _ = _intake_of_notebook(tmp_path, cells)
    code = f"import {LESSON.modules[0]} as m\nprint(m._CELL_ERRORS, m.Block().again() is not None, m.plain.__annotations__)"
    assert _printed_by(dest, code) == "[] True {'x': 'int', 'return': 'int'}"  # strings: the future import held

    flags = 0
    for cell in cells:
        code, flags = compile_cell(cell, "cell", flags)
    assert code.co_flags & flags
    # Without the import, a cell is compiled as a kernel compiles it, whatever the caller's own imports: eagerly.
    namespace = {"display": lambda *objects: None}
    exec(compile_cell(cells[1].replace("-> Block", "-> int"), "cell")[0], namespace)
    assert namespace["plain"].__annotations__ == {"x": int, "return": int}


def test_a_notebooks_writefile_cells_write_their_files_for_the_cells_after_them(tmp_path):
    # Found on a held-out notebook: `%%writefile attn_utils.py` in one cell, `from attn_utils import ...` in the next.
    # Restart-and-Run-All works in Jupyter; the grader neutralised the cell, and the part lost every point.
    first = LESSON.modules[0]
    cells = ["%%writefile helpers/util.py\nSCALE = 2\n", "%%writefile -a helpers/util.py\nSHIFT = 1",
             "%%writefile '../outside.py'\nx = 1", f"%%writefile {first}.py\nbroken(",
             "import sys\nsys.path.insert(0, 'helpers')\nfrom util import SCALE, SHIFT\nHELPED = SCALE + SHIFT"]
    dest, taken = _intake_of_notebook(tmp_path, cells)
    assert (dest / "helpers" / "util.py").read_text() == "SCALE = 2\nSHIFT = 1\n"
    assert not (tmp_path / "outside.py").exists() and not (dest.parent / "outside.py").exists()
    said = [n for n in taken.notes if "%%writefile" in n]
    assert len(said) == 2 and "../outside.py" in said[0] and f"{first}.py" in said[1], taken.notes
    assert _printed_by(dest, f"import {first} as m\nprint(m._CELL_ERRORS, m.HELPED)") == "[] 3"


def test_run_of_a_file_the_folder_holds_brings_its_names_in_and_of_one_it_lacks_costs_nothing(tmp_path):
    # Held-out s57: `%%writefile helpers.py`, then `%run helpers.py`: the names never came in (multihead 5/25). A
    # `%run` of a file only the student's machine had is neutralised, as every magic was.
    first = LESSON.modules[0]
    cells = ["%%writefile helpers.py\ndef twice(x):\n    return 2 * x\n", "%run helpers.py\n%run on_my_laptop.py\n"
             "HELPED = twice(3)"]
    dest, _ = _intake_of_notebook(tmp_path, cells)
    assert _printed_by(dest, f"import {first} as m\nprint(m._CELL_ERRORS, m.HELPED)") == "[] 6"


def test_a_failing_cell_is_named_by_its_number_among_the_notebooks_code_cells(tmp_path):
    # Found on a held-out notebook: the grader leaves the released test cells out, and numbered what was left, so the
    # feedback's "code cell 6" was the student's 38th code cell.
    cells = ['visible_test("activations")', 'visible_test("classifier")', "raise RuntimeError('a broken cell')"]
    dest, _ = _intake_of_notebook(tmp_path, cells)
    assert _printed_by(dest, f"import {LESSON.modules[0]} as m\nprint(m._CELL_ERRORS)") == "[(3, 'RuntimeError: a broken cell')]"


def test_folder_with_py_files_keeps_them_over_a_notebook(tmp_path):
    sub = tmp_path / "subs" / "both"
    sub.mkdir(parents=True)
    (sub / f"{FIRST}.py").write_text("REAL = 1\n")
    _notebook(sub / LESSON.notebook, ["REAL = 2"])
    dest = tmp_path / "scratch"
    result = materialise(discover(tmp_path / "subs")[0], dest, lesson=LESSON)
    assert result.notebook is None and (dest / f"{FIRST}.py").read_text() == "REAL = 1\n"


@pytest.mark.parametrize("touch", ["as_released", "blank_line", "trailing_spaces_and_crlf"])
def test_untouched_stubs_beside_a_notebook_make_way_for_it(tmp_path, touch):
    # A student who worked only in the lesson's notebook still has the released stubs in the repository; an editor
    # may have added a blank line or spaces, or changed the line ends (held-out s57: graded the stubs, 10/100).
    from grader.release.student_release import stub_texts

    sub = tmp_path / "subs" / "nb_student"
    sub.mkdir(parents=True)
    for name, text in stub_texts(lesson=LESSON).items():
        if touch == "blank_line":
            text = text + "\n\n"
        elif touch == "trailing_spaces_and_crlf":
            text = text.replace("\n", "   \r\n")
        (sub / name).write_bytes(text.encode("utf-8"))
    _notebook(sub / LESSON.notebook, reference_notebook_cells())
    dest = tmp_path / "scratch"
    result = materialise(discover(tmp_path / "subs")[0], dest, lesson=LESSON)
    assert result.notebook == LESSON.notebook
    for m in LESSON.modules:
        assert "NotImplementedError" not in (dest / f"{m}.py").read_text()
    assert any("untouched stubs" in note for note in result.notes)


def test_damaged_notebook_is_a_note(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "bad.ipynb").write_text("{ not json")
    result = materialise(discover(subs)[0], tmp_path / "scratch", lesson=LESSON)
    assert "could not read the notebook" in result.notes[0]


def test_notebook_cells_read_as_json_equal_nbformat_s(tmp_path):
    """On the lesson's own notebook (markdown, solution and test cells), and on one with magics."""
    from grader.release import notebook

    for path in (notebook.write(notebook.build(student=False, lesson=LESSON), tmp_path / "source.ipynb"),
                 _notebook(tmp_path / "magics.ipynb", reference_notebook_cells())):
        expected = [neutralise_magics(c.source) for c in nbformat.read(str(path), as_version=4).cells
                    if c.cell_type == "code"]
        assert len(expected) > 2 and intake.notebook_code_cells(path, lesson=LESSON) == expected
    # An nbformat 3 notebook still reads, through nbformat's converter.
    old = nbformat.v3.new_notebook(worksheets=[nbformat.v3.new_worksheet(cells=[
        nbformat.v3.new_code_cell(input="x = 1"), nbformat.v3.new_text_cell("markdown", "hi")])])
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"v3-{os.getpid()}.ipynb"
    try:
        path.write_text(nbformat.v3.writes_json(old))
        assert intake.notebook_code_cells(path, lesson=LESSON) == ["x = 1"]
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("shape", ["bytes", "cells"])
def test_a_notebook_over_the_lesson_limits_is_refused_from_its_size_and_the_rest_is_graded(tmp_path, shape):
    limits = intake.notebook_limits(LESSON)
    sub = tmp_path / "subs" / "nia"
    sub.mkdir(parents=True)
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "x = 1\n"}
    if shape == "bytes":
        cells = [dict(cell, source="# " + "x" * 1000 + "\n") for _ in range(limits["bytes"] // 1000 + 10)]
    else:
        cells = [cell] * (limits["cells"] + 1)
    (sub / LESSON.notebook).write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                                 "cells": cells}))
    (sub / "README.md").write_text("my own words\n")
    [submission] = discover(tmp_path / "subs")
    got = materialise(submission, tmp_path / "copy", lesson=LESSON)
    assert not (tmp_path / "copy" / f"{FIRST}.py").exists()
    assert any("over the limit" in note for note in got.notes), got.notes
    assert (tmp_path / "copy" / "README.md").exists()


def test_a_traceback_through_a_notebook_cell_shows_the_cells_own_line(tmp_path):
    # Found on a held-out notebook: its feedback named `File "<notebook> cell 14", line 60` over a blank line.
    cells = ["X = 1", "def broken():\n    y = 2\n    return undefined_name + y"]
    dest, _ = _intake_of_notebook(tmp_path, cells)
    shown = _printed_by(dest, f"import traceback\nimport {LESSON.modules[0]} as m\ntry:\n    m.broken()\n"
                              "except NameError as e:\n    print(traceback.extract_tb(e.__traceback__)[-1].line)")
    assert shown == "return undefined_name + y"

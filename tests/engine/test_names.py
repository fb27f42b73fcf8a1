"""Student-chosen names are data: hostile file, folder, zip and notebook names graded beside honest ones.

A name reaches generated code, grades.csv, report.html, summary.md, feedback.md and paths; in each it
must be encoded for that place. Honest work under a strange name gets full marks in its own row; a
name that collides with a classmate's never takes that classmate's row; both are flagged; an over-deep
or over-long path inside a submission is skipped with a note and the rest is graded.
"""
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
import zipfile
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import engine_helpers  # noqa: E402
from engine_helpers import TOY, descendants, kept_zygotes, processes_of, settled, shared_config  # noqa: E402

from grader.intake import submissions as intake

from grader.admin import regrade

from grader.running import grade as run  # noqa: E402
from grader.results.storage import CLASS_FILES  # noqa: E402

from grader.lesson import load_lesson  # noqa: E402

LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage: the toy's
REFERENCE = LESSON.solutions
from grader.intake.submissions import IntakeLimits, discover, materialise  # noqa: E402
from grader.sandbox import SandboxConfig  # noqa: E402

CONFIG = shared_config(call_timeout=3.0)
JOBS = 2
CODE = LESSON.modules
CODE_POINTS = sum(LESSON.points[part] for part in CODE)  # every code part; no deliverables are handed in

# Names that broke, or could break, something downstream: quotes end string literals, `$(...)` and
# backticks run in a shell, `<script>` runs in a page, a newline ends a CSV row or a Markdown line.
APOSTROPHE_NB = "it's mine.ipynb"
QUOTES_NB = 'say "hi" $(touch PWNED) `id` <script>alert(1)<\\script>.ipynb'
NEWLINE_NB = "new\nline.ipynb"
QUOTED_FOLDER = "O'Brien \"Bob\" $(id) <b>bold</b"[:-3] + "b>"  # no "/" in a file name
FORMULA_FOLDER = '=HYPERLINK("http:evil","click")'
FORMULA_ZIP = "+SUM(1+1).zip"
AT_NB = "@cmd.ipynb"
NFC, NFD = unicodedata.normalize("NFC", "José"), unicodedata.normalize("NFD", "José")
LATIN1_FOLDER = b"caf\xe9"  # not UTF-8: os.fsdecode gives a lone surrogate
HONEST = ("aaa_reference", "ann_lee", "zzz_reference")


def make_submission(folder: Path, files: dict[str, str] | None = None, *, reference: bool = True) -> Path:
    return engine_helpers.make_submission(folder, files, reference=reference, solutions=REFERENCE)


def reference_cells() -> list[str]:
    """The reference as a notebook's cells, each module's imports of its siblings dropped (a notebook
    defines everything in one namespace)."""
    cells = ["%matplotlib inline"]
    for name in CODE:
        src = (REFERENCE / f"{name}.py").read_text()
        cells.append("\n".join(l for l in src.splitlines() if not l.startswith(tuple(f"from {m} " for m in CODE))))
    return cells


def write_notebook(path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def reference_zip(path: Path, extra: dict[str, bytes] | None = None, *, top: str = "") -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for f in sorted(REFERENCE.glob("*.py")):
            z.write(f, f"{top}{f.name}")
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return path


def deep_folder(root: Path, levels: int) -> None:
    """`levels` nested folders with a file at the bottom, made one level at a time (no long path)."""
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("bottom.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("raise SystemExit('graded from the bottom')\n")
    finally:
        os.close(fd)


def build_class(subs: Path) -> dict[str, str]:
    """The class, and for each honest-under-a-strange-name submission the source label it must keep."""
    for name in HONEST:
        make_submission(subs / name)
    expect = {}
    # Junk whose sanitised name is the honest ann_lee's: it must get a row of its own.
    with zipfile.ZipFile(subs / "Ann Lee.zip", "w") as z:
        z.writestr(f"{CODE[0]}.py", "raise SystemExit('junk')\n")
    for nb in (APOSTROPHE_NB, QUOTES_NB, NEWLINE_NB, AT_NB):
        write_notebook(subs / nb, reference_cells())
        expect[nb] = nb.replace("\n", "\\n")
    for folder in (QUOTED_FOLDER, FORMULA_FOLDER, NFC, NFD, "Jos!", "grades.csv", "-2+3", "pipe|name"):
        make_submission(subs / folder)
        expect[folder] = folder + "/"
    make_submission(Path(os.fsdecode(bytes(subs) + b"/" + LATIN1_FOLDER)))
    expect["latin1"] = "caf\\xe9/"
    reference_zip(subs / FORMULA_ZIP)
    expect[FORMULA_ZIP] = FORMULA_ZIP
    # One entry 1000 folders deep beside a correct submission (this once made the row an engine-error).
    reference_zip(subs / "deep.zip", {"a/" * 1000 + "x.py": b"x = 1\n"})
    expect["deep.zip"] = "deep.zip"
    reference_zip(subs / "longname.zip", {"n" * 300 + ".py": b"x = 1\n", "ok/" + "m" * 250 + ".txt": b"x"})
    expect["longname.zip"] = "longname.zip"
    deep_folder(make_submission(subs / "deepdir"), 1100)  # past Python's recursion limit
    expect["deepdir"] = "deepdir/"
    # A notebook whose own name is hostile, one folder down inside a zip.
    with zipfile.ZipFile(subs / "nested.zip", "w") as z:
        buffer = io.StringIO()
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(c) for c in reference_cells()]
        nbformat.write(nb, buffer)
        z.writestr("work/it's \"here\" $(id).ipynb", buffer.getvalue())
    expect["nested.zip"] = "nested.zip"
    return expect


def components(record) -> dict:
    got = {c: 0.0 for c in CODE}
    for t in record["tests"]:
        if t["component"] in got:
            got[t["component"]] += t["score"]
    return {c: round(v, 4) for c, v in got.items()}


def code_points(record) -> float:
    return round(sum(components(record).values()), 4)


@pytest.fixture(scope="module")
def batch():
    root = Path(tempfile.mkdtemp(prefix="kit-names-"))
    subs = root / "submissions"
    subs.mkdir()
    expect = build_class(subs)
    out = root / "out"
    cwd = os.getcwd()
    os.chdir(root)  # a `$(touch PWNED)` that reached a shell would leave PWNED here
    try:
        code = run.main(submissions=subs, out=out, jobs=JOBS, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes())
    finally:
        os.chdir(cwd)
    records = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/record.json")}
    by_source = {r["source"]: r for r in records.values()}
    yield dict(code=code, root=root, subs=subs, out=out, records=records, by_source=by_source, expect=expect)
    # GNU rm walks a deep tree without recursing per level; shutil.rmtree would hit the recursion limit.
    subprocess.run(["rm", "-rf", "--", str(root)], check=True, timeout=300)


# ---------------------------------------------------------------- the class, graded


def test_every_honest_submission_gets_full_marks_in_its_own_row(batch):
    assert batch["code"] == 0
    by_source = batch["by_source"]
    for name in HONEST:
        assert code_points(by_source[name + "/"]) == CODE_POINTS, name
    for key, label in batch["expect"].items():
        record = by_source.get(label)
        assert record is not None, f"no row came from {label!r}; rows: {sorted(by_source)}"
        assert record["status"] == "ok", (label, record["status"], record["notes"])
        assert code_points(record) == CODE_POINTS, (label, components(record), record["notes"])
    # Every submission has exactly one row, and every row says where it came from.
    entries = os.listdir(os.fsencode(batch["subs"]))
    assert len(batch["records"]) == len(entries)
    assert sorted(by_source) == sorted(set(by_source))


def test_a_junk_zip_never_takes_a_classmates_row(batch):
    records, by_source = batch["records"], batch["by_source"]
    assert records["ann_lee"]["source"] == "ann_lee/"
    assert code_points(records["ann_lee"]) == CODE_POINTS
    junk = by_source["Ann Lee.zip"]
    assert junk["submission"].lower() != "ann_lee" and code_points(junk) == 0
    # Both are flagged; neither student's feedback names the other.
    for record, own, other in ((records["ann_lee"], "ann_lee/", "Ann Lee.zip"), (junk, "Ann Lee.zip", "ann_lee/")):
        flagged = [n for n in record["notes"] if "each has its own row" in n]
        assert flagged and own in flagged[0] and other not in json.dumps(record), record["notes"]
    # The class report lists both, with their sources.
    summary = (batch["out"] / "summary.md").read_text(encoding="utf-8")
    assert "| ann_lee | ann_lee/ |" in summary and f"| {junk['submission']} | Ann Lee.zip |" in summary


def test_names_that_sanitise_alike_get_two_flagged_rows(batch):
    by_source = batch["by_source"]
    accented, bang = by_source[NFC + "/"], by_source["Jos!/"]
    assert accented["submission"] != bang["submission"]
    assert code_points(accented) == code_points(bang) == CODE_POINTS
    assert all(any("each has its own row" in n for n in r["notes"]) for r in (accented, bang))
    # The same name decomposed (e + combining accent) sanitises differently: its own row, flagged as renamed.
    decomposed = by_source[NFD + "/"]
    assert decomposed["submission"] not in (accented["submission"], bang["submission"])
    assert any("row name" in n for n in decomposed["notes"])


def test_a_renamed_row_is_flagged_and_a_plain_one_is_not(batch):
    by_source = batch["by_source"]
    renamed = by_source[batch["expect"][APOSTROPHE_NB]]
    assert renamed["submission"] != "it's mine"
    assert any("row name" in n and "it's mine.ipynb" in n for n in renamed["notes"]), renamed["notes"]
    plain = by_source["aaa_reference/"]
    assert plain["notes"] == [] and plain["submission"] == "aaa_reference"
    # A class file's name is not a row name: the folder called grades.csv has a row of its own.
    assert by_source["grades.csv/"]["submission"].lower() != "grades.csv"


def test_over_deep_and_over_long_paths_are_skipped_with_a_note_and_the_rest_graded(batch):
    by_source = batch["by_source"]
    deep = by_source["deep.zip"]
    assert deep["status"] == "ok" and any("levels deep" in n for n in deep["notes"]), deep["notes"]
    assert max(len(n) for n in deep["notes"]) < 400, "a note shows a long path shortened"
    folder = by_source["deepdir/"]
    assert any("levels deep" in n for n in folder["notes"]), folder["notes"]
    assert "graded from the bottom" not in json.dumps(folder)
    long = by_source["longname.zip"]
    assert sum("too long" in n for n in long["notes"]) == 2, long["notes"]


def test_grades_csv_has_a_source_column_and_no_formula(batch):
    with open(batch["out"] / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    assert header[header.index("status") + 1] == "source"
    source = header.index("source")
    by_source = {row[source]: row for row in rows[1:]}
    assert len(by_source) == len(rows) - 1 == len(batch["records"])
    for row in rows[1:]:
        for cell in row:
            assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r"), row
            assert "\n" not in cell, row
    assert "'" + FORMULA_FOLDER + "/" in by_source
    assert "'" + FORMULA_ZIP in by_source and "'@cmd.ipynb" in by_source and "'-2+3/" in by_source
    assert "caf\\xe9/" in by_source and "new\\nline.ipynb" in by_source


def test_report_and_summary_show_names_as_text(batch):
    raw_tag = re.compile(r"(?<!\\)<(script|b)\b")  # a tag not escaped for Markdown
    html = (batch["out"] / "report.html").read_text(encoding="utf-8")
    body = html.split("<body>", 1)[1]
    assert "<script" not in body and "<b>bold" not in body
    assert "&lt;script&gt;" in body, "the source of the renamed notebook is listed, escaped"
    summary = (batch["out"] / "summary.md").read_text(encoding="utf-8")
    assert not raw_tag.search(summary)
    # The renamed rows are listed with their sources, in both.
    assert "Ann Lee.zip" in html and "Ann Lee.zip" in summary
    for record in batch["records"].values():
        feedback = (batch["out"] / record["submission"] / "feedback.md").read_text(encoding="utf-8")
        assert not raw_tag.search(feedback), record["submission"]


def test_no_name_reached_a_shell_or_left_the_output_folder(batch):
    root = batch["root"]
    # find, not rglob: the class holds a folder 1100 levels deep.
    found = subprocess.run(["find", str(root), "-name", "PWNED"], capture_output=True, text=True, timeout=300)
    assert found.returncode == 0 and found.stdout == "", found.stdout + found.stderr
    assert sorted(p.name for p in root.iterdir()) == ["out", "submissions"]
    for path in batch["out"].iterdir():
        assert not path.is_symlink()
        assert path.name in CLASS_FILES or path.name.startswith("_") or \
            (path / "record.json").is_file(), path
    assert settled(lambda: processes_of(range(CONFIG.uid_base, CONFIG.uid_base + JOBS))) == []
    assert settled(lambda: descendants(os.getpid())) == []


def test_rows_keep_their_names_when_a_colliding_upload_arrives_later(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    make_submission(subs / "ann_lee")
    make_submission(subs / "Bo Li")
    first = {s.name: s for s in discover(subs)}
    assert set(first) == {"ann_lee", "Bo_Li"}
    make_submission(subs / "ann lee", reference=False)
    make_submission(subs / "bo_li")
    second = {intake.source_label(s): s.name for s in discover(subs)}
    assert second["ann_lee/"] == "ann_lee" and second["bo_li/"] == "bo_li"
    assert second["ann lee/"] not in ("ann_lee", "Ann_Lee") and second["Bo Li/"] != "Bo_Li"
    # A record written for another source under that row name is not taken as this row's grade.
    (out / "Bo_Li").mkdir(parents=True)
    (out / "Bo_Li" / "record.json").write_text(json.dumps({"submission": "Bo_Li", "source": "Bo Li/"}))
    for f in ("results.json", "feedback.md"):
        (out / "Bo_Li" / f).write_text("{}")
    assert regrade.is_complete(out / "Bo_Li", source="Bo Li/")
    assert not regrade.is_complete(out / "Bo_Li", source="bo li/")


def test_a_row_that_moved_leaves_no_second_row_behind(tmp_path, capsys):
    subs, out = tmp_path / "subs", tmp_path / "out"
    make_submission(subs / "bo")
    reference_zip(subs / "Ann Lee.zip")
    config = SandboxConfig(call_timeout=3.0, uid_base=CONFIG.uid_base)
    assert run.main(submissions=subs, out=out, jobs=1, config=config, lesson=LESSON, zygotes=kept_zygotes()) == 0
    assert (out / "Ann_Lee" / "record.json").is_file()
    make_submission(subs / "ann_lee")  # arrives late; its name is already plain
    assert run.main(submissions=subs, out=out, jobs=1, config=config, lesson=LESSON, zygotes=kept_zygotes()) == 0
    said = capsys.readouterr().out
    assert "row Ann_Lee of Ann Lee.zip is now Ann_Lee-" in said and "1 already graded" in said
    with open(out / "grades.csv", newline="") as f:
        rows = {row["source"]: row for row in csv.DictReader(f)}
    assert sorted(rows) == ["Ann Lee.zip", "ann_lee/", "bo/"]
    assert rows["ann_lee/"]["submission"] == "ann_lee" and rows["Ann Lee.zip"]["submission"].startswith("Ann_Lee-")
    assert all(float(row["total"]) == CODE_POINTS for row in rows.values())
    assert not (out / "Ann_Lee").exists()


# ---------------------------------------------------------------- intake on its own


def test_row_names_do_not_depend_on_the_other_entries(tmp_path):
    alone, crowd = tmp_path / "alone", tmp_path / "crowd"
    for folder in (alone, crowd):
        make_submission(folder / "Ann Lee", reference=False)
    make_submission(crowd / "ann_lee", reference=False)
    make_submission(crowd / "ANN LEE", reference=False)
    names = {intake.source_label(s): s.name for s in discover(crowd)}
    assert names["ann_lee/"] == "ann_lee"
    assert len({n.lower() for n in names.values()}) == 3
    assert names == {intake.source_label(s): s.name for s in discover(crowd)}, "deterministic"
    # The suffix comes from the entry's own name, not from its position among the others.
    assert names["Ann Lee/"].startswith("Ann_Lee-")
    assert discover(alone)[0].name == "Ann_Lee"


def test_a_leading_underscore_is_a_student_not_junk(tmp_path):
    make_submission(tmp_path / "_final", reference=False)
    reference_zip(tmp_path / "__draft__.zip")
    make_submission(tmp_path / "__MACOSX", reference=False)
    (tmp_path / ".DS_Store").write_text("junk")
    subs = {intake.source_label(s): s for s in discover(tmp_path)}
    assert sorted(subs) == ["__draft__.zip", "_final/"]
    assert subs["_final/"].name == "final" and subs["_final/"].flags
    assert not subs["__draft__.zip"].name.startswith("_")


def test_a_folder_named_overrides_csv_cannot_stop_the_next_run(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    make_submission(subs / "overrides.csv")
    config = SandboxConfig(call_timeout=3.0, uid_base=CONFIG.uid_base)
    for _ in range(2):  # the second run reads OUT/overrides.csv: it must still be a file or nothing
        assert run.main(submissions=subs, out=out, jobs=1, config=config, lesson=LESSON, zygotes=kept_zygotes()) == 0
    assert not (out / "overrides.csv").exists()
    (row,) = [p for p in out.iterdir() if (p / "record.json").is_file()]
    assert row.name.startswith("overrides.csv-")


def test_no_row_is_named_like_a_class_file(tmp_path):
    for name in CLASS_FILES:
        make_submission(tmp_path / name.upper(), reference=False)
    subs = discover(tmp_path)
    assert len(subs) == len(CLASS_FILES)
    for sub in subs:
        assert sub.name.lower() not in CLASS_FILES and not sub.name.startswith(("_", ".")) and sub.flags, sub


@pytest.mark.parametrize("name", [APOSTROPHE_NB, QUOTES_NB, NEWLINE_NB, "tab\there.ipynb", "back\\slash'.ipynb",
                                  "'''.ipynb", '""".ipynb', "ü\u202eevil.ipynb"])
def test_a_notebook_name_never_becomes_source_text(tmp_path, name):
    subs = tmp_path / "subs"
    module, graded = CODE[0], LESSON.graded_names[CODE[0]][0]
    write_notebook(subs / name, [f"def {graded}():\n    return 42", "1/0"])
    dest = tmp_path / "scratch"
    taken = materialise(discover(subs)[0], dest, lesson=LESSON)
    assert taken.notebook is not None
    for each in (LESSON.notebook_module, *LESSON.modules):
        compile((dest / f"{each}.py").read_text(encoding="utf-8"), each, "exec")

    run_it = subprocess.run([sys.executable, "-c", f"import {module} as s; print(s.{graded}(), s._CELL_ERRORS)"],
                            cwd=dest, capture_output=True, text=True, timeout=120)
    assert run_it.returncode == 0, run_it.stderr
    assert run_it.stdout.startswith("42 [(2, 'ZeroDivisionError")


def test_an_undecodable_name_is_shown_with_escapes(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    folder = make_submission(Path(os.fsdecode(bytes(subs) + b"/" + LATIN1_FOLDER)), reference=False)
    (Path(os.fsdecode(bytes(folder) + b"/x\xff.py"))).write_text("x = 1\n")
    os.symlink("/etc/passwd", os.fsdecode(bytes(folder) + b"/l\xfe"))
    sub = discover(subs)[0]
    assert intake.source_label(sub) == "caf\\xe9/"
    taken = materialise(sub, tmp_path / "scratch", lesson=LESSON)
    text = "\n".join(taken.notes)
    text.encode("utf-8")  # no lone surrogate reaches a note
    assert "l\\xfe" in text


def test_depth_and_length_caps_are_limits_of_the_intake(tmp_path):
    subs = tmp_path / "subs"
    folder = make_submission(subs / "s", reference=False)
    deep_folder(folder, 5)
    (folder / ("q" * 40 + ".py")).write_text("x = 1\n")
    limits = IntakeLimits(max_depth=3, max_path_chars=30)
    taken = materialise(discover(subs)[0], tmp_path / "scratch", limits=limits, lesson=LESSON)
    assert any("more than 3 levels deep" in n for n in taken.notes), taken.notes
    assert any("too long" in n for n in taken.notes), taken.notes
    assert not (tmp_path / "scratch" / "d" / "d" / "d" / "d").exists()


def test_a_zip_of_many_too_deep_entries_gives_a_short_list_of_notes(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    reference_zip(subs / "many.zip", {f"{i}/" + "a/" * 20 + "x.py": b"x = 1\n" for i in range(2000)})
    taken = materialise(discover(subs)[0], tmp_path / "scratch", lesson=LESSON)
    assert len(taken.notes) == intake.MAX_NOTES + 1
    assert taken.notes[-1].startswith(f"... and {2000 - intake.MAX_NOTES} more")
    assert {f"{m}.py" for m in CODE} <= {p.name for p in (tmp_path / "scratch").glob("*.py")}

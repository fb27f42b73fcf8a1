"""grader/release/student_release.py on the toy lesson: the zip is the folder and reproducible; no solution
line, hidden grader file or reference output ships; the leak search finds what is planted, in the
folder and in the files it checks by their kind; a leaking assignment folder and a folder the release
did not make are refused. What a real lesson's release holds (its tools, tables, deliverables) is
tested with that lesson (tests/<lesson>/)."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.release import notebook
from grader.release import student_release as release
from grader.release import stubs


@pytest.fixture(scope="module")
def built(tmp_path_factory, toy) -> Path:
    out = tmp_path_factory.mktemp("dist")
    assert release.main(out=str(out), lesson=toy) == 0
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_zip_equals_the_folder_and_is_reproducible(built, tmp_path, toy):
    name = toy.name
    with zipfile.ZipFile(built / f"{name}.zip") as archive:
        zipped = {entry.removeprefix(f"{name}/"): archive.read(entry) for entry in archive.namelist()}
        assert all(entry.startswith(f"{name}/") for entry in archive.namelist())
    assert zipped == _files(built / name)
    assert release.main(out=str(tmp_path), lesson=toy) == 0
    assert (tmp_path / f"{name}.zip").read_bytes() == (built / f"{name}.zip").read_bytes()


def test_no_solution_line_hidden_grader_or_reference_output(built, toy):
    """Searched independently of release.leaks(): every non-trivial solution line, in the folder and the zip."""
    lines = [line for path in sorted(toy.solutions.glob("*.py"))
             for line in stubs.solution_lines(path.read_text(encoding="utf-8"))]
    assert len(lines) >= 4  # the search is only as good as this list: every task's lines
    outputs = {p.read_bytes() for p in toy.solutions.rglob("*") if p.is_file() and p.suffix != ".py"}
    with zipfile.ZipFile(built / f"{toy.name}.zip") as archive:
        contents = {f"zip:{n}": archive.read(n) for n in archive.namelist()}
    contents.update(_files(built / toy.name))
    for name, data in contents.items():
        text = data.decode("utf-8", errors="replace")
        if name.endswith(".ipynb"):
            text = notebook.code_of(nbformat.reads(text, as_version=4))
        squeezed = "".join(text.split())
        leaked = [line for line in lines if "".join(line.split()) in squeezed]
        assert not leaked, f"{name} holds solution code: {leaked[:3]}"
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text, name
        assert not name.removeprefix("zip:").removeprefix(f"{toy.name}/").startswith("grader/"), name
        assert data not in outputs, f"{name} is a reference output"
    # Every file of the lesson's folder is hidden but the student folder and the deliverable checks it
    # declares for students (the toy keeps its student folder inside its own).
    student_tools = set(release.student_tools(lesson=toy))
    hidden = [p for p in toy.folder.rglob("*") if p.is_file() and p.suffix != ".pyc" and p not in student_tools
              and not p.is_relative_to(toy.assignment)]
    assert any(p.name == "rubric.toml" for p in hidden) and any(p.name == "adapter.py" for p in hidden)
    for hidden_file in hidden:
        if hidden_file.stat().st_size > 64:
            assert hidden_file.read_bytes() not in contents.values(), f"{hidden_file.name} shipped"


def _copy(built: Path, toy, tmp_path: Path) -> Path:
    copy = tmp_path / toy.name
    shutil.copytree(built / toy.name, copy)
    assert release.leaks(copy, lesson=toy) == []
    return copy


def test_leak_search_finds_a_planted_line(built, tmp_path, toy):
    copy = _copy(built, toy, tmp_path)
    last, first = toy.modules[-1], toy.modules[0]
    line = stubs.solution_lines((toy.solutions / f"{last}.py").read_text(encoding="utf-8"))[-1]
    helper = copy / "tools" / "helper.py"
    helper.write_text(f"def f(self, x):\n    {line}\n", encoding="utf-8")
    assert any("helper.py" in found and "solution line" in found for found in release.leaks(copy, lesson=toy))
    helper.unlink()
    shutil.copyfile(toy.solutions / f"{first}.py", copy / "tools" / f"{first}_ref.py")
    assert any("BEGIN SOLUTION" in found for found in release.leaks(copy, lesson=toy))


def test_leak_search_still_finds_every_other_lesson_file(built, tmp_path, toy):
    """Only the files the lesson declares for students may ship; any other file of its folder is a leak."""
    copy = _copy(built, toy, tmp_path)
    shutil.copyfile(toy.folder / "rubric.toml", copy / "tools" / "rubric.toml")
    assert any("tools/rubric.toml: is the hidden grader file" in found for found in release.leaks(copy, lesson=toy))


def test_leak_search_refuses_a_table_that_holds_code(built, tmp_path, toy):
    """A tensor table shipped beside the visible tests is numbers; one that would run code, or hold
    anything but tensors, is a leak (it could carry a working answer)."""
    import pickle

    import torch

    copy = _copy(built, toy, tmp_path)
    table = copy / "tests" / "answers.pt"
    torch.save([{"x": torch.zeros(1)}], table)
    assert release.leaks(copy, lesson=toy) == []
    torch.save([{"x": torch.zeros(1), "solve": "def f(x): ..."}], table)
    assert any("answers.pt: holds a str" in found for found in release.leaks(copy, lesson=toy))
    table.write_bytes(pickle.dumps(release.leaks))  # a pickle that names a function
    assert any("answers.pt: is not a table of numbers" in found for found in release.leaks(copy, lesson=toy))


def test_leak_search_refuses_a_fingerprint_file_with_code_or_hidden_inputs(built, tmp_path, toy):
    """The visible tests' fingerprints of known mistakes ship as numbers on the visible tests' inputs and
    the rubric's words; free text (code), a key that is no visible test (a hidden test's inputs) or an
    array longer than a sample is a leak."""
    copy = _copy(built, toy, tmp_path)
    fingerprints = sorted((copy / "tests").glob("*.json"))
    assert fingerprints
    path = fingerprints[0]
    clean = json.loads(path.read_text(encoding="utf-8"))
    test, places = next(iter(clean["tests"].items()))
    place, entries = next(iter(places.items()))

    def planted(change) -> list[str]:
        data = json.loads(json.dumps(clean))
        change(data)
        path.write_text(json.dumps(data), encoding="utf-8")
        return [found for found in release.leaks(copy, lesson=toy) if found.startswith(f"tests/{path.name}")]

    code = "def softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim, keepdim=True)"
    assert any("holds the text" in f for f in planted(lambda d: d["hints"].update({entries[0]["mutants"][0]: code})))
    assert any("holds the text" in f for f in planted(lambda d: d.update({"notes": [code]})))
    assert any("holds the key" in f for f in planted(lambda d: d.update({code[:40]: 1})))
    hidden_tests = {m for p in toy.tests_folder.rglob("test_*.py")
                    for m in re.findall(r"^def (test_\w+)", p.read_text(encoding="utf-8"), re.M)}
    visible_tests = {m for p in (copy / "tests").glob("test_*.py")
                     for m in re.findall(r"^def (test_\w+)", p.read_text(encoding="utf-8"), re.M)}
    hidden = sorted(hidden_tests - visible_tests)[0]
    assert any(f"holds the key '{hidden}'" in f for f in planted(lambda d: d["tests"].update({hidden: places})))
    whole = {"shape": [50, 16], "values": [0.5] * 800}  # a whole output, not a sample
    assert any("array of 800 numbers" in f
               for f in planted(lambda d: d["tests"][test][place][0].update({"got": whole})))
    path.write_text("not json", encoding="utf-8")
    assert any("is not JSON data" in f for f in release.leaks(copy, lesson=toy))


def test_a_leaking_assignment_folder_is_refused(tmp_path, capsys, toy):
    assignment = tmp_path / "assignment"
    shutil.copytree(toy.assignment, assignment, ignore=shutil.ignore_patterns("__pycache__"))
    (assignment / "tools").mkdir(exist_ok=True)
    shutil.copyfile(toy.solutions / f"{toy.modules[0]}.py", assignment / "tools" / "answer.py")
    lesson = dataclasses.replace(toy, assignment=assignment)
    assert release.main(out=str(tmp_path / "dist"), lesson=lesson) == 1
    assert "tools/answer.py" in capsys.readouterr().err
    assert not (tmp_path / "dist" / toy.name).exists() and not (tmp_path / "dist" / f"{toy.name}.zip").exists()


def test_release_never_replaces_a_folder_it_did_not_make(tmp_path, capsys, toy):
    precious = tmp_path / toy.name
    precious.mkdir()
    (precious / "notes.txt").write_text("mine\n")
    assert release.main(out=str(tmp_path), lesson=toy) == 2
    assert (precious / "notes.txt").read_text() == "mine\n"
    assert "not a release" in capsys.readouterr().err

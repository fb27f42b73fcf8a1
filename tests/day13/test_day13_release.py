"""Day 13's student release (grader/release/student_release.py): what it holds (its tools, answer tables,
fingerprints, deliverables), what it must never hold, and that it works alone. The release's engine
behaviour is tested on the toy lesson in tests/engine/test_release.py."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.release import notebook

from grader.release import student_release as release

from grader.release import stubs
from grader.lesson import load_lesson  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "fixtures"))
from engine_helpers import warm_servers  # noqa: E402

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    assert release.main(out=str(out), lesson=DAY13) == 0
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_release_holds_the_student_files(built):
    files = _files(built / "day13")
    for module in DAY13.modules:
        solution = (DAY13.solutions / f"{module}.py").read_text(encoding="utf-8")
        assert files[f"{module}.py"].decode() == stubs.make_stub(solution)
    visible = {p.relative_to(DAY13.assignment).as_posix() for p in DAY13.assignment.rglob("test_*.py")}
    assert visible and visible <= set(files)
    for name in ("Makefile", "pytest.ini", "tests/conftest.py", "day13.ipynb", ".github/workflows/autograde.yml",
                 "tools/ci_feedback.py", "tools/deliverables.py", "tools/deliverable_checks.py", "tools/points.json"):
        assert name in files, f"{name} missing from the release"
    if (DAY13.assignment / "README.md").exists():
        assert files["README.md"] == (DAY13.assignment / "README.md").read_bytes()
    assert files["tools/deliverables.py"] == release.CHECKER.read_bytes()
    # The lesson's deliverable checks beside the checker, with the files they read beside themselves.
    assert files["tools/deliverable_checks.py"] == DAY13.deliverables_checks.read_bytes()
    for path in DAY13.deliverables_data:
        assert files[f"tools/{path.name}"] == path.read_bytes()




def test_no_solution_line_hidden_grader_or_reference_output(built):
    """Searched independently of release.leaks(): every non-trivial solution line, in the folder and the zip."""
    lines = [line for path in sorted(DAY13.solutions.glob("*.py"))
             for line in stubs.solution_lines(path.read_text(encoding="utf-8"))]
    assert len(lines) > 20  # the search is only as good as this list
    outputs = {p.read_bytes() for p in DAY13.solutions.rglob("*") if p.is_file() and p.suffix != ".py"}
    with zipfile.ZipFile(built / "day13.zip") as archive:
        contents = {f"zip:{n}": archive.read(n) for n in archive.namelist()}
    contents.update(_files(built / "day13"))
    for name, data in contents.items():
        text = data.decode("utf-8", errors="replace")
        if name.endswith(".ipynb"):
            text = notebook.code_of(nbformat.reads(text, as_version=4))
        squeezed = "".join(text.split())
        leaked = [line for line in lines if "".join(line.split()) in squeezed]
        assert not leaked, f"{name} holds solution code: {leaked[:3]}"
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text, name
        assert not name.removeprefix("zip:").removeprefix("day13/").startswith("grader/"), name
        assert data not in outputs, f"{name} is a reference output"
    # Every file of the lesson's folder is hidden but the deliverable checks it declares for students.
    student_tools = {DAY13.deliverables_checks, *DAY13.deliverables_data}
    hidden = [p for p in DAY13.folder.rglob("*") if p.is_file() and p.suffix != ".pyc" and p not in student_tools]
    assert any(p.name == "rubric.toml" for p in hidden) and any(p.name == "adapter.py" for p in hidden)
    for hidden_file in hidden:
        if hidden_file.stat().st_size > 64:
            assert hidden_file.read_bytes() not in contents.values(), f"{hidden_file.name} shipped"






def test_day13s_release_as_built_holds_no_leak_the_engines_search_finds(built):
    """The engine's leak search (its planted leaks are tested on the toy: tests/engine/test_release.py) finds
    nothing in Day 13's release: its fingerprints of known mistakes and its answer tables are numbers only."""
    assert sorted((built / "day13" / "tests").glob("*.json")), "Day 13's fingerprints ship"
    assert release.leaks(built / "day13", lesson=DAY13) == []


def test_leak_search_refuses_a_stand_in_table_that_holds_code(built, tmp_path):
    """The visible tests' stand-in answers ship as numbers; a table that would run code, or hold
    anything but tensors, is a leak (it could carry a working attention)."""
    import pickle

    import torch

    copy = tmp_path / "day13"
    shutil.copytree(built / "day13", copy)
    table = copy / "tests" / "attention_answers.pt"
    assert table.is_file() and release.leaks(copy, lesson=DAY13) == []
    torch.save([{"Q": torch.zeros(1), "solve": "def f(Q, K, V): ..."}], table)
    assert any("attention_answers.pt: holds a str" in found for found in release.leaks(copy, lesson=DAY13))
    table.write_bytes(pickle.dumps(release.leaks))  # a pickle that names a function
    assert any("attention_answers.pt: is not a table of numbers" in found for found in release.leaks(copy, lesson=DAY13))






def test_feedback_points_come_from_the_rubric(built):
    points = json.loads((built / "day13" / "tools" / "points.json").read_text(encoding="utf-8"))
    rubric = tomllib.loads(DAY13.rubric_path.read_text(encoding="utf-8"))
    for part, value in points.items():
        assert value == pytest.approx(sum(e["points"] for e in rubric[part].values() if "points" in e))


def _make_test(folder: Path, **env) -> tuple[int, list[tuple[str, str]]]:
    """`make test` in folder; (exit code, [(test name, failure message or '')])."""
    junit = folder.parent / f"{folder.name}-junit.xml"
    junit.unlink(missing_ok=True)
    env = dict(os.environ, PYTEST_ADDOPTS=f"-p no:cacheprovider --junitxml={junit}", **env)
    result = subprocess.run(["make", "test", f"PYTHON={sys.executable}"], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=300)
    assert junit.exists(), f"make test did not run pytest:\n{result.stdout}\n{result.stderr}"
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        cases.append((case.get("name"), "" if problem is None else (problem.get("message") or problem.text or "?")))
    return result.returncode, cases


@pytest.fixture(scope="module")
def unpacked(built, tmp_path_factory) -> Path:
    """The zip extracted into an empty folder, as a student gets it."""
    target = tmp_path_factory.mktemp("student")
    with zipfile.ZipFile(built / "day13.zip") as archive:
        archive.extractall(target)
    return target / "day13"


def test_release_alone_runs_and_every_visible_test_fails_not_implemented(unpacked):
    code, cases = _make_test(unpacked)
    assert code != 0
    assert len(cases) >= 10
    wrong = [(name, message) for name, message in cases if "not implemented yet" not in message]
    assert not wrong, f"tests that did not fail with 'not implemented yet': {wrong[:5]}"


def test_release_with_the_reference_dropped_in_passes_every_visible_test(unpacked, tmp_path):
    folder = tmp_path / "day13"
    shutil.copytree(unpacked, folder)
    for module in DAY13.modules:
        shutil.copyfile(DAY13.solutions / f"{module}.py", folder / f"{module}.py")
    code, cases = _make_test(folder)
    failed = [(name, message) for name, message in cases if message]
    assert code == 0 and not failed, failed[:5]
    assert len(cases) >= 10


def test_make_test_is_served_warm_after_its_first_run_and_reports_the_same(unpacked, tmp_path):
    """The release's `make test` starts the warm checker (tests/_feedback/warm.py, tested in
    tests/engine/test_warm_check.py): the same verdicts as plain pytest, a server kept for this folder
    only, and `make stop` ends it."""
    folder = tmp_path / "day13"
    shutil.copytree(unpacked, folder)
    for module in DAY13.modules:
        shutil.copyfile(DAY13.solutions / f"{module}.py", folder / f"{module}.py")
    (folder / "block.py").write_text((folder / "block.py").read_text() + "\nraise ImportError('a slip')\n")
    home = Path(tempfile.mkdtemp(prefix="warm-", dir="/tmp"))  # short: a socket's path holds 107 bytes
    warm = dict(WARM="1", XDG_RUNTIME_DIR=str(home), CI="")  # a CI job's own CI=true would turn it off
    try:
        plain = _make_test(folder, WARM="0")
        assert not list(home.rglob("*.sock"))
        first, second = _make_test(folder, **warm), _make_test(folder, **warm)
        assert first == second == plain and plain[0] != 0
        assert {name for name, message in plain[1] if message} and any(not message for _, message in plain[1])
        (socket_file,) = home.rglob("*.sock")
        (server,) = warm_servers(home)
        assert str(folder).encode() in Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
        subprocess.run(["make", "stop", f"PYTHON={sys.executable}"], cwd=folder, env=dict(os.environ, **warm),
                       check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 20
        while warm_servers(home) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not warm_servers(home) and not socket_file.exists()
    finally:
        for pid in warm_servers(home):
            os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)


def test_student_tools_work_from_the_release_alone(unpacked, tmp_path):
    """`make heatmap` and `make check` use the copies in tools/, not the kit's grader/."""
    folder = tmp_path / "day13"
    shutil.copytree(unpacked, folder)
    for module in DAY13.modules:
        shutil.copyfile(DAY13.solutions / f"{module}.py", folder / f"{module}.py")
    make = ["make", f"PYTHON={sys.executable}"]
    heatmap = subprocess.run(make + ["heatmap"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert heatmap.returncode == 0, heatmap.stdout + heatmap.stderr
    assert (folder / "attention_heatmap.png").stat().st_size > 1000
    check = subprocess.run(make + ["check"], cwd=folder, capture_output=True, text=True, timeout=300)
    lines = check.stdout.splitlines()
    assert any(line.strip().startswith("✓ Attention heatmap") for line in lines), check.stdout
    assert any(line.strip().startswith("✗ Sentence analysis") for line in lines), check.stdout
    assert check.returncode != 0  # the analysis, diagram and README are still missing


def test_the_release_as_handed_in_is_graded_as_its_stubs_and_a_renamed_notebook_as_the_work(built, tmp_path):
    """The released folder handed in untouched is the stubs (nothing differs from the release), whatever
    a checkout did to its line endings; the released notebook saved under another name with the
    student's code beside the untouched day13.ipynb is the student's work, not the template."""
    from grader.intake import submissions as intake

    folder = tmp_path / "subs" / "as_released"
    shutil.copytree(built / "day13", folder)
    stub = folder / "positional.py"
    stub.write_bytes(stub.read_bytes().replace(b"\n", b"\r\n"))  # a Windows checkout is still the stub
    nb = nbformat.read(str(folder / "day13.ipynb"), as_version=4)
    renamed = tmp_path / "subs" / "renamed"
    shutil.copytree(built / "day13", renamed)
    for cell in nb.cells:
        if cell.cell_type == "code" and "NotImplementedError" in cell.source:
            cell.source = cell.source.replace("raise NotImplementedError", "raise ValueError")
    nbformat.write(nb, str(renamed / "my attention.ipynb"))

    got = intake.materialise(intake.discover(tmp_path / "subs")[0], tmp_path / "a", lesson=DAY13)
    assert got.notebook is None and "NotImplementedError" in (tmp_path / "a" / "self_attention.py").read_text()
    assert any("nothing here differs from the released files" in n for n in got.notes), got.notes
    got = intake.materialise(intake.discover(tmp_path / "subs")[1], tmp_path / "b", lesson=DAY13)
    assert got.notebook == "my attention.ipynb", got.notes
    assert any("day13.ipynb is the released notebook" in n for n in got.notes), got.notes




def _environment_like_the_readme(folder: Path) -> Path:
    """`python3 -m venv .venv` plus the README's packages, as a student's machine would have them.

    The packages are hard links to this kit's own environment (same torch, same multi-hundred-MB
    libraries, no download); where the file system cannot link, each file is a sparse copy of its size.
    """
    venv = folder / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    source = Path(next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()))
    target = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for path in source.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        copy = target / path.relative_to(source)
        copy.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, copy)
        except OSError:
            with open(copy, "wb") as handle:
                handle.truncate(path.stat().st_size)
    assert max(p.stat().st_size for p in target.rglob("*") if p.is_file()) > 100 * 2**20
    return venv


def test_git_add_after_the_readme_set_up_stages_only_the_students_work(unpacked, tmp_path):
    """Set up as the README says, run the tools, then `git add -A`: nothing over 1 MB, no environment, no cache."""
    folder = tmp_path / "day13"
    shutil.copytree(unpacked, folder)
    venv = _environment_like_the_readme(folder)
    for module in DAY13.modules:
        shutil.copyfile(DAY13.solutions / f"{module}.py", folder / f"{module}.py")
    activated = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(venv))
    activated.pop("PYTEST_ADDOPTS", None)
    for command in (["make", "test"], ["make", "heatmap"], ["python", "tools/ci_feedback.py"]):
        done = subprocess.run(command, cwd=folder, env=activated, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert (folder / ".pytest_cache").is_dir() and any(folder.rglob("__pycache__"))
    (folder / "analysis.md").write_text("The token 'cat' attends most to 'sat' (0.41).\n", encoding="utf-8")

    git = ["git", "-c", "user.name=student", "-c", "user.email=s@example.com", "-c", "init.defaultBranch=main"]
    subprocess.run(git + ["init", "-q"], cwd=folder, check=True)
    subprocess.run(git + ["add", "-A"], cwd=folder, check=True, timeout=300)
    staged = subprocess.run(["git", "ls-files", "-s"], cwd=folder, check=True, capture_output=True,
                            text=True).stdout.splitlines()
    sizes = {}
    for line in staged:
        meta, name = line.split("\t", 1)
        blob = meta.split()[1]
        sizes[name] = int(subprocess.run(["git", "cat-file", "-s", blob], cwd=folder, check=True,
                                         capture_output=True, text=True).stdout)
    too_big = {name: size for name, size in sizes.items() if size > 2**20}
    assert not too_big, f"git add -A stages {len(too_big)} files over 1 MB, such as {sorted(too_big)[:3]}"
    unwanted = [n for n in sizes if n.startswith(".venv") or "__pycache__" in n or ".pytest_cache" in n]
    assert not unwanted, unwanted[:5]
    # The work itself is staged: the four files and the deliverables the tools wrote.
    for name in [f"{m}.py" for m in DAY13.modules] + ["attention_heatmap.png", "attention_weights.npy",
                                                          "analysis.md", "day13.ipynb", ".gitignore"]:
        assert name in sizes, f"{name} is not staged: the .gitignore hides the student's work"


def test_make_heatmap_uses_the_notebook_of_a_notebook_student(unpacked, tmp_path):
    """The .py files are the released stubs and day13.ipynb holds the work: `make heatmap` draws from the notebook."""
    folder = tmp_path / "day13"
    shutil.copytree(unpacked, folder)
    notebook.write(notebook.build(student=False, lesson=DAY13), folder / "day13.ipynb")  # the code cells filled in
    make = ["make", f"PYTHON={sys.executable}"]
    heatmap = subprocess.run(make + ["heatmap"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert heatmap.returncode == 0, heatmap.stdout + heatmap.stderr
    assert "from day13.ipynb" in heatmap.stdout
    assert (folder / "attention_heatmap.png").stat().st_size > 1000
    check = subprocess.run(make + ["check"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert any(line.strip().startswith("✓ Attention heatmap") for line in check.stdout.splitlines()), check.stdout

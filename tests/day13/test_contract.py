"""The student contract (assignments/<lesson>/CONTRACT.md) is the one source: it names every graded
function and class with the reference's signatures, ships with the release, and every reference to
it in the kit is a path that exists."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from grader.release import notebook

from grader.release import student_release as release
from grader.lesson import load_lesson  # noqa: E402

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = DAY13.assignment / "CONTRACT.md"


def _public_signatures(path: Path) -> dict[str, str]:
    """Top-level public functions, and classes by their __init__, as 'name(params)' written as in source."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            found[node.name] = f"{node.name}({ast.unparse(node.args)})"
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            init = next((item for item in node.body
                         if isinstance(item, ast.FunctionDef) and item.name == "__init__"), None)
            params = ast.unparse(init.args).removeprefix("self, ").removeprefix("self") if init else ""
            found[node.name] = f"{node.name}({params})"
    return found


@pytest.mark.parametrize("module", DAY13.modules)
def test_contract_spells_every_reference_signature(module):
    text = CONTRACT.read_text(encoding="utf-8")
    signatures = _public_signatures(DAY13.solutions / f"{module}.py")
    assert signatures, f"no public name in solutions/{module}.py"
    for name, signature in signatures.items():
        assert f"`{signature}`" in text, (
            f"{CONTRACT.relative_to(ROOT)} does not give {signature} as the reference defines it: "
            "update the contract (it is the one source the stubs, tests and README follow)")
        assert f"`{module}.py`" in text


def test_contract_file_table_names_only_what_the_reference_defines():
    text = CONTRACT.read_text(encoding="utf-8")
    defined = {name for module in DAY13.modules
               for name in _public_signatures(DAY13.solutions / f"{module}.py")}
    table = {name for row in re.findall(r"^\| `\w+\.py` \| (.+) \|$", text, flags=re.M)
             for name in re.findall(r"`(\w+)`", row)}
    assert table == defined


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = [ROOT / name for name in names.decode().split("\0") if name]
    return [p for p in paths if p.suffix in {".py", ".md", ".txt", ".toml", ".yml", ".ini", ""} and p.is_file()]


def test_every_reference_to_the_contract_is_a_path_that_exists():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    cited, origin = 0, "student-api" + ".md"  # spelt in two pieces so this file does not cite it
    for path in _tracked_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        assert origin not in text, (
            f"{path.relative_to(ROOT)} cites {origin}, which is not in the repository: "
            f"cite {CONTRACT.relative_to(ROOT)} instead")
        for match in re.findall(r"[\w.-]+(?:/[\w.-]+)*/CONTRACT\.md", text):
            if "/" in match:
                cited += 1
                # A lesson declaration's paths may be relative to its own folder (grader/lesson.py).
                assert (ROOT / match).is_file() or (path.parent / match).is_file(), \
                    f"{path.relative_to(ROOT)} cites {match}, which does not exist"
    assert cited, "nothing in the kit cites the contract by path"


def test_release_ships_the_contract(tmp_path):
    assert release.main(out=str(tmp_path), lesson=DAY13) == 0
    shipped = tmp_path / DAY13.name / "CONTRACT.md"
    assert shipped.read_bytes() == CONTRACT.read_bytes()

"""mutants.apply and write_patched: the patches (file, find, replace) that turn a copy of a reference into a
mutant or a correct variant. A patch with an empty find text adds a file of the variant's own (a helper module a
contract lets a submission keep beside its files); every other patch changes one exact text of a file it finds.
Over a reference of two small files in tmp_path, so no lesson is named."""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.judging.mutants import Bug, apply, write_patched


def _reference(tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    folder.mkdir()
    (folder / "a.py").write_text("from b import f\n\nX = f(1)\n")
    (folder / "b.py").write_text("def f(x):\n    return x + 1\n")
    (folder / "notes.md").write_text("not code\n")
    return folder


def _variant(*patches) -> Bug:
    return Bug("v.test", "a", "a.test", tuple(patches))


def test_an_empty_find_adds_a_file_the_others_import(tmp_path):
    variant = _variant(("helpers.py", "", "def g(x):\n    return x + 1\n"),
                       ("a.py", "from b import f\n", "from helpers import g as f\n"))
    reference = _reference(tmp_path)
    sources = apply(variant, reference)
    assert sources["helpers.py"] == "def g(x):\n    return x + 1\n"
    assert sources["a.py"].startswith("from helpers import g as f\n")
    folder = write_patched(variant, reference, tmp_path / "variant")
    assert sorted(p.name for p in folder.iterdir()) == ["a.py", "b.py", "helpers.py", "notes.md"]


def test_a_later_patch_may_change_the_file_an_earlier_one_added(tmp_path):
    variant = _variant(("helpers.py", "", "Y = 1\n"), ("helpers.py", "Y = 1\n", "Y = 2\n"))
    assert apply(variant, _reference(tmp_path))["helpers.py"] == "Y = 2\n"


@pytest.mark.parametrize("patches", [
    (("b.py", "", "def f(x):\n    return x\n"),),  # the reference's own file
    (("helpers.py", "", "Y = 1\n"), ("helpers.py", "", "Y = 2\n")),  # added twice
], ids=["reference_file", "added_twice"])
def test_an_empty_find_on_a_file_already_there_raises(tmp_path, patches):
    with pytest.raises(ValueError, match="empty find text adds .* which is there already"):
        apply(_variant(*patches), _reference(tmp_path))


def test_a_patch_of_a_file_nobody_holds_says_so(tmp_path):
    with pytest.raises(ValueError, match="patches helpers.py, which neither the reference nor an earlier patch holds"):
        apply(_variant(("helpers.py", "Y = 1\n", "Y = 2\n")), _reference(tmp_path))

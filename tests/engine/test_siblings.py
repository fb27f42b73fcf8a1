"""What a part's files take from a sibling's file, read from their source (grader/running/siblings.py): the grader's
executor and the visible tests both decide by it whether a part graded over a sibling's stand-in needs the student's
own sibling beside the stand-in's names. Names here are the test's own."""
from __future__ import annotations

import types
from pathlib import Path

from grader.running import siblings

PROVIDED = {"contract_fn"}


def _folder(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def _takes(folder: Path) -> bool:
    return siblings.takes_more_through("part", "sib", PROVIDED, lambda m: siblings.module_source(folder, m),
                                       parts=("sib", "part"))


def test_a_helper_the_part_imports_counts_as_the_part_a_module_or_a_package_one_folder_down(tmp_path):
    # Held-out s50r (a helper module) and s51r (a module inside a package of the student's, imported as pkg.ops).
    assert not _takes(_folder(tmp_path / "plain", {"part.py": "from sib import contract_fn\n"}))
    assert _takes(_folder(tmp_path / "helper", {"part.py": "from helper import f\n",
                                                "helper.py": "from sib import CONSTANT, contract_fn\n"}))
    assert _takes(_folder(tmp_path / "package", {"part.py": "from pkg.ops import f\n", "pkg/__init__.py": "",
                                                 "pkg/ops.py": "from sib import CONSTANT\n"}))
    assert _takes(_folder(tmp_path / "relative", {"part.py": "import pkg\n", "pkg/__init__.py": "from .ops import f\n",
                                                  "pkg/ops.py": "from sib import CONSTANT\n"}))


def test_a_name_handed_on_by_assignment_or_inside_a_try_is_read_as_handed_on():
    # s49r (inside a try) and s51r (`from helper import x`, then `name = x`).
    assert siblings.handed_on("from core import x\ncontract_fn = x\n", PROVIDED) == {"contract_fn": ("core", "x")}
    assert siblings.handed_on("try:\n    from .core import contract_fn\nexcept ImportError:\n"
                              "    from core import contract_fn\n", PROVIDED) == {"contract_fn": ("core", "contract_fn")}
    assert siblings.handed_on("from core import contract_fn\n\n\ndef contract_fn():\n    pass\n", PROVIDED) == {}


def test_another_name_the_sibling_gives_its_replaced_object_is_the_stand_in_too():
    # s51r: `attend = contract_fn` in the sibling's file, and the part took `attend`.
    own, stand_in = types.ModuleType("sib"), types.ModuleType("sib")
    own.contract_fn = own.attend = lambda: "own"
    own.helper = lambda: "helper"
    stand_in.contract_fn = lambda: "stand-in"
    seen = siblings.bound_over(own, stand_in)
    assert seen.contract_fn is stand_in.contract_fn and seen.attend is stand_in.contract_fn
    assert seen.helper is own.helper

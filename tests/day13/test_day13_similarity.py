"""Day 13's own similarity data: the picture its heatmap tool makes the same for everyone, and its base file.

The engine's comparison is tested through the toy (tests/engine/test_similarity.py); these two checks are
about what Day 13 ships for it (grader/day13/similarity_base.txt).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.admin import similarity
from grader.intake import submissions as intake
from grader.lesson import load_lesson

DAY13 = load_lesson("day13")
ROOT = Path(__file__).resolve().parents[2]
CORRECT = ROOT / "tests" / "fixtures" / "correct"
REFERENCE = ROOT / "solutions" / "day13"


def test_the_kit_default_heatmap_is_recognised_and_not_evidence(tmp_path):
    shutil.copytree(CORRECT / "recap_where", tmp_path / "class" / "recap_where")
    shutil.copytree(REFERENCE, tmp_path / "class" / "reference",
                    ignore=shutil.ignore_patterns("make_deliverables.py", "__pycache__"))
    base = similarity.load_base(DAY13, released_notebook=lambda: similarity.released_notebook_code(DAY13))
    rows = similarity.run(subs=intake.discover(tmp_path / "class"), out=tmp_path / "out", base=base, jobs=1)
    # recap_where ran `make heatmap MODE=trained` on the default sentence, like the reference deliverable.
    row = next(r for r in rows if (r.a, r.b) == ("recap_where", "reference") and r.kind == "image")
    assert row.score == 1.0 and not row.flagged and "not evidence" in row.detail


def test_the_base_file_matches_the_engine_parameters():
    header = (ROOT / "grader" / "day13" / similarity.BASE_FILE).read_text(encoding="utf-8").splitlines()[2]
    assert f"code-k={similarity.CODE_K}" in header and f"text-short-n={similarity.SHORT_N}" in header


def test_the_base_file_holds_the_handout_code_as_the_engine_reads_it_now():
    # The handout's code k-grams depend on how the engine reads code (code_tokens: what counts as a no-op, how names
    # are folded): a change there leaves the shipped base behind, and handout code students share turns into
    # evidence. Rebuild it with `python -m grader.admin.similarity --build-base HANDOUT`.
    handout = next((p for p in (ROOT.parent / "shared" / "handout" / "day13-attention-transformers.txt",
                                Path("/work/shared/handout/day13-attention-transformers.txt")) if p.is_file()), None)
    if handout is None:
        pytest.skip("the handout is not in this workspace (../shared/handout)")
    lines = (ROOT / "grader" / "day13" / similarity.BASE_FILE).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("@handout-code "))
    end = next(i for i, line in enumerate(lines) if line.startswith("@text-short "))
    shipped = [int(h, 16) for h in lines[start + 1:end]]
    assert shipped == sorted(similarity.base_code_hashes(similarity.handout_code(handout.read_text(encoding="utf-8"))))

"""Day 13's demo class as the integrity flags read it: its cheater's planted paths are named, and no
honest classmate (nor the reference) is flagged."""
from pathlib import Path

from grader.judging import integrity

KIT = Path(__file__).resolve().parents[2]


def test_the_demo_cheaters_planted_paths_are_named_and_honest_code_is_not():
    flags = integrity.named_paths(KIT / "demo" / "class" / "noah_cheater")
    assert any("'/autograder/results'" in f for f in flags) and any("'results.json'" in f for f in flags)
    assert any("'..'" in f for f in flags)
    for folder in [KIT / "solutions" / "day13", *sorted((KIT / "demo" / "class").iterdir())]:
        if folder.is_dir() and folder.name != "noah_cheater":
            assert integrity.named_paths(folder) == [], folder.name

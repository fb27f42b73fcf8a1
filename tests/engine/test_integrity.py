"""grader/judging/integrity.py: what a submission tried, from what the grader saw; bounded, and silent on
honest work (a flag on an honest student is noise a person must read)."""
from pathlib import Path

from grader.judging import integrity

KIT = Path(__file__).resolve().parents[2]


def test_planted_paths_are_named_and_honest_code_is_not(tmp_path):
    """A demo class's cheater and its honest classmates are checked with their lesson (tests/<lesson>/)."""
    (tmp_path / "model.py").write_text(
        "import json, os\n"
        "def forward(x):\n    return x\n"
        "with open(os.path.join('..', 'results.json'), 'w') as f:\n    json.dump({'score': 100}, f)\n"
        "open(os.path.join('/autograder/results', 'results.json'), 'w').write('{}')\n")
    flags = integrity.named_paths(tmp_path)
    assert any("'/autograder/results'" in f for f in flags) and any("'results.json'" in f for f in flags)
    assert any("'..'" in f for f in flags)
    for folder in [KIT / "tests" / "fixtures" / "lessons" / "toy" / "solutions",
                   KIT / "tests" / "fixtures" / "lessons" / "words" / "solutions"]:
        assert integrity.named_paths(folder) == [], folder


def test_printed_verdicts_are_flagged_with_the_line_and_ordinary_prints_are_not():
    outputs = ["loss 0.31\nshape torch.Size([2, 5, 64])\nseeded 0\n",
               "============== 30 passed in 0.42s ==============\n", "All tests passed!\n", "Score: 100/100\n"]
    flags = integrity.printed_claims(outputs)
    assert len(flags) == integrity.MAX_PER_KIND
    assert "30 passed in 0.42s" in flags[0] and "All tests passed!" in flags[1] and "Score: 100/100" in flags[2]
    assert integrity.printed_claims(outputs[:1]) == []
    # Found by a red team: a zero-width space inside the words hid the claim.
    assert integrity.printed_claims(["All tests\u200b passed: 100/100\n"])
    # A flood of claims is a few flags, each line cut.
    flood = integrity.printed_claims(["%d passed " % i + "x" * 5000 + "\n" for i in range(1000)])
    assert len(flood) == integrity.MAX_PER_KIND and all(len(f) < 400 for f in flood)


def test_result_files_written_while_graded_and_exits_at_import():
    assert integrity.written_results({"classifier.py"}, {"classifier.py", "results.json", "plot.png"}) == [
        "wrote 'results.json' into its own folder while graded (a result file; the grader never reads it)"]
    assert integrity.written_results({"results.json"}, {"results.json"}) == []  # handed in, not written
    exits = integrity.early_exits([
        ("classifier.py", {"type": "SystemExit", "message": "0", "stage": "import"}),
        ("classifier.py", {"type": "SystemExit", "message": "0", "stage": "import"}),
        ("activations.py", {"type": "Crashed", "message": "the student's code ended the process (exit status 0, "
                                                        "e.g. os._exit or sys.exit at import)"}),
        ("model.py", {"type": "Crashed", "message": "the process was killed (SIGKILL)"}),
    ])
    assert exits == ["classifier.py ended the program while being imported (sys.exit(0)): its tests could not run",
                     "activations.py's process ended while it was graded (exit status 0: os._exit, or a library "
                     "giving up in that process): the tests that needed it could not run"]


def test_a_hostile_folder_is_read_within_bounds(tmp_path):
    for i in range(integrity.MAX_ENTRIES + 50):
        (tmp_path / f"f{i}").touch()
    assert len(integrity.top_files(tmp_path)) == integrity.MAX_ENTRIES
    (tmp_path / "a.py").write_text("\n".join(f"open('../results.json{i}', 'w')" for i in range(100))
                                   + "\nx = '" + "/autograder/" * 500 + "'\n")
    flags = integrity.named_paths(tmp_path)
    assert 0 < len(flags) <= 2 * integrity.MAX_PER_KIND
    # A file of nothing but distinct planted paths: read once, never a parse, a few flags.
    (tmp_path / "b.py").write_text("".join(f"p{i} = '../r{i}'\n" for i in range(200_000)))
    (tmp_path / "a.py").unlink()
    assert len(integrity.named_paths(tmp_path)) == 2 * integrity.MAX_PER_KIND

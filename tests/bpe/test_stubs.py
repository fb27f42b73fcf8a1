"""The BPE lesson commits its stubs in its student folder, each as the generator writes it from the reference."""
from grader.lesson import load_lesson
from grader.release import stubs

from .helpers import ASSIGNMENT, FILES


def test_bpe_commits_a_stub_for_each_solution():
    pairs = stubs.stub_pairs(lesson=load_lesson("bpe"))
    assert sorted(stub.name for _, stub in pairs) == sorted(FILES)
    for solution, stub in pairs:
        assert stub.parent == ASSIGNMENT and stub.is_file(), f"{stub} is missing: run `make stubs LESSON=bpe`"
        assert stub.read_text(encoding="utf-8") == stubs.make_stub(solution.read_text(encoding="utf-8"))

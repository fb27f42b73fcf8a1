"""Day 13's stubs, committed in its student folder, and the student README beside them."""
from grader.lesson import load_lesson
from grader.release import stubs

DAY13 = load_lesson("day13")


def test_day13_commits_a_stub_for_each_solution():
    """Day 13 commits its stubs (a student may clone the folder as it is): all four, each as generated."""
    pairs = stubs.stub_pairs(lesson=DAY13)
    assert sorted(stub.name for _, stub in pairs) == ["block.py", "multihead.py", "positional.py", "self_attention.py"]
    for solution, stub in pairs:
        assert stub.parent == DAY13.assignment and stub.is_file(), f"{stub} is missing: run `make stubs LESSON=day13`"
        assert stub.read_text(encoding="utf-8") == stubs.make_stub(solution.read_text(encoding="utf-8"))


def test_student_readme_lists_the_forbidden_calls():
    readme = (DAY13.assignment / "README.md").read_text(encoding="utf-8")
    forbidden = readme[readme.index("## Not allowed"):]
    for call in ("scaled_dot_product_attention", "nn.MultiheadAttention", "nn.Transformer"):
        assert call in forbidden

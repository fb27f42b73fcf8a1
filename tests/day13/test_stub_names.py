"""Day 13's generated stubs and the student README beside them."""
from grader.release import stubs

ASSIGNMENT_DIR = stubs.ASSIGNMENTS / "day13"


def test_every_day13_solution_has_a_stub():
    names = sorted(stub.name for _, stub in stubs.stub_pairs() if stub.parent == ASSIGNMENT_DIR)
    assert names == ["block.py", "multihead.py", "positional.py", "self_attention.py"]


def test_student_readme_lists_the_forbidden_calls():
    readme = (ASSIGNMENT_DIR / "README.md").read_text(encoding="utf-8")
    forbidden = readme[readme.index("## Not allowed"):]
    for call in ("scaled_dot_product_attention", "nn.MultiheadAttention", "nn.Transformer"):
        assert call in forbidden

"""What keeps a library tokenizer out of a BPE grade (grader/bpe/forbidden.toml): none is installed in the
environment submissions run in, so a file that imports one fails to import there and loses its part.
If the kit ever depends on one of them, this test says so before a student's grade does."""
import importlib.util
import tomllib

import pytest

from .helpers import LESSON

LIBRARIES = ("tiktoken", "tokenizers", "transformers", "sentencepiece", "youtokentome", "torchtext")


@pytest.mark.parametrize("library", LIBRARIES)
def test_no_tokenizer_library_is_installed_where_submissions_run(library):
    assert importlib.util.find_spec(library) is None, (
        f"{library} is importable in the kit's environment: a BPE submission could use it. Add its names to "
        "grader/bpe/forbidden.toml [names] anywhere and a test that a submission using it loses the part")


def test_the_policy_names_the_libraries_students_reach_for():
    policy = tomllib.loads((LESSON / "forbidden.toml").read_text(encoding="utf-8"))
    assert {"tiktoken", "sentencepiece"} <= set(policy["names"]["anywhere"])

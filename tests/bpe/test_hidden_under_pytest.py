"""The instructor's way to read the hidden tests on one trusted submission: `pytest grader/bpe/tests
[--submission PATH]` (grader/bpe/tests/conftest.py)."""
import subprocess
import sys
import tomllib

from .helpers import IDS_BEFORE_SPECIALS, LESSON, REFUSES_MINIMUM, ROOT, patched


def _pytest(*args):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(LESSON / "tests"), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_reference_passes_every_hidden_test():
    rubric = tomllib.loads((LESSON / "rubric.toml").read_text(encoding="utf-8"))
    graded = sum(len(rubric[part]) for part in ("training", "tokenizer"))  # every test with points
    done = _pytest()
    assert done.returncode == 0 and f"{graded} passed" in done.stdout, done.stdout[-2000:]


def test_a_submission_with_a_mistake_fails_its_parts_tests_only():
    done = _pytest("--submission", str(ROOT / "demo" / "bpe" / "class" / "dmitri_decode_per_token"), "-m", "training")
    assert done.returncode == 0 and "8 passed" in done.stdout, done.stdout[-2000:]
    done = _pytest("--submission", str(ROOT / "demo" / "bpe" / "class" / "dmitri_decode_per_token"), "-m", "tokenizer")
    assert done.returncode == 1 and "6 failed" in done.stdout, done.stdout[-2000:]


def _submission(folder, patches):
    folder.mkdir()
    for name, text in patched(patches).items():
        (folder / name).write_text(text, encoding="utf-8")
    return str(folder)


def test_refusing_the_smallest_vocabulary_costs_the_vocab_size_test_only(tmp_path):
    """CONTRACT: `len(vocab) == vocab_size`, and only a size below 256 + len(special_tokens) is a ValueError."""
    done = _pytest("--submission", _submission(tmp_path / "min", REFUSES_MINIMUM), "-m", "training")
    assert done.returncode == 1 and "1 failed, 7 passed" in done.stdout, done.stdout[-2000:]
    assert "FAILED grader/bpe/tests/test_training.py::test_vocab_size" in done.stdout, done.stdout[-2000:]
    assert "only vocab_size < 256 + len(special_tokens) is a ValueError" in done.stdout, done.stdout[-2000:]


def test_an_error_in_encode_leaves_the_vocabulary_test_passing(tmp_path):
    """Its steps run on after an error (keep_going): the students' visible test agrees (test_visible_tests.py)."""
    done = _pytest("--submission", _submission(tmp_path / "ids", IDS_BEFORE_SPECIALS), "-k", "vocab_unchanged")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:]

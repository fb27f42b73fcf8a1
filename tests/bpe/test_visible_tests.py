"""The BPE students' visible tests (assignments/bpe/tests/), run as a student runs them: pytest in a
temporary folder holding the tests, pytest.ini and two files, in a subprocess."""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from grader.release import stubs

from .helpers import (ASSIGNMENT, CHANGES_VOCAB_THEN_RAISES, FILES, IDS_BEFORE_SPECIALS, REFERENCE, REFUSES_MINIMUM,
                      VARIANTS, patched)


def student_folder(tmp_path, sources: dict) -> object:
    folder = tmp_path / "student"
    (folder / "tests").mkdir(parents=True)
    for test_file in (ASSIGNMENT / "tests").glob("*.py"):
        (folder / "tests" / test_file.name).write_bytes(test_file.read_bytes())
    for name in ("pytest.ini", "Makefile"):
        (folder / name).write_bytes((ASSIGNMENT / name).read_bytes())
    for name, text in sources.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def run_visible(folder, *args) -> dict:
    """{test id: (outcome, message)} of pytest in the student folder."""
    report = folder / "report.xml"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "BUILD_NUMBER")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}", *args],
                   cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        outcomes[case.get("name")] = ("passed", "") if failure is None else ("failed", failure.get("message", ""))
    return outcomes


def from_dir(directory):
    return {name: (directory / name).read_text(encoding="utf-8") for name in FILES}


def test_the_reference_passes_every_visible_test(tmp_path):
    outcomes = run_visible(student_folder(tmp_path, from_dir(REFERENCE)))
    assert len(outcomes) >= 20
    assert all(o == "passed" for o, _ in outcomes.values()), {k: v for k, v in outcomes.items() if v[0] != "passed"}


def test_the_stubs_fail_every_visible_test_saying_what_to_write(tmp_path):
    """Every test but the pattern's (PATTERN is given in the stubs: the test checks it is left unchanged)."""
    outcomes = run_visible(student_folder(tmp_path, stubs.stub_texts_of(REFERENCE)))
    assert outcomes.pop("test_s2_pretokens") == ("passed", "")
    assert outcomes and all(o == "failed" for o, _ in outcomes.values()), outcomes
    assert all("not implemented yet" in message or "NotImplementedError" in message
               for test, (_, message) in outcomes.items() if "vocab_size_too_small" not in test), outcomes


@pytest.mark.parametrize("variant", sorted(p.name for p in VARIANTS.iterdir() if p.is_dir()))
def test_every_correct_variant_passes(tmp_path, variant):
    outcomes = run_visible(student_folder(tmp_path, from_dir(VARIANTS / variant)))
    assert all(o == "passed" for o, _ in outcomes.values()), {k: v for k, v in outcomes.items() if v[0] != "passed"}


def _failed(outcomes: dict) -> dict:
    return {test: message for test, (outcome, message) in outcomes.items() if outcome != "passed"}


def test_refusing_the_smallest_vocabulary_fails_one_test_that_names_the_rule(tmp_path):
    """CONTRACT: only vocab_size < 256 + len(special_tokens) is a ValueError; a submission that refuses the size
    itself (room for no merge) is told so, with and without special tokens, and passes everything else."""
    failed = _failed(run_visible(student_folder(tmp_path, patched(REFUSES_MINIMUM))))
    assert list(failed) == ["test_s3_vocab_size_at_the_minimum"], failed
    message = failed["test_s3_vocab_size_at_the_minimum"]
    assert "ValueError" in message and "vocab_size < 256 + len(special_tokens)" in message, message
    assert "train_bpe('banana<|end|>bandana', 256, [])" in message, message  # the first case: no special token


def test_an_error_in_encode_is_not_blamed_on_the_vocabulary(tmp_path):
    """An encode that raises (a KeyError on a new special token) fails the encode tests, not the test that the
    vocab passed in is unchanged: the student's vocab did not change."""
    outcomes = run_visible(student_folder(tmp_path, patched(IDS_BEFORE_SPECIALS)))
    assert outcomes["test_s6_the_vocabulary_passed_in_is_not_changed"] == ("passed", ""), outcomes
    assert "KeyError" in _failed(outcomes)["test_s6_special_tokens"]


def test_a_vocabulary_changed_before_an_error_in_encode_still_fails(tmp_path):
    failed = _failed(run_visible(student_folder(tmp_path, patched(CHANGES_VOCAB_THEN_RAISES))))
    message = failed["test_s6_the_vocabulary_passed_in_is_not_changed"]
    assert "after encode and decode" in message and "KeyError" not in message, message


def test_one_part_at_a_time_with_its_marker(tmp_path):
    folder = student_folder(tmp_path, from_dir(REFERENCE))
    training = run_visible(folder, "-m", "training")
    tokenizer = run_visible(folder, "-m", "tokenizer")
    assert training and tokenizer and not set(training) & set(tokenizer)

"""grader/devtools/shipped_history.py: every version of a lesson's shipped files stays the kit's, so a student who
hands back an earlier release's tests is not read or flagged for them."""
import hashlib

import pytest
from engine_helpers import TOY

from grader.devtools import shipped_history
from grader.judging import source_scan
from grader.lesson import lesson_names, load_lesson


@pytest.mark.parametrize("name", [*lesson_names(), str(TOY)])
def test_each_lessons_record_holds_the_current_versions_of_its_shipped_files(name):
    # Changing a shipped file (a visible test, the _feedback package, a tool) means recording its new version.
    assert shipped_history.main(["--lesson", name, "--check"]) == 0


def test_a_file_handed_back_as_an_earlier_release_shipped_it_is_the_kits_and_an_edited_one_is_read(tmp_path):
    earlier = b"def helper():\n    return globals()\n"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_bytes(earlier.replace(b"\n", b"\r\n"))  # a Windows checkout
    (tmp_path / "tests" / "extra.py").write_bytes(earlier)
    versions = {"tests/conftest.py": frozenset({hashlib.sha256(earlier).hexdigest()})}
    sources, _ = source_scan.snapshot(tmp_path, "notebook", kit={"tests/conftest.py": b"# the current version\n"},
                                      earlier=versions)
    assert [name for name, _, _ in sources] == ["tests/extra.py"]  # the same text at another path is read
    (tmp_path / "tests" / "conftest.py").write_bytes(earlier + b"x = 1\n")
    sources, _ = source_scan.snapshot(tmp_path, "notebook", kit={}, earlier=versions)
    assert sorted(name for name, _, _ in sources) == ["tests/conftest.py", "tests/extra.py"]


def test_the_record_is_read_as_the_scan_uses_it():
    from grader.release.student_release import shipped_history as read_history

    toy = load_lesson(str(TOY))
    recorded = read_history(lesson=toy)
    assert recorded and all(isinstance(d, frozenset) and d for d in recorded.values())
    assert {(digest, path) for path, digests in recorded.items() for digest in digests} >= shipped_history.current(toy)

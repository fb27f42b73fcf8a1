"""The parallel run's order (tests/conftest.py, LongestFirst) names only work that exists: a file renamed or a
test removed would silently drop to the back of the queue, where a long one keeps the other worker waiting."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _suite_conftest():
    spec = importlib.util.spec_from_file_location("_suite_conftest", ROOT / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_longest_entry_names_a_test_file_or_test_that_exists():
    conftest = _suite_conftest()
    missing = []
    for unit in [*conftest.LONGEST, *conftest.EACH_TEST_ALONE, *conftest.ALONE_TESTS]:
        path, _, test = unit.partition("::")
        source = ROOT / path
        if not source.is_file() or (test and f"def {test}(" not in source.read_text(encoding="utf-8")):
            missing.append(unit)
    assert missing == [], f"tests/conftest.py orders work that is not there: {missing}"
    assert conftest.expected_seconds("tests/engine/test_visible_parity.py::any[case]") > 0
    assert conftest.expected_seconds("tests/no_such_file.py") == 0


def test_a_test_named_alone_is_its_own_unit_and_the_rest_of_its_file_one_unit():
    conftest = _suite_conftest()
    course = "tests/day13/test_nbgrader_course.py"
    alone = f"{course}::test_the_readme_course_gives_a_correct_student_full_marks"
    assert alone in conftest.ALONE_TESTS
    assert conftest.work_unit(alone) == alone
    assert conftest.work_unit(f"{course}::test_a_step_left_out_stops_autograde_with_what_to_do[lesson]") == course
    assert conftest.work_unit("tests/engine/test_visible_parity.py::t[a]") == "tests/engine/test_visible_parity.py::t[a]"
    assert conftest.work_unit("tests/engine/test_run.py::t") == "tests/engine/test_run.py"
    # The test alone is expected to take its own figure, the rest of its file the file's.
    assert conftest.expected_seconds(alone) == conftest.LONGEST[alone]
    assert conftest.expected_seconds(course) == conftest.LONGEST[course]

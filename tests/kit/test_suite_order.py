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
    for unit in [*conftest.LONGEST, *conftest.EACH_TEST_ALONE]:
        path, _, test = unit.partition("::")
        source = ROOT / path
        if not source.is_file() or (test and f"def {test}(" not in source.read_text(encoding="utf-8")):
            missing.append(unit)
    assert missing == [], f"tests/conftest.py orders work that is not there: {missing}"
    assert conftest.expected_seconds("tests/engine/test_visible_parity.py::any[case]") > 0
    assert conftest.expected_seconds("tests/no_such_file.py") == 0

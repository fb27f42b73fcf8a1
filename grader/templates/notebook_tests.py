"""Run the visible tests (tests/) on a notebook's code, in the notebook's own kernel.

The release ships this file as tools/notebook_tests.py. Each test cell of the notebook runs one
visible test, `visible_test("test_self_attention.py::test_s3_two_tokens")`, with pytest, exactly as
`make test` runs it on the .py files (the same conftest.py, checks, messages and hints); only the
code under test differs: it is what the notebook's cells defined, not the .py files. A failing test
fails its cell with the short report `make test` prints. tools/ci_feedback.py runs the same tests
through `run_tests`, so the feedback on a push is the notebook's too.

How the notebook's code reaches the tests: the tests import each part (`import self_attention`);
while they run, such an import gives the notebook's names instead of the file's. Where a part's file
imports a name from another part (`from self_attention import scaled_dot_product_attention` in
multihead.py), the tests put a stand-in in the other part's place, so that each part is tested on
its own; a notebook has one namespace, so that name is rebound to the stand-in while the test runs
and given back afterwards.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import io
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1]  # the student folder: tests/, pytest.ini, the notebook
TESTS = FOLDER / "tests"


# Plugins that only turn stray exceptions (in __del__, in threads) into warnings; each run they would
# collect the garbage several times over, most of a one-test run's time. They decide no outcome.
QUICK = ("-p", "no:unraisableexception", "-p", "no:threadexception")


class VisibleTestFailed(AssertionError):
    """A visible test failed. Jupyter shows the test's report only, not this runner's traceback."""

    def _render_traceback_(self):  # IPython's hook for how an exception is shown
        return str(self).split("\n")


class _NotebookParts(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of the parts' modules, answered from the notebook's namespace."""

    def __init__(self, namespace: dict, parts, sibling_imports: dict):
        self.namespace, self.parts, self.sibling_imports = namespace, tuple(parts), dict(sibling_imports)
        self.rebound: dict = {}  # name -> the notebook's own value, while a stand-in takes its place

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in self.parts else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        sibling, name = self.sibling_imports.get(module.__name__, (None, None))
        other = sys.modules.get(sibling) if sibling else None
        # A sibling that is not the notebook's is the tests' stand-in: it takes the name's place.
        if other is not None and getattr(other.__spec__, "loader", None) is not self and hasattr(other, name):
            self.rebound.setdefault(name, self.namespace.get(name, _MISSING))
            self.namespace[name] = getattr(other, name)
        module.__dict__.update({k: v for k, v in self.namespace.items() if not k.startswith("__")})

    def __enter__(self):
        sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc):
        sys.meta_path.remove(self)
        for name, value in self.rebound.items():
            if value is _MISSING:
                self.namespace.pop(name, None)
            else:
                self.namespace[name] = value
        self.rebound.clear()
        for name in self.parts:
            module = sys.modules.get(name)
            if module is not None and getattr(module.__spec__, "loader", None) is self:
                del sys.modules[name]


_MISSING = object()


def cell_files(namespace: dict) -> dict[str, str]:
    """File name a kernel compiled a notebook cell under -> how a message names it ("Cell In[7]").

    The tests count an error raised there as the student's (their conftest.py, NOTEBOOK_CELLS)."""
    numbers = {}
    try:
        numbers = dict(get_ipython().compile._filename_map)  # noqa: F821 - defined inside IPython only
    except (NameError, AttributeError):
        pass
    files = {}
    for value in list(namespace.values()):
        functions = [value]
        if isinstance(value, type):
            functions = [getattr(f, "__func__", getattr(f, "fget", f)) for f in vars(value).values()]
        for function in functions:
            code = getattr(function, "__code__", None)
            if code is not None and not Path(code.co_filename).is_file():
                number = numbers.get(code.co_filename)
                files[code.co_filename] = f"Cell In[{number}]" if number else code.co_filename
    return files


class _Collect:
    """A pytest plugin: one outcome per test (its first phase that did not pass), and the notebook's cells
    handed to the tests' conftest.py so that an error in them is reported as the student's; with them, what
    the earlier test cells did (`outcomes`, kept up to date), so that a mistake they rule out is not named."""

    def __init__(self, cells: dict[str, str], parts, outcomes: dict):
        self.cells, self.parts, self.results, self.outcomes = cells, tuple(parts), {}, outcomes
        self.live: dict | None = None

    def pytest_collection_finish(self, session):
        for plugin in session.config.pluginmanager.get_plugins():
            if isinstance(getattr(plugin, "NOTEBOOK_CELLS", None), dict):
                plugin.NOTEBOOK_CELLS.clear()
                plugin.NOTEBOOK_CELLS.update(self.cells)
            if isinstance(getattr(plugin, "VISIBLE_OUTCOMES", None), dict):
                self.live = plugin.VISIBLE_OUTCOMES
                self.live.update(self.outcomes)

    def pytest_runtest_logreport(self, report):
        entry = self.results.setdefault(report.nodeid, {
            "part": next((p for p in self.parts if p in report.keywords), "other"),
            "passed": True, "message": "", "report": "", "seconds": 0.0})
        entry["seconds"] += report.duration
        if report.failed and entry["passed"]:
            crash = getattr(report.longrepr, "reprcrash", None)
            entry.update(passed=False, message=crash.message if crash else str(report.longrepr),
                         report=report.longreprtext)


def run_tests(namespace: dict, args, *, parts, sibling_imports, outcomes: dict | None = None) -> dict[str, dict]:
    """Run pytest with `args` (test ids under tests/, options) on the notebook's code in `namespace`.

    nodeid -> {"part", "passed", "message" (pytest's one-line reason), "report" (its short report), "seconds"}.
    Every run imports tests/ afresh, so a test always sees the notebook's code as it is now. `outcomes` is what
    earlier runs on the same code did, updated with this run's (the tests' conftest.py, VISIBLE_OUTCOMES)."""
    import pytest

    outcomes = {} if outcomes is None else outcomes
    plugin = _Collect(cell_files(namespace), parts, outcomes)
    before = set(sys.modules)
    try:
        with _NotebookParts(namespace, parts, sibling_imports):
            with contextlib.redirect_stdout(io.StringIO()):  # the report is the cell's, not pytest's listing
                pytest.main(["-p", "no:cacheprovider", *QUICK, "--rootdir", str(FOLDER), "-c", str(FOLDER / "pytest.ini"),
                             *(args or [str(TESTS)])], plugins=[plugin])
    finally:
        for name in set(sys.modules) - before:  # the tests' own modules: imported afresh next time
            path = getattr(sys.modules[name], "__file__", None) or ""
            if Path(path).resolve().parent == TESTS:
                del sys.modules[name]
        if str(TESTS) in sys.path:
            sys.path.remove(str(TESTS))
        if plugin.live is not None:
            outcomes.update(plugin.live)
    return plugin.results


class VisibleTests:
    """`visible_test(test)` in a notebook: run one visible test on the notebook's code; fail if it fails."""

    def __init__(self, namespace: dict, *, parts, sibling_imports):
        self.namespace, self.parts, self.sibling_imports = namespace, tuple(parts), dict(sibling_imports)
        # What the test cells did so far, while the notebook's functions and classes are the ones they ran on.
        self.outcomes: dict = {}
        self._ran_on: dict = {}

    def _same_code(self) -> dict:
        """The outcomes of earlier cells, forgotten once a function or class of the notebook was (re)defined."""
        code = {name: value for name, value in self.namespace.items()
                if not name.startswith("_") and callable(value) and value is not self}
        if code.keys() != self._ran_on.keys() or any(code[name] is not self._ran_on[name] for name in code):
            self.outcomes.clear()
            self._ran_on = code
        return self.outcomes

    def run(self, tests=()) -> dict[str, dict]:
        """Every visible test (or those of `tests`, ids under tests/) on the notebook's code, one part at a
        time (a part's stand-ins hold their names' places only while its own tests run)."""
        results = {}
        for part in self.parts:
            chosen = [str(TESTS / t) for t in tests if t.startswith(f"test_{part}.py::")]
            if tests and not chosen:
                continue
            results.update(run_tests(self.namespace, chosen or [str(TESTS / f"test_{part}.py")],
                                     parts=self.parts, sibling_imports=self.sibling_imports,
                                     outcomes=self._same_code()))
        return results

    def __call__(self, test: str) -> None:
        file, _, name = test.partition("::")
        if not (TESTS / file).is_file():
            raise FileNotFoundError(f"tests/{file} is missing: the notebook's test cells run the visible tests "
                                    "of the tests/ folder beside it. Keep the notebook in the folder you were given.")
        results = run_tests(self.namespace, [str(TESTS / file) + "::" + name],
                            parts=self.parts, sibling_imports=self.sibling_imports, outcomes=self._same_code())
        if not results:
            raise VisibleTestFailed(f"{name}: no such visible test in tests/{file} (is tests/ up to date?)")
        failed = [r for r in results.values() if not r["passed"]]
        if failed:
            raise VisibleTestFailed(f"{name} failed:\n" + failed[0]["report"].rstrip())
        print(f"{name}: passed")

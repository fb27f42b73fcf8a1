"""`VisibleTests`: one lesson's visible tests, as its conftest.py describes them, with the engine's feedback.

The conftest builds one and puts its fixtures and hooks among its own names:

    VISIBLE = VisibleTests(__file__, parts=("first_task", "second_task"))
    globals().update(VISIBLE.conftest_names())

Every piece of state of a run (the modules imported, what has been told) lives on this object, so the
notebook's runner, which imports the tests afresh each time, starts clean each time.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import sys
from pathlib import Path

import pytest

from . import library
from .checks import Check, Evidence
from .errors import DoesNotImport, StudentErrors

try:  # the release ships the engine's siblings.py inside this package
    from . import siblings
except ImportError:  # the kit's own copy of this package
    from grader.running import siblings

KNOWN_MISTAKES = "known_mistakes.json"


class VisibleTests:
    """The visible tests of one lesson.

    tests_file   the conftest's __file__: the student's folder is the one above tests/
    parts        the contract's modules in the order of the tasks; each is a fixture of that name, and a
                 pytest marker of that name says which part a test checks
    stand_ins    {part: modules it is tested over stand-ins of}, and `make_stand_in(module name)` builds one
    wrap         what a part's fixture hands the tests instead of the module itself (say, layers in eval mode)
    check        the `check` fixture's class (a subclass of checks.Check for the lesson's value types)
    error_fact, error_hints   the lesson's facts about an error raised in student code, and their words
    """

    def __init__(self, tests_file, *, parts, stand_ins=None, make_stand_in=None, wrap=None, check=Check,
                 error_fact=None, error_hints=None):
        tests = Path(tests_file).resolve().parent
        self.parts = tuple(parts)
        self.stand_ins = {part: tuple(deps) for part, deps in (stand_ins or {}).items()}
        self.make_stand_in, self.wrap, self.check_class = make_stand_in, wrap, check
        self.known = _read_json(tests / KNOWN_MISTAKES)
        self.policy = self.known.get("forbidden", {})
        self.evidence = Evidence(self.known)
        self.watch = library.Watch()
        self.loaded: dict[str, object] = {}
        # What a part tested over stand-ins saw of its siblings when imported, kept in place while its tests run:
        # code that reaches a sibling at call time (an import inside forward) or through a helper module of the
        # student's own reaches the stand-in there too, as in the hidden grading (held-out s48).
        self.views: dict[str, dict] = {}
        self._sources: dict[str, str] = {}  # a part's source, read once (siblings.handed_on reads it)
        self._named: dict[str, tuple[str, ...]] = {}
        self.errors = StudentErrors(tests.parent, error_fact=error_fact, error_hints=error_hints)
        self.use_folder(tests.parent)

    # -- where the student's files are -------------------------------------------------------------
    @property
    def folder(self) -> Path:
        return self.errors.folder

    def use_folder(self, folder: Path) -> None:
        """Test the files of `folder` (the kit's fingerprint builder points the tests at each mutant in turn),
        with nothing of the previous folder loaded or remembered."""
        old = str(getattr(self, "_on_path", ""))
        if old and old in sys.path:
            sys.path[:] = [str(folder) if p == old else p for p in sys.path]
        elif str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        self._on_path = folder
        self.errors.folder = folder
        self.loaded.clear()
        self.views.clear()
        self._sources.clear()
        self._named.clear()
        self.errors.forget()
        self.evidence.outcomes.clear()
        for name in self.parts:
            sys.modules.pop(name, None)
        importlib.invalidate_caches()

    # -- the student's modules ---------------------------------------------------------------------
    def module(self, name: str):
        """The student's module `name`, imported with its stand-ins in place of the parts it is tested over;
        a module that raises on import becomes a DoesNotImport, which fails each test that uses it."""
        if name in self.loaded:
            return self.loaded[name]
        replaced = self.stand_ins.get(name, ())
        over = {dep: self._over_stand_in(dep, name) for dep in replaced}
        saved = {dep: sys.modules.pop(dep, None) for dep in (name, *replaced)}
        sys.modules.update(over)
        try:
            module = importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - a broken file must fail its tests, not stop the whole run
            module = DoesNotImport(name, error)
        finally:
            for dep in replaced:
                sys.modules.pop(dep, None)
            sys.modules.pop(name, None)
            sys.modules.update({dep: m for dep, m in saved.items() if m is not None})
        self.loaded[name] = module
        if over and not isinstance(module, DoesNotImport):
            self.views[name] = over
        return module

    @contextlib.contextmanager
    def standing_in(self, part: str | None):
        """While a test of `part` runs: its siblings' stand-ins where its import saw them (views), and in the globals
        of the student's other modules that hold a replaced object of theirs (siblings.held_elsewhere); put back
        after."""
        held: list = []
        try:
            if part in self.views:
                puts = [(sys.modules, dep, m) for dep, m in self.views[part].items()]
                for namespace, key, value in puts + self._held_elsewhere(part):
                    siblings.put(held, namespace, key, value)
            yield
        finally:
            siblings.put_back(held)

    def _held_elsewhere(self, part: str) -> list:
        """Found for each test, as the hidden grading finds them (grader/running/executor.py, ModuleLoader.
        _held_elsewhere): only a folder with a module of the student's own beside the parts can hold them, and the
        sibling's source says which of its names it hands on from one. Each test looks again: a helper an earlier
        test imported (inside forward, say) is held too."""
        prefix = str(self.folder) + os.sep
        helpers = {n: m for n, m in list(sys.modules.items()) if n not in self.parts
                   and isinstance(getattr(m, "__file__", None), str) and m.__file__.startswith(prefix)}
        if not helpers:
            return []
        namespaces = [vars(self.loaded[part]), *(vars(m) for m in helpers.values())]
        found = []
        for dep, stand_in in self.views[part].items():
            found += siblings.held_in_helpers(namespaces, self._source(dep), helpers, stand_in)
        return found

    def _source(self, part: str) -> str:
        if part not in self._sources:
            self._sources[part] = siblings.module_source(self.folder, part) or ""
        return self._sources[part]

    def _over_stand_in(self, dep: str, name: str):
        """What `dep` is while `name`, tested over its stand-in, imports: the stand-in; and when `name`'s file takes a
        helper of the student's own from `dep` too, the student's `dep` with the stand-in's names in place of theirs,
        as the hidden grading does. Only then is their `dep` imported for it (siblings.py says why)."""
        stand_in = self.make_stand_in(dep)
        if not (self.folder / f"{name}.py").is_file():
            return stand_in
        provided = {k for k in vars(stand_in) if not k.startswith("__")}
        if (not siblings.takes_more_through(name, dep, provided, functools.partial(siblings.module_source, self.folder),
                                            parts=self.parts)
                or isinstance(own := self.module(dep), DoesNotImport)):
            return stand_in
        return siblings.bound_over(own, stand_in)

    def named_in_source(self, part: str) -> tuple[str, ...]:
        if part not in self._named:
            self._named[part] = library.named_in_source(self.folder / f"{part}.py", self.policy)
        return self._named[part]

    def part_of(self, item) -> str | None:
        return next((p for p in self.parts if item.get_closest_marker(p)), None)

    # -- what the conftest gets --------------------------------------------------------------------
    def conftest_names(self) -> dict:
        """The fixtures (one per part, `check`) and hooks the conftest defines, by name."""
        names = {f"_part_{part}": self._part_fixture(part) for part in self.parts}
        visible = self

        @pytest.fixture(name="check")
        def check():
            return visible.check_class(visible.evidence)

        @pytest.fixture(autouse=True)
        def _evidence(request):
            visible.evidence.start(request.node.name)

        def pytest_collection_modifyitems(items):
            # Tests run in the order of the tasks, not in the alphabetical order of their files; a stable
            # sort keeps a part's tests in its file's order.
            order = {part: n for n, part in enumerate(visible.parts)}
            items.sort(key=lambda item: order.get(visible.part_of(item), len(order)))

        # Each test's outcome reaches the evidence here, not in a report hook: the kit's fingerprint builder runs the
        # tests without reports (runtestprotocol(log=False)), and the audit reads what its runs were told.
        @pytest.hookimpl(wrapper=True)
        def pytest_pyfunc_call(pyfuncitem):
            visible.watch.used.clear()
            passed = False
            try:
                try:
                    with visible.standing_in(visible.part_of(pyfuncitem)):
                        outcome = yield
                except NotImplementedError as error:
                    message = visible.errors.not_implemented(error, pyfuncitem.name)
                except Exception as error:  # noqa: BLE001 - an error in student code becomes one short, located message
                    message = visible.errors.raised(error, pyfuncitem.name)
                    if message is None:
                        raise
                else:
                    part = visible.part_of(pyfuncitem)
                    named = visible.named_in_source(part) if part else ()
                    if not named and not visible.watch.used:
                        passed = True
                        return outcome
                    message = library.message(visible.policy, set(named) | visible.watch.used)
                # Failing outside the except block keeps the report to a few lines, without the chained traceback.
                pytest.fail(message, pytrace=False)
            finally:
                visible.evidence.finish(pyfuncitem.name, passed)

        return {**names, "check": check, "_evidence": _evidence,
                "pytest_collection_modifyitems": pytest_collection_modifyitems,
                "pytest_pyfunc_call": pytest_pyfunc_call,
                # tools/notebook_tests.py finds this dict among the plugins and fills it (errors.StudentErrors.cells)
                "NOTEBOOK_CELLS": self.errors.cells,
                # ...and this one: what the notebook's earlier test cells did (checks.Evidence.outcomes)
                "VISIBLE_OUTCOMES": self.evidence.outcomes}

    def _part_fixture(self, part: str):
        visible = self

        @pytest.fixture(name=part)
        def fixture():
            module = visible.module(part)
            return module if visible.wrap is None or isinstance(module, DoesNotImport) else visible.wrap(module)

        return fixture


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}

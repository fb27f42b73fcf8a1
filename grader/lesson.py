"""A lesson as the engine sees it: one object, read from the lesson's own folder.

A lesson is a folder with a `lesson.toml` beside its `rubric.toml`: a package under grader/ (found by
its name) or a folder anywhere (found by its path). The file says what the engine cannot guess (the
contract, its modules and graded names, which parts are graded over the grader's stand-ins, where the
reference and the student folder are); everything with points comes from the rubric, read here by the
one rubric loader the engine has. The engine asks `load_lesson()` (or `load_lesson(name or path)`, from
`--lesson`) when it needs the lesson, never at import, and never names a lesson itself, so a second
lesson is a second folder, not an edit to the engine.

A lesson found by path is imported as the package `_grader_lesson_<name>_<digest of its path>`
(registered below), so its modules never shadow the engine's, nor a lesson's of the same folder name.

Standard library only: the sandboxed child and the stdlib-only stages (regrade, collect) load it too.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ENGINE = Path(__file__).resolve().parent
ROOT = ENGINE.parent
DECLARATION = "lesson.toml"
# `--lesson NAME|PATH` sets this for the whole run, sandboxed children included (a path as an absolute one).
LESSON_ENV = "GRADER_LESSON"
PATH_PACKAGE_PREFIX = "_grader_lesson_"  # the importable name of a lesson found by path
# Rubric tables that configure grading rather than hold a part's tests.
RUBRIC_SETTINGS = frozenset({"meta", "hints", "facts", "visibility", "late"})


class LessonError(RuntimeError):
    """A lesson that cannot be found or whose declaration is incomplete."""


# -- the one rubric loader --------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _rubric(path: str, version: tuple) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def read_rubric(path) -> dict:
    """The rubric at `path` as a dict, parsed once per file version (a batch reads it hundreds of
    times). Callers must not modify the dict they get."""
    path = os.fspath(path)
    found = os.stat(path)
    return _rubric(path, (found.st_ino, found.st_size, found.st_mtime_ns))


def _has_points(entry) -> bool:
    points = entry.get("points") if isinstance(entry, dict) else None
    return isinstance(points, (int, float)) and not isinstance(points, bool)


def rubric_components(rubric: dict) -> tuple[str, ...]:
    """The parts a rubric grades, in the order the rubric lists them: every top-level table (other
    than the settings tables) with at least one entry worth points."""
    return tuple(name for name, table in rubric.items()
                 if name not in RUBRIC_SETTINGS and isinstance(table, dict)
                 and any(_has_points(entry) for entry in table.values()))


def rubric_points(rubric: dict, components) -> dict[str, float]:
    """Points per part, summed over every rubric entry that has `points`. An entry counts for the
    part its table path names (`[block.gradients]`), or its `component` key, or its `id` prefix."""
    components = tuple(components)
    totals = {c: 0.0 for c in components}

    def walk(node, path):
        if isinstance(node, dict):
            if _has_points(node):
                component = node.get("component") or next((p for p in path if p in components), None)
                if component is None and "id" in node:
                    component = str(node["id"]).split(".")[0]
                if component in totals:
                    totals[component] += float(node["points"])
                return
            for key, value in node.items():
                walk(value, path + str(key).split("."))
        elif isinstance(node, list):
            for item in node:
                walk(item, path)

    walk(rubric, [])
    return {c: round(v, 4) for c, v in totals.items()}


# -- the lesson ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lesson:
    name: str  # the folder's name (and, under grader/, its package's)
    folder: Path
    package: str  # importable name of the lesson's folder
    title: str
    contract: Path  # the student contract (a Markdown file), the source of the names below
    assignment: Path  # the student folder: stubs, visible tests, README, tools
    solutions: Path  # the reference
    notebook: str  # file name of the notebook a student may work in
    graded_names: dict[str, tuple[str, ...]]  # contract module -> the names it must define, in order
    always_standin: dict[str, tuple[str, ...]]  # module -> the parts it is always graded over stand-ins of
    standin_names: dict[str, dict[str, str]]  # stand-in module -> {contract name: name in the stand-ins file}
    sibling_imports: dict[str, tuple[str, str]]  # module -> (sibling module, name it imports from there)
    attention_components: tuple[str, ...]  # parts whose evidence the class report draws as heatmaps
    notebook_cells: tuple[str, ...]  # parts that have notebook cells
    notebook_texts: Path  # the notebook's prose (TOML: intro, closing), in the lesson's folder
    deliverables_component: str
    deliverables_checks: Path | None  # the module defining the deliverable checks (CHECKS), if any; ships to students
    deliverables_data: tuple[Path, ...]  # files it reads beside itself; they ship with it
    demo_class: Path | None  # a class of submissions to grade as an example (README, docs)
    example_course: dict[str, str]  # the README's example course: row name -> folder of the demo class
    example_feedback: str  # the example course's row whose feedback the README shows
    rubric_path: Path
    forbidden_path: Path
    limits_path: Path
    tests_folder: Path
    tests_package: str  # importable name of the hidden tests' package
    standins_module: str  # importable names of the lesson's modules
    catalogue_module: str
    tolerances_module: str
    adapter_class: str  # "package.module:Class": the hidden tests' adapter (a grader.running.calls.Adapter)
    variants: Path | None  # correct implementations the kill rate grades (none: no false-failure figure)
    skeletons: Path | None  # skeletons (shapes, no computation) the kill rate grades
    skeleton_parts: dict[str, str]  # a part skeleton's name prefix -> the part it replaces
    bench_mutants: tuple[str, ...]  # catalogue bugs `make bench` plants in its synthetic class
    bench_pictures: tuple[str, ...]  # deliverable pictures the similarity benchmark resizes and hands in
    label: str = ""  # how the course names the lesson beside its title ("Day 13"), if at all

    @property
    def heading(self) -> str:
        """The lesson as the headings of its pages name it: "<label> · <title>", or the title alone."""
        return f"{self.label} · {self.title}" if self.label else self.title

    @property
    def ref(self) -> str:
        """What `--lesson` takes to find this lesson again: its name under grader/, else its folder's path."""
        return self.name if self.folder.parent == ENGINE else str(self.folder)

    @property
    def modules(self) -> tuple[str, ...]:
        """The contract's modules (one graded part each), in grading order."""
        return tuple(self.graded_names)

    @property
    def file_of(self) -> dict[str, str]:
        """Contract module -> its file name."""
        return {m: f"{m}.py" for m in self.modules}

    @property
    def contract_file_of(self) -> dict[str, str]:
        """Graded name -> the contract file it belongs to."""
        return {name: f"{module}.py" for module, names in self.graded_names.items() for name in names}

    def rubric(self) -> dict:
        return read_rubric(self.rubric_path)

    @property
    def components(self) -> tuple[str, ...]:
        """Every graded part, from the rubric: the contract's modules, then the rest (deliverables)."""
        return rubric_components(self.rubric())

    @property
    def points(self) -> dict[str, float]:
        return rubric_points(self.rubric(), self.components)

    @property
    def deliverables_module(self) -> str | None:
        """Importable name of the module that defines the deliverable checks (None: the lesson has none)."""
        return f"{self.package}.{self.deliverables_checks.stem}" if self.deliverables_checks else None

    def deliverable_checks(self) -> tuple:
        """The lesson's deliverable checks, ((check id, check), ...), for grader.judging.deliverables.run_checks.
        Imported on first use: the checks need numpy and Pillow."""
        if self.deliverables_module is None:
            return ()
        return importlib.import_module(self.deliverables_module).CHECKS

    def test_module(self, component: str) -> str:
        """Importable name of the hidden tests for one part."""
        return f"{self.tests_package}.test_{component}"

    def adapter(self) -> type:
        """The class the hidden tests ask a submission through: the engine's call plumbing with the
        lesson's request builders (imported on first use: the sandboxed child never needs it)."""
        module, _, name = self.adapter_class.partition(":")
        return getattr(importlib.import_module(module), name)


def lesson_names(engine: Path = ENGINE) -> list[str]:
    """Every lesson folder under the engine: a package that declares itself with lesson.toml."""
    return sorted(p.parent.name for p in engine.glob(f"*/{DECLARATION}"))


def _strings(table: dict, where: str) -> dict[str, tuple[str, ...]]:
    out = {}
    for key, value in table.items():
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise LessonError(f"{where}: {key} must be a list of names")
        out[key] = tuple(value)
    return out


def _adapter_class(package: str, declared_as, where: Path) -> str:
    """`module:Class` in lesson.toml, the module named within the lesson's package; a lesson that
    declares none asks through the engine's plain adapter (calls by hand, no request builders)."""
    if declared_as is None:
        return f"{ENGINE.name}.running.calls:Adapter"
    module, colon, name = str(declared_as).partition(":")
    if not (colon and module and name.isidentifier()):
        raise LessonError(f"{where}: adapter = {declared_as!r}; write it as \"module:Class\" (a module of the lesson)")
    return f"{package}.{module}:{name}"


def _kit_path(relative) -> Path | None:
    return None if relative is None else ROOT / str(relative)


@lru_cache(maxsize=8)
def _load(folder: Path) -> Lesson:
    declared = folder / DECLARATION
    try:
        data = tomllib.loads(declared.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LessonError(f"{declared}: {exc}; fix the lesson's declaration") from None

    def need(key):
        if key not in data:
            raise LessonError(f"{declared} has no `{key}`: add it (see docs/architecture.md, lessons)")
        return data[key]

    package = f"{ENGINE.name}.{folder.name}" if folder.parent == ENGINE else _register_path_package(folder)

    def path(key, default=None):
        """A path of the declaration: relative to the lesson folder when it is there, else (Day 13's
        paths, written from the kit's root) relative to the kit's root."""
        value = need(key) if default is None else data.get(key, default)
        inside = folder / value
        if inside.exists() or not (ROOT / value).exists():
            return inside
        return ROOT / value

    deliverables = data.get("deliverables", {})
    docs = data.get("docs", {})
    checks = folder / f"{deliverables.get('checks', 'deliverable_checks')}.py"
    if "checks" in deliverables and not checks.is_file():
        raise LessonError(f"{declared} [deliverables] checks = {deliverables['checks']!r}, but {checks} does not exist")
    killrate = data.get("killrate", {})
    siblings = _strings(data.get("sibling_imports", {}), f"{declared} [sibling_imports]")
    if any(len(pair) != 2 for pair in siblings.values()):
        raise LessonError(f"{declared} [sibling_imports]: each entry is [sibling module, name]")
    lesson = Lesson(
        name=folder.name, folder=folder, package=package, title=str(need("title")), label=str(data.get("label", "")),
        contract=path("contract"), assignment=path("assignment"),
        solutions=path("solutions"), notebook=str(need("notebook_file")),
        graded_names=_strings(need("modules"), f"{declared} [modules]"),
        always_standin=_strings(data.get("always_standin", {}), f"{declared} [always_standin]"),
        standin_names={module: {str(k): str(v) for k, v in names.items()}
                       for module, names in data.get("standin_names", {}).items() if isinstance(names, dict)},
        sibling_imports={k: (v[0], v[1]) for k, v in siblings.items()},
        attention_components=tuple(data.get("report", {}).get("attention_components", ())),
        notebook_cells=tuple(data.get("notebook", {}).get("cells", ())),
        notebook_texts=folder / data.get("notebook", {}).get("texts", "notebook.toml"),
        deliverables_component=str(deliverables.get("component", "deliverables")),
        deliverables_checks=checks if checks.is_file() else None,
        deliverables_data=tuple(folder / str(name) for name in deliverables.get("checks_data", ())),
        demo_class=ROOT / docs["demo_class"] if "demo_class" in docs else None,
        example_course={str(k): str(v) for k, v in docs.get("example_course", {}).items()},
        example_feedback=str(docs.get("example_feedback", "")),
        rubric_path=path("rubric", "rubric.toml"),
        forbidden_path=path("forbidden", "forbidden.toml"),
        limits_path=path("limits", "limits.toml"),
        tests_folder=folder / data.get("tests", "tests"),
        tests_package=f"{package}.{data.get('tests', 'tests')}",
        standins_module=f"{package}.{data.get('standins', 'standins')}",
        catalogue_module=f"{package}.{data.get('catalogue', 'catalogue')}",
        tolerances_module=f"{package}.{data.get('tolerances', 'tolerances')}",
        adapter_class=_adapter_class(package, data.get("adapter"), declared),
        variants=_kit_path(killrate.get("variants")), skeletons=_kit_path(killrate.get("skeletons")),
        skeleton_parts={str(k): str(v) for k, v in killrate.get("skeleton_parts", {}).items()},
        bench_mutants=tuple(map(str, data.get("bench", {}).get("mutants", ()))),
        bench_pictures=tuple(map(str, data.get("bench", {}).get("pictures", ()))),
    )
    unknown = [m for m in (*lesson.always_standin, *lesson.standin_names, *lesson.sibling_imports,
                           *lesson.notebook_cells, *lesson.skeleton_parts.values())
               if m not in lesson.graded_names]
    if unknown:
        raise LessonError(f"{declared} names {', '.join(sorted(set(unknown)))}, which [modules] does not declare")
    return lesson


class _PathLessons(importlib.abc.MetaPathFinder):
    """Finds the package of each lesson loaded by path (`_grader_lesson_<name>`); the lesson's own
    modules below it are found by the ordinary path finder, through the package's __path__."""

    def __init__(self):
        self.folders: dict[str, Path] = {}

    def find_spec(self, fullname, path=None, target=None):
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        init = folder / "__init__.py"
        if init.is_file():
            return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[str(folder)])
        spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)  # a namespace package
        spec.submodule_search_locations = [str(folder)]
        return spec


_PATH_LESSONS = _PathLessons()


def _register_path_package(folder: Path) -> str:
    # The folder's name for the reader, a digest of its path so that two lessons of the same name in
    # different places (a fixture and its copy) are two packages.
    digest = hashlib.sha256(str(folder).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    package = PATH_PACKAGE_PREFIX + re.sub(r"\W", "_", folder.name) + "_" + digest
    _PATH_LESSONS.folders[package] = folder
    if _PATH_LESSONS not in sys.meta_path:
        sys.meta_path.append(_PATH_LESSONS)
    return package


def _lesson_folder(name: str | None, engine: Path) -> Path:
    names = lesson_names(engine)
    if name is None:
        if len(names) != 1:
            raise LessonError(f"{len(names)} lessons under {engine} ({', '.join(names) or 'none'}): "
                              "say which one with --lesson NAME (or --lesson PATH to a lesson folder)")
        return engine / names[0]
    if name in names:
        return engine / name
    if (Path(name) / DECLARATION).is_file():
        return Path(name).resolve()
    raise LessonError(f"no lesson {name!r} under {engine} (there are: {', '.join(names) or 'none'}) nor a folder "
                      f"{name!r} holding a {DECLARATION}; a lesson is a folder with a {DECLARATION}")


# The run's lesson is looked up once per name: a sandboxed child, which cannot read the kit, gets the
# zygote's answer (the zygote loads the lesson before it forks).
_found: dict[str | None, Path] = {}


def load_lesson(name: str | None = None, engine: Path = ENGINE) -> Lesson:
    """The lesson called `name` (a folder under grader/, or a path to a lesson folder), else the one
    $GRADER_LESSON names, else the only lesson under grader/."""
    name = name or os.environ.get(LESSON_ENV) or None
    if engine != ENGINE:
        return _load(_lesson_folder(name, engine))
    if name not in _found:
        _found[name] = _lesson_folder(name, engine)
    return _load(_found[name])


def lesson_option(value: str) -> str:
    """What `--lesson` sets $GRADER_LESSON to: a name as given, a path made absolute (so a process
    started in another folder, the zygote, finds the same lesson)."""
    return load_lesson(value).ref

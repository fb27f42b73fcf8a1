"""A lesson as the engine sees it: one object, read from the lesson's own folder.

A lesson is a folder with a `lesson.toml` beside its `rubric.toml`: a package under grader/ (found by
its name) or a folder anywhere (found by its path). The file says what the engine cannot guess (the
contract, its modules and graded names, which parts are graded over the grader's stand-ins, where the
reference and the student folder are); everything with points comes from the rubric, read here by the
one rubric loader the engine has. The lesson is a value: an entry point (the command line's
`--lesson`, the nbgrader cell, a test) builds it once with `load_lesson(name or path)` and hands it to
every stage as the keyword argument `lesson=`. Each file the lesson owns (rubric, limits, forbidden
policy) is parsed here, once per value, and kept on the value; no module looks the lesson up or
keeps lesson data of its own, and the engine never names a lesson, so a second lesson is a second
folder, not an edit to the engine. What crosses to the sandbox's zygote is `Lesson.spec()`, plain
data (LessonSpec), never the value.

A lesson found by path is imported as the package `_grader_lesson_<name>_<digest of its path>`
(registered below), so its modules never shadow the engine's, nor a lesson's of the same folder name.

Standard library only: the sandboxed child and the stdlib-only stages (regrade, collect) load it too.
"""
from __future__ import annotations

import contextlib

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

ENGINE = Path(__file__).resolve().parent
ROOT = ENGINE.parent
DECLARATION = "lesson.toml"
# The kit's settings file; its [tool.grader] default_lesson names the lesson chosen when none is.
KIT_SETTINGS = "pyproject.toml"
PATH_PACKAGE_PREFIX = "_grader_lesson_"  # the importable name of a lesson found by path
# Rubric tables that configure grading rather than hold a part's tests.
RUBRIC_SETTINGS = frozenset({"meta", "hints", "facts", "visibility", "late"})


class LessonError(RuntimeError):
    """A lesson that cannot be found or whose declaration is incomplete."""


# -- the one loader of each lesson file -------------------------------------------------------------
def read_toml(path) -> dict:
    with open(os.fspath(path), "rb") as f:
        return tomllib.load(f)


def read_rubric(path) -> dict:
    """The rubric at `path` as a dict. A lesson's own rubric is `lesson.rubric()`, parsed once per
    value; this reads another copy (a rubric kept in OUT, a test's edited one)."""
    return read_toml(path)


def read_policy(path) -> dict:
    """A forbidden.toml as a dict, every table present (possibly empty): grader.running.forbidden's reader,
    the file's one parser (that module imports no lesson, so the zygote imports it before anything)."""
    from grader.running.forbidden import load_policy

    return load_policy(path)


def rubric_hints(rubric: dict) -> dict[str, str]:
    """hint id -> hint text of a rubric: its catalogue hints ([hints."<id>"] text = "...") and each
    test's own `hint` (filed under the dotted test name, and under the table's `id` if it has one)."""
    found: dict[str, str] = {}

    def walk(path: str, node) -> None:
        if isinstance(node, dict):
            text = node.get("hint")
            if isinstance(text, str) and text.strip():
                for key in (path, node.get("id")):
                    if isinstance(key, str) and key:
                        found.setdefault(key, text.strip())
            for k, v in node.items():
                if k == "hints" and isinstance(v, dict):
                    for hint_id, entry in v.items():
                        text = entry.get("text") or entry.get("hint") if isinstance(entry, dict) else entry
                        if isinstance(text, str) and text.strip():
                            found.setdefault(hint_id, text.strip())
                    continue
                walk(f"{path}.{k}" if path else k, v)
        elif isinstance(node, list):
            for item in node:
                walk(path, item)

    walk("", rubric)
    return found


def rubric_visibility(rubric: dict) -> dict[str, str]:
    """The rubric's [visibility] table: test id, part or `default` -> a visibility word."""
    table = rubric.get("visibility", {})
    return {str(k): str(v) for k, v in table.items() if isinstance(v, str)} if isinstance(table, dict) else {}


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
DELIVERABLE_KINDS = ("image", "text", "data")


@dataclass(frozen=True)
class DeliverableFile:
    """One file a lesson asks students to hand in besides the code, as its checks module declares it
    (`FILES`: what -> (kind, accepted names)); the checks, the review page and the similarity report read it."""
    kind: str  # "image" (shown and compared as a picture), "text" (read and compared as words) or "data"
    names: tuple[str, ...]  # accepted names, in order of preference, matched ignoring case


@dataclass(frozen=True)
class Evidence:
    """The class report's pictures of failing tests' evidence (a matrix the hidden tests keep, expected
    beside the student's), in the lesson's words (lesson.toml [report])."""
    components: tuple[str, ...] = ()  # the parts whose evidence is drawn (none: no such section)
    title: str = "Evidence of failing tests: expected beside the student's"  # the report's section
    picture: str = "expected and student values"  # each picture's alternative text
    none: str = "No failing test left evidence to show."
    x_label: str = "column"
    y_label: str = "row"
    value_label: str = "value"


@dataclass(frozen=True)
class PictureTool:
    """A tool of the student folder that draws a deliverable the same way for every student (lesson.toml
    [similarity]): what it draws and prints on its default input is no evidence of copying."""
    path: Path  # the tool, a script with MODES and main(["--folder", F, "--mode", M, "--out", D])
    writes: str  # the deliverable (a key of the checks' FILES) it draws
    label: str  # how the similarity report names each of its pictures; {mode} is the mode


@dataclass(frozen=True)
class Lesson:
    """A lesson, parsed and checked, as every stage receives it (`lesson=`). What is read from the
    lesson's files is parsed on first use and kept on this value (functools.cached_property), so a
    value made with dataclasses.replace (a test's edited rubric) reads its own files again."""

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
    evidence: Evidence  # which parts' evidence the class report draws, and its words
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
    picture_tool: PictureTool | None = None
    # What a stage derives from this lesson once per value (`derived`); a replaced value starts empty.
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def derived(self, key: str, build):
        """`build()`, computed once per value under `key` (a stage's name for what it derives from the
        lesson, e.g. "intake.template_digest"): the cache lives on the value, never in a module."""
        if key not in self._derived:
            self._derived[key] = build()
        return self._derived[key]

    def cleanup(self) -> None:
        """Remove what this value built on disk (its catalogue's mutant folders), if it built any; a
        grading worker ends with os._exit, which skips atexit, so it calls this itself."""
        if "catalogue" in self.__dict__:
            self.catalogue.cleanup()

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
    def notebook_module(self) -> str:
        """The module the intake writes a notebook's cells into (notebook_module_of)."""
        return notebook_module_of(self.name)

    @property
    def file_of(self) -> dict[str, str]:
        """Contract module -> its file name."""
        return {m: f"{m}.py" for m in self.modules}

    @property
    def module_of(self) -> dict[str, str]:
        """Graded name -> the contract module it belongs to (a notebook's cells are cut into parts by it)."""
        return {name: module for module, names in self.graded_names.items() for name in names}

    @property
    def contract_file_of(self) -> dict[str, str]:
        """Graded name -> the contract file it belongs to."""
        return {name: self.file_of[module] for name, module in self.module_of.items()}

    def rubric(self) -> dict:
        """The rubric (rubric.toml) as a dict, parsed once per value. Callers must not modify it."""
        return self._rubric

    @cached_property
    def _rubric(self) -> dict:
        return read_rubric(self.rubric_path)

    @cached_property
    def limits(self) -> dict:
        """limits.toml: what replies, the deliverables checks, the scan and reading a notebook may cost
        ([replies], [deliverables], [scan], [notebooks]; see the file's comments)."""
        return read_toml(self.limits_path)

    @cached_property
    def forbidden_policy(self) -> dict:
        """forbidden.toml: the library APIs and reflective constructs a submission may not use, and the
        stand-ins' file (every table present, possibly empty)."""
        return read_policy(self.forbidden_path)

    @cached_property
    def hints(self) -> dict[str, str]:
        """hint id -> text, from the rubric (rubric_hints)."""
        return rubric_hints(self.rubric())

    @cached_property
    def visibility(self) -> dict[str, str]:
        """The rubric's [visibility] table: test id, part or `default` -> visibility."""
        return rubric_visibility(self.rubric())

    @cached_property
    def late_policy(self):
        """The rubric's [late] policy (a grader.judging.late.Policy), or None when it has none."""
        from grader.judging import late

        return late.policy_of(self.rubric(), self.rubric_path)

    @cached_property
    def extra_credit(self) -> float:
        """Points a `*` bonus may add over the maximum total: the rubric's `[meta] extra_credit` (0 without)."""
        meta = self.rubric().get("meta", {})
        value = meta.get("extra_credit", 0) if isinstance(meta, dict) else 0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            return 0.0
        return float(value)

    @cached_property
    def lazy_imports(self) -> tuple[str, ...]:
        """Modules the lesson's calls make torch import lazily (lazy_imports.txt in the lesson's folder):
        the sandbox's start-up check imports each in a fresh child, then the zygote for every child."""
        names: list[str] = []
        try:
            lines = (self.folder / "lazy_imports.txt").read_text(encoding="utf-8").splitlines()
        except OSError:
            return ()
        for line in lines:
            name = line.split("#", 1)[0].strip()
            if name and name not in names:
                names.append(name)
        return tuple(names)

    @cached_property
    def catalogue(self):
        """The lesson's bugs over its reference (a grader.judging.mutants.Catalogue), built on first use;
        its mutant folders are removed by `catalogue.cleanup()` (run's workers call it)."""
        from grader.judging import mutants

        return mutants.Catalogue.of(self)

    @cached_property
    def reference(self):
        """The reference in this process, through the lesson's adapter, its answers cached by call for
        as long as this value lives (a grading run: the whole batch)."""
        from grader.running.calls import InProcessTransport

        return self.adapter()(InProcessTransport(self.solutions, lesson=self), cache={})

    @cached_property
    def hidden_tests(self) -> tuple:
        """(component, test id, function) in a fixed order: the contract's modules in order, tests in file order."""
        unscored = set(self.modules) - set(self.components)
        if unscored:
            raise LessonError(f"{self.rubric_path} gives no points to {', '.join(sorted(unscored))}: "
                              "every contract module needs points in the rubric")
        found = []
        for component in self.modules:
            module = importlib.import_module(self.test_module(component))
            for name, fn in vars(module).items():
                if name.startswith("test_") and inspect.isfunction(fn) and fn.__module__ == module.__name__:
                    found.append((component, name[len("test_"):], fn))
        return tuple(found)

    def spec(self) -> LessonSpec:
        """What of this lesson crosses to the sandbox's zygote and its children (plain data)."""
        return LessonSpec(name=self.name, graded_names={m: tuple(n) for m, n in self.graded_names.items()},
                          always_standin={m: tuple(d) for m, d in self.always_standin.items()},
                          standin_names={m: dict(n) for m, n in self.standin_names.items()},
                          contract=self.contract, forbidden=self.forbidden_policy, lazy_imports=self.lazy_imports,
                          limits=dict(self.limits.get("replies", {})), kit_files=self._kit_files())

    @property
    def shipped_history_file(self) -> Path:
        """The record of every version of the release's own files a release has held, beside the lesson's other
        data: grader/devtools/shipped_history.py adds the current ones, and a test holds it current."""
        return self.forbidden_path.with_name("shipped_history.txt")

    def _kit_files(self) -> dict[str, tuple[str, ...]]:
        return {path: tuple(sorted(digests)) for path, digests in read_shipped_history(self.shipped_history_file).items()}

    @cached_property
    def components(self) -> tuple[str, ...]:
        """Every graded part, from the rubric: the contract's modules, then the rest (deliverables)."""
        return rubric_components(self.rubric())

    @cached_property
    def points(self) -> dict[str, float]:
        return rubric_points(self.rubric(), self.components)

    @cached_property
    def test_points(self) -> dict[str, float]:
        """Every graded test's id (`<part>.<test>`) -> its points, in the rubric's order: a record's tests, before
        one exists or is rescored."""
        rubric = self.rubric()
        return {f"{part}.{name}": float(entry["points"]) for part in self.components
                for name, entry in rubric[part].items() if _has_points(entry)}

    @property
    def test_ids(self) -> tuple[str, ...]:
        return tuple(self.test_points)

    @property
    def evidence_components(self) -> tuple[str, ...]:
        """The parts whose failing tests' evidence the class report draws."""
        return self.evidence.components

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

    def deliverable_files(self) -> dict[str, DeliverableFile]:
        """What the lesson asks for besides the code, what -> DeliverableFile, in its declared order:
        the `FILES` table of its checks module, the one declaration its checks read too ({} without one)."""
        if self.deliverables_module is None:
            return {}
        declared = getattr(importlib.import_module(self.deliverables_module), "FILES", {})
        found = {}
        for what, entry in declared.items():
            kind, names = entry if isinstance(entry, tuple) and len(entry) == 2 else (None, ())
            if kind not in DELIVERABLE_KINDS or not names or not all(isinstance(n, str) for n in names):
                raise LessonError(f"{self.deliverables_module}.FILES[{what!r}] = {entry!r}; write it as "
                                  f"(kind, (accepted names, ...)) with kind one of {', '.join(DELIVERABLE_KINDS)}")
            found[str(what)] = DeliverableFile(kind, tuple(names))
        return found

    def test_module(self, component: str) -> str:
        """Importable name of the hidden tests for one part."""
        return f"{self.tests_package}.test_{component}"

    def adapter(self) -> type:
        """The class the hidden tests ask a submission through: the engine's call plumbing with the
        lesson's request builders (imported on first use: the sandboxed child never needs it)."""
        module, _, name = self.adapter_class.partition(":")
        return getattr(importlib.import_module(module), name)


def notebook_module_of(lesson_name: str) -> str:
    """The module the intake writes a notebook's cells into, for the lesson named `lesson_name`: named for the lesson
    and private, so no contract file is, and the executor can tell it from a helper module of the student's own."""
    return f"_{lesson_name}_notebook"


@dataclass(frozen=True)
class LessonSpec:
    """The part of a lesson that crosses to the sandbox's zygote (and so to every child it forks): plain
    data, JSON both ways, built by `Lesson.spec()`. Never the Lesson value, which imports the lesson's
    secret modules on demand, and never a stand-in's source: a child holds only the stand-ins a call
    lends it (grader/sandbox/lending.py). The executor reads the same attribute names from a Lesson
    (in-process grading) and from a LessonSpec (in a child)."""

    name: str
    graded_names: dict[str, tuple[str, ...]]  # contract module -> the names it must define, in order
    always_standin: dict[str, tuple[str, ...]]  # module -> the parts it is always graded over stand-ins of
    standin_names: dict[str, dict[str, str]]  # stand-in module -> {contract name: name in the stand-ins file}
    contract: Path  # the student contract, named in an error message
    forbidden: dict = field(default_factory=dict)  # forbidden.toml, which the zygote switches library attention off by
    lazy_imports: tuple[str, ...] = ()  # what torch imports lazily during the lesson's calls
    limits: dict = field(default_factory=dict)  # limits.toml [replies]: what a child's answers may weigh
    # path in a release -> digests of every version shipped (shipped_history.txt): the kit's files a child never runs
    kit_files: dict = field(default_factory=dict)

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(self.graded_names)

    @property
    def notebook_module(self) -> str:
        return notebook_module_of(self.name)

    def to_json(self) -> dict:
        return {"name": self.name, "graded_names": {m: list(n) for m, n in self.graded_names.items()},
                "always_standin": {m: list(d) for m, d in self.always_standin.items()},
                "standin_names": self.standin_names, "contract": str(self.contract), "forbidden": self.forbidden,
                "lazy_imports": list(self.lazy_imports), "limits": self.limits,
                "kit_files": {path: sorted(digests) for path, digests in self.kit_files.items()}}

    @classmethod
    def from_json(cls, data: dict) -> LessonSpec:
        return cls(name=str(data["name"]), graded_names={m: tuple(n) for m, n in data["graded_names"].items()},
                   always_standin={m: tuple(d) for m, d in data["always_standin"].items()},
                   standin_names={m: dict(n) for m, n in data["standin_names"].items()},
                   contract=Path(data["contract"]), forbidden=dict(data["forbidden"]),
                   lazy_imports=tuple(data["lazy_imports"]), limits=dict(data["limits"]),
                   kit_files={path: tuple(digests) for path, digests in data.get("kit_files", {}).items()})


def read_shipped_history(path: Path) -> dict[str, frozenset[str]]:
    """A shipped_history.txt (`sha256  path in the release` a line): path -> the digests of every version of that
    file a release has shipped; nothing when there is no such file."""
    found: dict[str, set[str]] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text(encoding="utf-8").splitlines():
            digest, _, rel = line.partition("  ")
            if rel and not line.startswith("#"):
                found.setdefault(rel, set()).add(digest)
    return {rel: frozenset(digests) for rel, digests in found.items()}


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


def _evidence(report: dict, where: Path) -> Evidence:
    """lesson.toml [report]: the parts whose evidence is drawn (`evidence_components`) and its words."""
    words = {key: report[f"evidence_{key}"] for key in ("title", "picture", "none") if f"evidence_{key}" in report}
    axes = report.get("evidence_axes")
    if axes is not None:
        if not (isinstance(axes, list) and len(axes) == 3 and all(isinstance(a, str) for a in axes)):
            raise LessonError(f"{where} [report] evidence_axes: three labels, [columns, rows, colour bar]")
        words.update(zip(("x_label", "y_label", "value_label"), axes))
    return Evidence(components=tuple(map(str, report.get("evidence_components", ()))), **{k: str(v) for k, v in words.items()})


def _picture_tool(table, path, where: Path) -> PictureTool | None:
    """lesson.toml [similarity]: tool (a path in the student folder), writes, label."""
    if not table:
        return None
    if not all(isinstance(table.get(k), str) for k in ("tool", "writes", "label")):
        raise LessonError(f"{where} [similarity]: say tool (its path in the student folder), writes (the "
                          "deliverable it draws) and label (how its pictures are named; {mode} is the mode)")
    return PictureTool(path("assignment") / table["tool"], table["writes"], table["label"])


def _kit_path(relative) -> Path | None:
    return None if relative is None else ROOT / str(relative)


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

    package = f"{ENGINE.name}.{folder.name}" if folder.parent == ENGINE else register_path_package(folder)

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
        evidence=_evidence(data.get("report", {}), declared),
        picture_tool=_picture_tool(data.get("similarity"), path, declared),
        notebook_cells=tuple(data.get("notebook", {}).get("cells", ())),
        notebook_texts=folder / data.get("notebook", {}).get("texts", "notebook.toml"),
        deliverables_component=str(deliverables.get("component", "deliverables")),
        # Only a lesson that declares [deliverables] has them: a checks module lying in its folder (a test's
        # fixture, a draft) must not ship to students nor run in their feedback.
        deliverables_checks=checks if deliverables and checks.is_file() else None,
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


def register_path_package(folder: Path) -> str:
    """Make the package of the lesson found by path in `folder` importable in this process, and return its name:
    what load_lesson does for such a lesson, without reading its files (for a helper process that imports one
    module of the lesson by the name its parent found)."""
    # The folder's name for the reader, a digest of its path so that two lessons of the same name in
    # different places (a fixture and its copy) are two packages.
    digest = hashlib.sha256(str(folder).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    package = PATH_PACKAGE_PREFIX + re.sub(r"\W", "_", folder.name) + "_" + digest
    _PATH_LESSONS.folders[package] = folder
    if _PATH_LESSONS not in sys.meta_path:
        sys.meta_path.append(_PATH_LESSONS)
    return package


def default_lesson(engine: Path = ENGINE) -> str | None:
    """The lesson a command works on when it is not told and several sit under grader/: the kit's one
    setting, `default_lesson` in the [tool.grader] table of the kit's pyproject.toml (None: not set)."""
    try:
        with open(engine.parent / KIT_SETTINGS, "rb") as f:
            value = tomllib.load(f).get("tool", {}).get("grader", {}).get("default_lesson")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return str(value) if value else None


def _lesson_folder(name: str | None, engine: Path) -> Path:
    names = lesson_names(engine)
    if name is None:
        if len(names) == 1:
            return engine / names[0]
        default = default_lesson(engine)
        if default in names:
            return engine / default
        said = (f"; {KIT_SETTINGS} [tool.grader] default_lesson = {default!r} is none of them" if default
                else f" and no default ({KIT_SETTINGS}, [tool.grader] default_lesson)")
        raise LessonError(f"{len(names)} lessons under {engine} ({', '.join(names) or 'none'}){said}: "
                          "say which one with --lesson NAME (make ... LESSON=NAME), or --lesson PATH to a "
                          "lesson folder")
    if name in names:
        return engine / name
    if (Path(name) / DECLARATION).is_file():
        return Path(name).resolve()
    raise LessonError(f"no lesson {name!r} under {engine} (there are: {', '.join(names) or 'none'}) nor a folder "
                      f"{name!r} holding a {DECLARATION}; a lesson is a folder with a {DECLARATION}")


OUT_LESSON_FILE = "_lesson"  # in a grading run's output folder: the lesson its records are of (grader/running/grade.py)


def lesson_of_output(out) -> str | None:
    """The lesson a grading run's output folder was graded for (what `--lesson` takes), or None when it says none."""
    try:
        return (Path(out) / OUT_LESSON_FILE).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def load_lesson(name: str | None = None, engine: Path = ENGINE) -> Lesson:
    """The lesson called `name` (a folder under grader/, or a path to a lesson folder), else the only
    lesson under grader/ (of several, the kit's default_lesson), parsed and checked. For entry points only (the command line, the zygote's
    parent, the nbgrader cell, the developer tools, a test): every stage takes the value as `lesson=`.
    Each call builds a new value; keep the one you have."""
    return _checked(_load(_lesson_folder(name, engine)))


def _checked(lesson: Lesson) -> Lesson:
    """`lesson` with its rubric, limits and forbidden policy parsed: a broken file stops the entry
    point, saying which file."""
    for attribute, path, needed in (("_rubric", lesson.rubric_path, True), ("limits", lesson.limits_path, False),
                                    ("forbidden_policy", lesson.forbidden_path, False)):
        if needed or path.is_file():
            try:
                getattr(lesson, attribute)
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise LessonError(f"{path}: {exc}; fix the lesson's file") from None
    return lesson


def lesson_option(value: str) -> str:
    """A `--lesson` value to hand to another process: a name as given, a path made absolute (so a
    process started in another folder finds the same lesson)."""
    return load_lesson(value).ref

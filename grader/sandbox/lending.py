"""Which of the grader's stand-ins a call needs, and which child may answer it.

A stand-in is a working implementation of a graded name (the lesson's stand-ins file). A call that
grades a part over a stand-in of another (the lesson's [always_standin], a sub-module replaced by
one, a retry over the stand-in of a function that raised: grader/judging/score.py's OverStandIns) needs it
in the child that answers. So:

- each stand-in is lent alone: its own source, cut from the stand-ins file with only the imports
  and the other stand-ins it calls, run by the child in a namespace of its own (grader/running/executor.py,
  ModuleLoader.receive_standins). Whatever the child reaches from it (`__globals__`, closures,
  code constants) implements what it implements, and nothing more;
- a child that was lent a stand-in answers no call of a graded name that stand-in implements (the
  lesson's forbidden.toml, [standins.implements]; a stand-in also implements what those it calls
  do), unless that call itself needs that stand-in. Such a call goes to a fresh child, whose copy of
  the submission is fresh too (grader/sandbox/transport.py).

Grader side only: the child receives sources and never sees this module's decisions.
"""
from __future__ import annotations

import ast
import copy
import functools
import math
import unicodedata
from dataclasses import dataclass, field

# The stand-ins file's function that builds a replacement sub-module ("standins" in a call's header:
# {attribute path: kind}); grader/running/executor.py calls it by this name.
MAKER = "make"


@dataclass(frozen=True)
class Lending:
    """The lesson's stand-ins as the transport lends them."""

    units: dict[str, str]  # stand-in name -> the source that defines it alone (and what it calls)
    implements: dict[str, frozenset]  # stand-in name -> graded names ("module.name") it could answer
    always: dict[str, tuple[str, ...]] = field(default_factory=dict)  # module -> stand-ins it is always graded over
    over: dict[str, dict[str, str]] = field(default_factory=dict)  # module -> {graded name: its stand-in}
    contains: dict[str, frozenset] = field(default_factory=dict)  # stand-in -> the stand-ins its source holds

    @functools.cached_property
    def code_lines(self) -> dict[str, tuple[frozenset, int]]:
        """stand-in name -> (its code lines as_code gives them, how many of them make a quote: two, and two in five).
        Short lines and imports are left out: copied from the handout, one of them says nothing."""
        found = {}
        for name, source in self.units.items():
            lines = frozenset(line for line in (as_code(text) for text in source.splitlines()
                                                if not text.strip().startswith(("import ", "from ")))
                              if len(line) >= 10)
            if lines:
                found[name] = (lines, max(2, math.ceil(0.4 * len(lines))))
        return found

    def over_allowed(self, module, called, name) -> bool:
        """Whether a call of the graded name `called` may be graded over the stand-in of `name`: only a caller
        over its callee's, as the stand-ins file's own sources tell them (the stand-in of `called` calls the
        stand-in of `name`). Any other pair would hand the call the grader's work for nothing it calls: a function
        that raised inside its own class, or inside a sibling it never calls, gains nothing."""
        names = self.over.get(module, {}) if isinstance(module, str) else {}
        standin, own = names.get(name), names.get(called)
        if standin is None or name == called or standin == own:
            return False
        # A graded name without a stand-in of its own (a module wrapping a table function) may be graded over any
        # of its file's: no stand-in of it exists to hand back.
        return own is None or standin in self.contains.get(own, frozenset())

    def needed(self, header: dict) -> frozenset:
        """The stand-ins the child must hold to answer this call."""
        module = header.get("module")
        if not isinstance(module, str):
            return frozenset()
        names = set(self.always.get(module, ()))
        if header.get("standins"):
            names.add(MAKER)
        over = header.get("over_standins")
        called = header.get("name") or header.get("cls")
        for name in over if isinstance(over, list) else ():
            if isinstance(name, str) and self.over_allowed(module, called, name):
                names.add(self.over[module][name])
        return frozenset(n for n in names if n in self.units)

    def refuses(self, lent: set, header: dict) -> bool:
        """Whether a child that holds the stand-ins `lent` may not answer this call: one of them, not
        needed by the call, implements the graded name the call grades."""
        graded = graded_name(header)
        needed = self.needed(header)
        return any(graded in self.implements.get(name, ()) for name in lent if name not in needed)


def graded_name(header: dict) -> str:
    """"module.name" of the graded function or class a call runs."""
    return f"{header.get('module')}.{header.get('name') or header.get('cls')}"


def lending(source: str, implements: dict[str, list[str]], *, always_standin: dict, standin_names: dict) -> Lending:
    """The Lending of a stand-ins file's `source`, with what each of its names implements (lesson data),
    the lesson's [always_standin] and [standin_names]."""
    units, closures = cut(source)
    unknown = sorted(set(implements) - set(units))
    if unknown:
        raise ValueError(f"[standins.implements] names {', '.join(unknown)}, which the stand-ins file does not define")
    always = {module: tuple(sorted(_always_over(module, always_standin, standin_names))) for module in always_standin}
    return Lending(
        units=units,
        implements={name: frozenset(g for member in closures[name] for g in implements.get(member, ()))
                    for name in units},
        always=always,
        over={module: dict(names) for module, names in standin_names.items()},
        contains={name: frozenset(members) for name, members in closures.items()},
    )


def _always_over(module: str, always_standin: dict, standin_names: dict, seen=frozenset()) -> set[str]:
    """The stand-ins a child answering `module`'s calls must hold: those of the parts it is always graded over, and,
    for each of those, the stand-ins that part's own file is imported over when `module`'s file takes a helper of the
    student's from it (executor.ModuleLoader._over_standins). A child answers one module's calls (transport): held-out
    s47r's file that took a helper of its own from the file it is graded over lost every test of its part, when its
    child held only that file's stand-in."""
    found: set[str] = set()
    for dep in always_standin.get(module, ()):
        if dep not in seen:
            found |= set(standin_names.get(dep, {}).values())
            found |= _always_over(dep, always_standin, standin_names, seen | {module})
    return found


def of_lesson(lesson) -> Lending:
    """The lesson's stand-ins as the transport lends them, one by one: each one's own source, and the graded
    names each implements (the lesson's forbidden.toml, [standins]); built once per lesson value."""
    def build() -> Lending:
        table = lesson.forbidden_policy["standins"]
        source = lesson.forbidden_path.with_name(table.get("file", "standins.py")).read_text()
        return lending(source, dict(table.get("implements", {})), always_standin=lesson.always_standin,
                       standin_names=lesson.standin_names)

    return lesson.derived("sandbox.lending", build)


def cut(source: str) -> tuple[dict[str, str], dict[str, frozenset]]:
    """({name: source of that top-level function or class alone}, {name: the names its source holds}).

    A name's source is the file's `from __future__` lines, the imports it uses, and the definitions
    of the top-level names it refers to, followed in turn: never another stand-in it does not call."""
    tree = ast.parse(source)
    defined: dict[str, ast.AST] = {}
    imports: list[tuple[ast.AST, set[str]]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound = {(alias.asname or alias.name).split(".")[0] for alias in node.names}
            imports.append((node, bound))
    uses = {name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} for name, node in defined.items()}

    units, closures = {}, {}
    for name in defined:
        members, todo = {name}, [name]
        while todo:
            for used in uses[todo.pop()] & set(defined):
                if used not in members:
                    members.add(used)
                    todo.append(used)
        names_used = set().union(*(uses[m] for m in members))
        parts = [_bare(node) for node, bound in imports
                 if (isinstance(node, ast.ImportFrom) and node.module == "__future__") or bound & names_used]
        # In the file's order, so a class's base or a default value is defined before it is used.
        parts += [_bare(node) for member, node in defined.items() if member in members]
        units[name] = "\n".join(parts)
        closures[name] = frozenset(members)
    return units, closures


def _bare(node) -> str:
    """The code of `node` with no comment or docstring: a child holds the stand-ins' working code, which it must run,
    and nothing of the staff's words about them (red team s42r read a lent source off the child's socket and sent it
    back in an error message)."""
    node = copy.deepcopy(node)
    for inner in ast.walk(node):
        body = getattr(inner, "body", None)
        if (isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            inner.body = body[1:] or [ast.Pass()]
    return ast.unparse(node) + "\n"


def as_code(text: str) -> str:
    """`text` as its characters of code: compatibility forms folded (NFKC), no spacing, no invisible characters,
    so that a quote of a stand-in is one whatever spaces or zero-width characters were slipped into it."""
    if not text.isascii():
        text = "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf")
    return "".join(text.split())

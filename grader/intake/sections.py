"""A notebook cut into the lesson's parts: which code cells each contract module made of it runs.

A notebook is one namespace, but each part is graded in a process of its own, so that one file's code can neither
cost nor pay another part. A module that ran every cell would undo that (red team s47r: a patch in one part's cell
cost three other parts; a demo cell's `torch.set_default_dtype` cost every part). So each part runs:

- the set-up cells (those before the first cell that defines a contract name);
- its own section: the cells that define (bind at the top level) a contract name of the part, and the cells after
  such a cell that define no contract name (a cell defining names of several parts is in each of their sections);
- the cells of other sections that bind a global name its cells read, in function bodies too (transitively), so
  that a function calling a helper kept in another part's cell still works, as it does in the student's kernel; a
  function's own locals and parameters are not globals (its `x` pulls in no demo cell's `x`); never for the name
  the part takes from a sibling (that comes from the sibling module, as a .py file's import gives it); for a name
  no cell is seen to bind, the cells that may bind it unseen (a library's star import; a cell that spells the name
  and runs `exec` or `globals()`);
- every cell that does not parse: it runs no code, and each part's feedback names its syntax error.

Cells are parsed as the kernel compiles them, under the `from __future__` imports of the cells before them.

Standard library only, and nothing of the kit is imported: the intake runs this file as a script in a process
limited in memory and time (`python -I -S sections.py`, the request as JSON on stdin), because parsing a cell is
the student's to make expensive (an 8 MB cell of `x = 1` lines takes 5 GB and 30 s). The static scan imports it
for what a cell defines (`bound_names`), so the scan and the sections agree on which part a cell belongs to.
"""
from __future__ import annotations

import __future__
import ast
import builtins
import json
import re
import symtable
import sys

FUTURE_FLAGS = 0  # every flag a `from __future__` import can set (as grader/intake/magics.py, which this may not import)
for _feature in __future__.all_feature_names:
    FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag

# The symbol tables of comprehensions, which run where they stand (held-out s51r: a demo's list comprehension).
_RUN_NOW = ("listcomp", "setcomp", "dictcomp", "genexpr")
# Read by every part (len, print, super) and bound by no cell: Python's builtins, those `site` adds (this script runs
# without it: help, exit, quit), and the names the kernel gives a notebook (display, get_ipython, In, Out).
_BUILTINS = frozenset(dir(builtins)) | {"help", "exit", "quit", "copyright", "credits", "license", "display",
                                        "get_ipython", "In", "Out", "_", "__", "___", "_i", "_ii", "_iii", "_ih",
                                        "_oh", "_dh"}
_WORD = re.compile(r"[^\W\d]\w*")
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_RUN_TIME_BINDERS = frozenset({"exec", "globals", "vars", "locals"})
# Nodes whose body is a scope of its own: what they bind inside is not the module's.
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def bound_names(tree: ast.AST) -> set[str]:
    """The names the module-level code of `tree` binds: defs and classes, assignment and loop targets, import
    aliases, `with ... as`, match captures, names a function of it declares `global`, and the targets of `:=` in its
    comprehensions (PEP 572: they bind in the scope the comprehension stands in; held-out s52)."""
    found: set[str] = set()
    for node in _module_level(tree):
        if isinstance(node, _COMPREHENSIONS):
            found |= _walrus_targets(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
            found |= {name for inner in ast.walk(node) if isinstance(inner, ast.Global) for name in inner.names}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*"}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            found.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            found.add(node.rest)
    return found


def _walrus_targets(comprehension: ast.AST) -> set[str]:
    """The names `:=` binds inside a comprehension and the comprehensions within it, not in a lambda's body."""
    found, todo = set(), list(ast.iter_child_nodes(comprehension))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return found


def binds_at_run_time(tree: ast.AST) -> bool:
    """Whether the cell may bind names no reading of it sees: it names `exec`, `globals`, `vars` or `locals`
    (`globals()[name] = ...`, `exec(source)`), anywhere, a function it calls included."""
    return any(isinstance(node, ast.Name) and node.id in _RUN_TIME_BINDERS for node in ast.walk(tree))


def words(source: str) -> list[str]:
    """Every word of the cell's text that could be a name, in its strings and comments too: a name bound at run time
    is spelled in the cell that binds it (`globals()["split"] = ...`, `exec("def split...")`)."""
    return sorted(set(_WORD.findall(source)))


def _module_level(tree: ast.AST):
    """Every node of `tree` whose code runs in the module's own scope: a def, a class, a lambda or a comprehension
    is given, but not what is inside it. Iterative: the nesting is the student's."""
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def global_loads(source: str, tree: ast.AST) -> tuple[set[str], set[str]]:
    """(now, later): the global names the cell reads as it runs (its top level and its class bodies), and those its
    functions read when they are called (after every cell ran). Not a function's own locals and parameters (a
    function's `x` is not a demo cell's `x`). From Python's own symbol tables; for a cell they cannot read (a syntax
    only the cells before it allow), every name it reads, as read now."""
    now = augmented(tree)  # `x += 1` reads x
    later: set[str] = set()
    try:
        tables = [(symtable.symtable(source, "cell", "exec"), False)]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return now | {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}, set()
    while tables:
        table, deferred = tables.pop()
        at_top = table.get_type() == "module"
        names = {symbol.get_name() for symbol in table.get_symbols()
                 if symbol.is_referenced() and (at_top or symbol.is_global())}
        (later if deferred else now).update(names)
        # A class body and a comprehension run where they stand; a function's body (a lambda's) when it is called.
        tables.extend((child, deferred or (child.get_type() == "function" and child.get_name() not in _RUN_NOW))
                      for child in table.get_children())
    return now, later


def imported_from(tree: ast.AST) -> dict[str, str]:
    """name -> the module a module-level `from M import x [as name]` or `import M [as name]` of the cell binds it from."""
    found = {}
    for node in _module_level(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update({alias.asname or alias.name: node.module for alias in node.names if alias.name != "*"})
        elif isinstance(node, ast.Import):
            found.update({(alias.asname or alias.name).split(".")[0]: alias.name for alias in node.names})
    return found


def defined_names(tree: ast.AST, parts) -> set[str]:
    """The names a cell binds other than by importing them from one of the `parts`' modules: what makes it a cell of
    a part (a .py file pasted whole as a cell keeps its `from sibling import Name`, which defines nothing)."""
    origin = imported_from(tree)
    return {name for name in bound_names(tree) if origin.get(name) not in parts}


def import_identity(tree: ast.AST) -> dict[str, str]:
    """name -> what a module-level import of the cell binds it to, spelled one way: `import a.b as n` and `from a
    import b as n` both bind a.b; `import a.b` binds a (held-out s51r: `from torch.nn import functional as F` and
    `import torch.nn.functional as F` are the same F)."""
    found = {}
    for node in _module_level(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update({alias.asname or alias.name: f"{node.module}.{alias.name}"
                          for alias in node.names if alias.name != "*"})
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                found[alias.asname or top] = alias.name if alias.asname else top
    return found


def augmented(tree: ast.AST) -> set[str]:
    """The names the cell's top level changes in place (`x += ...`, `x |= ...`): read before they are bound."""
    return {node.target.id for node in _module_level(tree)
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name)}


def star_modules(tree: ast.AST) -> list[str]:
    """The modules the cell's module-level `from M import *` statements name."""
    return [node.module for node in _module_level(tree)
            if isinstance(node, ast.ImportFrom) and node.module and not node.level
            and any(alias.name == "*" for alias in node.names)]


def star_names(source: str) -> set[str]:
    """What `from M import *` binds of the module whose source is `source`: its literal `__all__`, else its public
    module-level names. Nothing for a module that does not parse (its import fails where it runs)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                and isinstance(node.value, (ast.List, ast.Tuple))):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return {name for name in bound_names(tree) if not name.startswith("_")}


def cell_facts(cells: list[str], *, parts=(), modules: dict[str, str] | None = None) -> list[dict]:
    """For each cell, in order: {"bound", "loaded", "now", "defines"} (sorted names: what it binds, what it reads, what
    of that it reads as it runs, and what it binds other than by importing it from a part's module, `parts`) and
    "future" (the `__future__` flags it sets for the cells after it), or {"broken": True} for a cell that does not
    parse (it runs no code: the kernel would not compile it either), or {"unread": True} for one too large or too
    deep for this process to parse. `modules`: the source of each module of the notebook's own (a `%%writefile` file,
    one handed in beside it) by name, for what a star import of it binds."""
    modules = modules or {}
    stars = {}
    facts, flags = [], 0
    for source in cells:
        try:
            tree = compile(source, "cell", "exec", ast.PyCF_ONLY_AST | flags, True)
        except (SyntaxError, ValueError):
            facts.append({"broken": True})
            continue
        except (RecursionError, MemoryError):
            facts.append({"unread": True})
            continue
        future = _future_flags(tree, flags)
        flags |= future
        bound, origin, identity, unknown = bound_names(tree), imported_from(tree), import_identity(tree), []
        for module in star_modules(tree):
            if module in modules:
                if module not in stars:
                    stars[module] = star_names(modules[module])
                bound |= stars[module]
                origin.update({name: module for name in stars[module]})
            else:
                unknown.append(module)  # a library's star: what it binds is not read here (_needed)
        now, later = global_loads(source, tree)
        defines = {name for name in bound if origin.get(name) not in parts}  # as defined_names reads it
        facts.append({"bound": sorted(bound), "loaded": sorted(now | later), "now": sorted(now),
                      "defines": sorted(defines), "imports": identity, "augmented": sorted(augmented(tree)),
                      "stars": unknown, "dynamic": words(source) if binds_at_run_time(tree) else [], "future": future})
    return facts


def _future_flags(tree: ast.AST, flags: int) -> int:
    """The `__future__` flags a parsed cell sets, as compiling it does (none when it does not compile)."""
    if not any(isinstance(node, ast.ImportFrom) and node.module == "__future__" for node in tree.body):
        return 0
    try:
        return compile(tree, "cell", "exec", flags, True).co_flags & FUTURE_FLAGS
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return 0


def sections(facts: list[dict], part_of: dict[str, str]) -> list[frozenset | None]:
    """Each cell's parts: those whose contract names (`part_of`: name -> part) it binds, else those of the nearest
    cell above that binds one; None for a set-up cell (before the first such cell). A cell that does not parse or
    was not read keeps the section it is in."""
    found, current = [], None
    for fact in facts:
        # Defined here, not imported from a part's module (a .py file pasted whole keeps its `from sibling import`).
        own = frozenset(part_of[name] for name in fact.get("defines", fact.get("bound", ())) if name in part_of)
        current = own or current
        found.append(current)
    return found


def plan(facts: list[dict], part_of: dict[str, str], takes: dict[str, set]) -> dict[str, list[int]]:
    """part -> the places (0-based, in `facts`' order) of the cells its module runs, in the notebook's order, for
    every part `part_of` names. `takes`: part -> the names its module takes from a sibling (never looked for in
    the notebook's cells)."""
    cut = sections(facts, part_of)
    binders: dict[str, list[int]] = {}
    for i, fact in enumerate(facts):
        for name in fact.get("bound", ()):
            binders.setdefault(name, []).append(i)
    return {part: sorted(_needed(part, facts, cut, binders, set(takes.get(part, ()))))
            for part in dict.fromkeys(part_of.values())}


def _needed(part: str, facts: list[dict], cut: list, binders: dict, taken: set) -> set[int]:
    """The cells `part` runs: set-up, its own section and every broken cell, then, until none is left, the cell that
    gives each name a chosen cell reads its value in the kernel, when nothing chosen gives the same: for a name read
    as the cell runs (its top level, its class bodies), the last cell binding it above that cell, unless the cell
    binds it itself; for one a function reads when called, the last cell binding it in the notebook. A chosen cell
    importing the same module under the name gives the same value (`import torch.nn as nn` in every demo). Where a
    binding stands counts, not whether some chosen cell binds the name: a demo below that imports `nn` again gives the
    class above it nothing (held-out s50r), and a set-up cell's draft of a helper is not what a function calls once a
    later cell redefined it. A later demo binding the same name (s49r: `x`, after setting float64) is not what the
    reading cell saw, and is not pulled in."""
    chosen = {i for i, (fact, parts) in enumerate(zip(facts, cut))
              if parts is None or part in parts or fact.get("broken")}

    def same_import(k: int, name: str, before: int | None) -> bool:
        module = facts[k].get("imports", {}).get(name)
        return module is not None and any(facts[j].get("imports", {}).get(name) == module
                                          for j in chosen if before is None or j < before)

    stars = [j for j, fact in enumerate(facts) if fact.get("stars")]
    dynamic = {j: set(fact["dynamic"]) for j, fact in enumerate(facts) if fact.get("dynamic")}
    todo = sorted(chosen)
    while todo:
        pulled = set()
        for i in todo:
            now = set(facts[i].get("now", facts[i].get("loaded", ())))
            own = set(facts[i].get("bound", ()))
            changed = set(facts[i].get("augmented", ()))
            for name in set(facts[i].get("loaded", ())) - taken:
                if name in now:
                    if name in own and name not in changed:  # `x += 1` reads the x above it first
                        continue
                    places, before = [j for j in binders.get(name, ()) if j < i], i
                else:
                    places, before = binders.get(name, ()), None
                if not binders.get(name):
                    if name in _BUILTINS:
                        continue  # Python's own: no cell gives it (s52: every part ran a star import's cell for len)
                    # Bound by no cell the cut can read: a library's star import may bind it (s51r: `from math import
                    # *` then `log`), and so may a cell that binds names at run time (s52: `globals()[name] = f`,
                    # `exec`). The last star cell above (or anywhere, for a function's read) is pulled in, and every
                    # such run-time cell that spells the name (s53r: one that never does ran for any name unbound).
                    places = [j for j in stars if before is None or j < before]
                    pulled |= {j for j, spelled in dynamic.items()
                               if (before is None or j < before) and j not in chosen and name in spelled}
                if places and places[-1] not in chosen and not same_import(places[-1], name, before):
                    pulled.add(places[-1])
        chosen |= pulled
        todo = sorted(pulled)
    return chosen


def _serve() -> int:
    """The script: {"cells", "part_of", "takes", "modules"} as JSON on stdin; {"parts", "future", "unread"} as JSON on stdout
    ("future": the place of each cell that sets `__future__` flags -> its flags; "unread": the cells too large or
    too deep to parse here)."""
    request = json.loads(sys.stdin.buffer.read())
    facts = cell_facts([str(cell) for cell in request["cells"]], parts=set(request["part_of"].values()),
                       modules={str(k): str(v) for k, v in request.get("modules", {}).items()})
    takes = {part: set(names) for part, names in request["takes"].items()}
    answer = {"parts": plan(facts, dict(request["part_of"]), takes),
              "future": {str(i): fact["future"] for i, fact in enumerate(facts) if fact.get("future")},
              "unread": [i for i, fact in enumerate(facts) if fact.get("unread")]}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(_serve())

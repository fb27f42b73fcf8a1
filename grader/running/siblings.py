"""Which names a student's file takes from a sibling file of theirs.

A part tested over a stand-in of a sibling file gets the stand-in's names from it; when the part's file also takes a helper of the student's own from that sibling, the
sibling itself is imported too, and only then, so a sibling that crashes or floods its output at import
still costs no other part. The grader's executor and the visible tests ask the same question here.
Standard library only: the release ships this file in tests/_feedback/, beside the visible tests' package.
"""
from __future__ import annotations

import ast
import types


def takes_more_than(source: str, sibling: str, provided) -> bool:
    """Whether the file `source` imports from module `sibling` a name outside `provided` (the stand-in's names):
    by name, with `*`, or as an attribute of the module imported whole (`import sibling as s; s.helper`).
    A file that does not parse takes nothing: its own import fails and says why."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    provided = set(provided)
    whole = set()  # the names `import sibling` binds
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == sibling and not node.level:
            if any(alias.name == "*" or alias.name not in provided for alias in node.names):
                return True
        elif isinstance(node, ast.Import):
            whole |= {alias.asname or alias.name for alias in node.names if alias.name == sibling}
    return bool(whole) and any(isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                               and node.value.id in whole and node.attr not in provided for node in ast.walk(tree))


def takes_more_through(name: str, sibling: str, provided, read, parts=()) -> bool:
    """Whether the file of module `name`, or a helper module of the student's it imports (and so on, through their
    own imports), takes from `sibling` a name outside `provided` (takes_more_than). `read(module)`: a module's
    source, None for a module that is not the student's; the `parts` (contract modules) are not followed, each is
    judged on its own. Held-out s50r: a part's helper module took a constant from the sibling's file beside the
    sibling's contract function, and the stand-in alone had no such constant."""
    seen, todo = set(), [name]
    while todo and len(seen) < 64:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        source = read(module)
        if source is None:
            continue
        if takes_more_than(source, sibling, provided):
            return True
        todo.extend(m for m in imported_modules(source, module)
                    if m.split(".")[0] not in parts and m.split(".")[0] != sibling)
    return False


def module_source(folder, module: str) -> str | None:
    """The source of the student's module `module` in `folder` (a pathlib.Path): its file, or its package's
    __init__.py; None for a module that is not theirs. What takes_more_through reads, for the grader and the
    visible tests alike."""
    where = folder.joinpath(*module.split("."))
    for path in (where.with_name(where.name + ".py"), where / "__init__.py"):
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return None


def imported_modules(source: str, name: str = "") -> set[str]:
    """The modules a file (of module `name`) imports anywhere, read, not run: `import a.b` and `from a.b import c`
    give a, a.b and a.b.c (c may be a module of package a.b: held-out s51r's helper mha_pkg/ops.py); a relative
    `from .x import y` in `name` gives x beside it or inside it (whichever the file is, a module or a package)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    found = set()

    def dotted(path: str) -> None:
        parts = path.split(".")
        found.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                dotted(alias.name)
        elif isinstance(node, ast.ImportFrom):
            bases = [node.module or ""]
            if node.level and name:
                inside = name.split(".")
                beside = inside[:-1]
                bases = [".".join(p + ([node.module] if node.module else []))
                         for p in (inside[:len(inside) - node.level + 1], beside[:len(beside) - node.level + 1])]
            for base in filter(None, bases):
                dotted(base)
                for alias in node.names:
                    if alias.name != "*":
                        found.add(f"{base}.{alias.name}")
    return found


def bound_over(own: types.ModuleType, stand_in: types.ModuleType) -> types.ModuleType:
    """A module named as `own` holding its names (and its `__all__`), with `stand_in`'s names in place of
    theirs: what a part sees of a sibling when it takes a helper of the student's own from it."""
    module = types.ModuleType(own.__name__, stand_in.__doc__)
    module.__dict__.update({k: v for k, v in vars(own).items() if not k.startswith("__") or k == "__all__"})
    replaced = {k: v for k, v in vars(stand_in).items() if not k.startswith("__")}
    # Another name the sibling gives one of the replaced objects (`attend = scaled_dot_product_attention`) is the
    # stand-in too (held-out s51r: the part took `attend` and was charged for the sibling's bug).
    by_identity = {id(vars(own)[k]): v for k, v in replaced.items() if vars(own).get(k) is not None}
    for key, value in list(module.__dict__.items()):
        if id(value) in by_identity and not key.startswith("__") and key not in replaced:
            module.__dict__[key] = by_identity[id(value)]
    module.__dict__.update(replaced)
    return module


def held_elsewhere(namespaces, own: dict, stand_in: types.ModuleType) -> list[tuple[dict, str, object]]:
    """(namespace, key, stand-in) for each global of `namespaces` (the __dict__ of the student's other modules: helpers,
    and the part's own file) that holds one of the sibling's objects the stand-in replaces (`own`: contract name ->
    the student's object), by identity, whatever the key: a part reaching its sibling's function through a helper
    module (core.py, whose function the sibling's file hands on as its own) must reach the stand-in there too, as it does
    under the sibling's own module name."""
    replaced = {}
    for key, value in vars(stand_in).items():
        mine = own.get(key) if not key.startswith("__") else None
        if mine is not None and mine is not value:
            replaced[id(mine)] = (mine, value)
    found = []
    for namespace in namespaces:
        if namespace is own:
            continue
        for key, value in list(namespace.items()):
            hit = replaced.get(id(value))
            if hit is not None and hit[0] is value and not key.startswith("__"):
                found.append((namespace, key, hit[1]))
    return found


def held_in_helpers(namespaces, sibling_source: str, helpers: dict, stand_in: types.ModuleType) -> list:
    """held_elsewhere, for the objects the sibling's file (`sibling_source`) hands on from the student's `helpers`
    (module name -> module loaded): found by reading that file (handed_on), never by importing it."""
    own = {}
    for name, (module, attr) in handed_on(sibling_source, vars(stand_in)).items():
        holder = helpers.get(module)
        if holder is not None and attr in vars(holder):
            own[name] = vars(holder)[attr]
    return held_elsewhere(namespaces, own, stand_in)


_ABSENT = object()  # a key a namespace did not hold (put, put_back)


def put(held: list, namespace: dict, key, value) -> None:
    """namespace[key] = value, with what it held before kept in `held` for put_back."""
    held.append((namespace, key, namespace.get(key, _ABSENT)))
    namespace[key] = value


def put_back(held: list) -> None:
    """Undo every `put` kept in `held`, the last first."""
    for namespace, key, previous in reversed(held):
        if previous is _ABSENT:
            namespace.pop(key, None)
        else:
            namespace[key] = previous
    held.clear()


def handed_on(source: str, names) -> dict[str, tuple[str, str]]:
    """The contract names among `names` that the file `source` takes from another module and hands on as its own,
    read from the statements its top level runs (inside a module-level `try`, `if` or `with` too), without running it:
    name -> (module, its name there), for `from helper import x as name`, `from helper import *` and `name =
    helper.x` (after `import helper`). A name the file defines after it took it is its own; one an `except` branch
    binds otherwise leaves what the `try` took (held-out s49r: `try: from .model import X` / `except ImportError:
    from model import X`)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    names = {n for n in names if not n.startswith("__")}
    whole: dict[str, str] = {}  # what `import helper as h` binds -> the module
    taken: dict[str, tuple[str, str]] = {}  # what `from helper import x` binds -> (helper, x), any name
    found: dict[str, tuple[str, str]] = {}

    def read(statements, alternative: bool) -> None:
        # In a branch that runs instead of another (an except, an else), a name the other took stays as it took it.
        take = found.setdefault if alternative else found.__setitem__
        for node in statements:
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name == "*":
                        for n in names:
                            take(n, (node.module, n))
                        continue
                    taken[alias.asname or alias.name] = (node.module, alias.name)
                    if (alias.asname or alias.name) in names:
                        take(alias.asname or alias.name, (node.module, alias.name))
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                  and node.targets[0].id in names and isinstance(node.value, ast.Name) and node.value.id in taken):
                take(node.targets[0].id, taken[node.value.id])  # s51r: `from helper import x`, then `name = x`
            elif isinstance(node, ast.Import):
                whole.update({alias.asname or alias.name: alias.name for alias in node.names if "." not in alias.name})
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                  and node.targets[0].id in names and isinstance(node.value, ast.Attribute)
                  and isinstance(node.value.value, ast.Name) and node.value.value.id in whole):
                take(node.targets[0].id, (whole[node.value.value.id], node.value.attr))
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                read(node.body, alternative)
                for handler in node.handlers:
                    read(handler.body, True)
                read(node.orelse, alternative)
                read(node.finalbody, alternative)
            elif isinstance(node, (ast.If, ast.With, ast.For, ast.While)):
                read(node.body, alternative)
                read(getattr(node, "orelse", []), True)
            elif not alternative:
                for bound in _bound_at_top(node):
                    found.pop(bound, None)

    read(tree.body, False)
    return found


def _bound_at_top(node) -> set[str]:
    """The names a top-level statement (other than an import) binds: a def, a class, an assignment's targets."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}

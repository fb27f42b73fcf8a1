"""The trusted static scan of a submission's source, as it was handed in.

Nothing a submission runs can change what this finds: a grading run reads the files into the grader
before any student code runs (`snapshot`) and parses them in a limited helper process
(`LimitedScan`, `python -m grader.judging.source_scan`). It reads every `.py` file of the submission (and each code
cell of a notebook submission) and reports, against the lesson's policy (grader.running.forbidden):

- costs: library attention or the kit's own code reached from a file, by name (`F.scaled_dot_product_attention`,
  `torch.nn.modules.activation.MultiheadAttention`, `torch.ops.aten._native_multi_head_attention`), through
  a string, even one glued together from pieces (`getattr(F, "scaled_" + "dot_product_attention")`,
  `importlib.import_module("torch.nn.attention.flex_attention")`), or by importing the kit (`grader`);
- flags: reflective constructs the assignment never needs (a heap walk, frames, `__wrapped__`,
  `importlib`, `exec`, `ctypes`, `sys.modules`, `vars()` of a torch module, a torch attribute looked
  up by a computed name...), and every file the scan could not read (too large, compiled, too deep
  to parse, or one that ran the helper out of time or memory). A flag is shown to the instructor and
  costs nothing.

A string the scan cannot work out (decoded at run time) is only flagged: the sandboxed child, where
library attention gives no answer, covers it.

The scan is bounded whatever the file: every walk over a tree is iterative (no recursion, however
deep the expression), every folded string and every flag text has a length cap, de-duplication is
by set, and at most MAX_FLAGS_PER_KIND flags of one kind are kept (the rest are counted in one line).
What is left (the parser's own memory and time on a hostile file) is bounded by the helper's limits.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.machinery
import io
import json
import os
import re
import stat
import sys
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from grader.intake import sections
from grader.running.helper_process import LimitedHelper, cpu_seconds
from grader.running.forbidden import REFUSED_IMPORTS

# Shown to the staff in every lesson: raw memory through numpy's array protocol (any address read or written,
# the child's own guards included) and the walk up the caller's frames to the grader's own code; the builtins
# reached without their name (print.__self__, __builtins__), a loader's compiler, and the import system's hooks
# (taken out, they let code the scan cannot read be imported).
ALWAYS_FLAGGED_ATTRIBUTES = frozenset({"__array_interface__", "__array_struct__", "walk_stack", "walk_tb",
                                       "__builtins__", "__self__", "__loader__", "source_to_code", "path_hooks",
                                       "path_importer_cache", "meta_path"})
# Modules that turn a data file into running code (an unpickled object can call anything on the way in) or run a
# string as code: what such a file holds, the scan never reads. Shown in every lesson.
ALWAYS_FLAGGED_MODULES = frozenset({"pickle", "_pickle", "dill", "cloudpickle", "shelve", "joblib", "marshal", "runpy",
                                    "code", "codeop", "zipimport", "pdb", "doctest", "timeit", "copyreg"})
# A line that sets an attribute of a name that is not self or cls (a library's function replaced at import, as
# `torch.Tensor.detach = ...`): such a file is parsed, for _Walk.replaced to look at the name.
_SETS_AN_ATTRIBUTE = re.compile(r"^[ \t]*(?:del[ \t]+)?(?!self\.|cls\.)[A-Za-z_]\w*(?:\.\w+)+[ \t]*"
                                r"(?:=(?!=)|[-+*/@%&|^]=|//=|<<=|>>=|\*\*=|$|,)", re.M)

MAX_SOURCE_BYTES = 1_000_000  # a file larger than this is not parsed, and is flagged (the child still covers it)
MAX_FILES = 200  # source files read from one submission; the others are flagged, unread
MAX_TOTAL_BYTES = 16_000_000  # bytes of source read from one submission (the worker holds them while it scans)
MAX_FLAGS_PER_KIND = 100  # flags of one kind kept for a submission; the rest are counted in one line
MAX_FOLDED = 512  # characters: no name the policy lists is anywhere near this long
MAX_SHOWN = 120  # characters of a student's own text (a module name, a variable) a flag quotes
COMPILED = (".pyc", ".pyo", ".so", ".pyd")  # modules Python imports without a source to read


@dataclass
class Findings:
    costs: dict = field(default_factory=dict)  # file name -> set of names it reaches
    flags: list = field(default_factory=list)  # "file line N: what", in the order found (at most MAX_FLAGS_PER_KIND a kind)
    imports: dict = field(default_factory=dict)  # file name -> top-level module names it imports
    kinds: list = field(default_factory=list)  # the kind of each kept flag (its rule, without the student's text)
    counts: dict = field(default_factory=dict)  # kind -> how many distinct flags of it were found
    _seen: set = field(default_factory=set, repr=False)

    def reaching(self, file: str, others=()) -> set:
        """What `file` reaches itself or through the submission's own modules it imports (a helper file
        or package); never through `others` (the other graded files, which its part runs against
        stand-ins of)."""
        names, seen, todo = set(), set(), [file]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            names |= self.costs.get(current, set())
            for module in self.imports.get(current, ()):
                todo += [f for f in self._files_of(module) if f not in others]
        return names

    def _files_of(self, module: str) -> list:
        return [f for f in self.imports if f == f"{module}.py" or f.startswith(f"{module}/")]

    def cost(self, file: str, name: str) -> None:
        self.costs.setdefault(file, set()).add(name)

    def flag(self, text: str, kind: str | None = None) -> None:
        """Keep `text` unless it was seen before or its kind already has MAX_FLAGS_PER_KIND flags."""
        if text in self._seen:
            return
        self._seen.add(text)
        kind = kind or text
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.counts[kind] <= MAX_FLAGS_PER_KIND:
            self.flags.append(text)
            self.kinds.append(kind)

    def merge(self, other: Findings) -> None:
        """Add what `other` found (another file's scan) to this."""
        for file, names in other.costs.items():
            self.costs.setdefault(file, set()).update(names)
        for file, modules in other.imports.items():
            self.imports.setdefault(file, set()).update(modules)
        for text, kind in zip(other.flags, other.kinds):
            self.flag(text, kind)
        kept = {}
        for kind in other.kinds:
            kept[kind] = kept.get(kind, 0) + 1
        for kind, n in other.counts.items():  # what `other` counted but did not keep
            if n > kept.get(kind, 0):
                self.counts[kind] = self.counts.get(kind, 0) + n - kept.get(kind, 0)

    def shown(self) -> list[str]:
        """The flags, then one line for each kind that had more than were kept."""
        more = [f"... and {n - MAX_FLAGS_PER_KIND} more flags like: {kind}"
                for kind, n in self.counts.items() if n > MAX_FLAGS_PER_KIND]
        return [*self.flags, *more]

    def to_json(self) -> dict:
        return {"costs": {f: sorted(n) for f, n in self.costs.items()}, "flags": self.flags, "kinds": self.kinds,
                "imports": {f: sorted(m) for f, m in self.imports.items()}, "counts": self.counts}

    @classmethod
    def from_json(cls, data: dict) -> Findings:
        """Findings from a helper's answer, every field checked (the helper parsed a student's file)."""
        found = cls()
        for file, names in dict(data["costs"]).items():
            found.costs[str(file)] = {str(n) for n in names}
        for file, modules in dict(data["imports"]).items():
            found.imports[str(file)] = {str(m) for m in modules}
        flags, kinds = list(data["flags"]), list(data["kinds"])
        if len(flags) != len(kinds):
            raise ValueError("flags and kinds differ in length")
        for text, kind in zip(flags, kinds):
            found.flag(str(text), str(kind))
        for kind, n in dict(data["counts"]).items():
            found.counts[str(kind)] = max(int(n), found.counts.get(str(kind), 0))
        return found


def _shown(text: str) -> str:
    """A student's own text, as much of it as a flag quotes."""
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def not_read(file: str, why: str) -> tuple[str, str]:
    """The flag (text, kind) for a file the scan could not read."""
    return f"{_shown(file)}: not read by the grader's scan ({why})", "a file the scan could not read"


def scan_sources(sources: list[tuple[str, str | bytes, list | None]], policy: dict,
                 contract: dict | None = None, kit=()) -> Findings:
    """sources: (file name, source, cells or None). For a notebook module, `cells` are its code
    cells, and a cell's costs go to the contract file (`contract`: name -> file) of the names it defines. `kit`: the
    paths of the files the release ships (its tools and tests), whose modules a submission's files may import."""
    found = Findings()
    rules = _Rules(policy, contract or {})
    local = own_modules([*(name for name, _, _ in sources), *kit])
    for file, source, cells in sources:
        found.merge(scan_file(file, source, cells, rules, local))
    return found


def scan_file(file: str, source: str | bytes, cells: list | None, rules: _Rules, local=frozenset()) -> Findings:
    """What one file (or one notebook's cells) holds. A file too deep or too large for Python's parser
    is flagged as not read; one that is not Python at all (a syntax error) is not: it cannot be imported
    either, and the import error tells the student. `local`: the submission's own top-level module names."""
    found = Findings()
    if cells is None:
        text = _decoded(source)
        if not rules.worth_parsing(text):
            found.imports[file] = _imported_by_text(text)
            if _IMPORTS.search(text):
                with contextlib.suppress(SyntaxError, ValueError, RecursionError, MemoryError):
                    _not_found(_nodes(ast.parse(source)), file, rules, local, found)
            return found
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            found.imports[file] = _imported_by_text(text)
            return found
        except RecursionError:
            found.flag(*not_read(file, "too deeply nested for Python's parser"))
            found.imports[file] = _imported_by_text(text)
            return found
        except MemoryError:
            found.flag(*not_read(file, "parsing it needed more memory than the scan may use"))
            found.imports[file] = _imported_by_text(text)
            return found
        walk = _Walk(rules, tree, lambda name: found.cost(file, name), file, found, local=local)
        walk.run()
        found.imports[file] = _imported(walk.nodes)
        _not_found(walk.nodes, file, rules, local, found)
        return found
    trees = []
    for i, cell in enumerate(cells):
        try:
            trees.append((i, ast.parse(cell)))
        except (SyntaxError, ValueError, TypeError):
            continue
        except (RecursionError, MemoryError):
            found.flag(*not_read(f"{file} cell {i + 1}", "too deeply nested for Python's parser"))
    # Cells share one namespace: an alias bound in one is known in all of them.
    shared = _Walk(rules, ast.Module(body=[s for _, t in trees for s in t.body], type_ignores=[]), None, file, None,
                   local=local)
    shared.collect()
    parts = {file.removesuffix(".py") for file in rules.contract.values()}
    for i, tree in trees:
        # The names a cell binds, as the intake reads them when it gives each part its cells (grader/intake/sections.py).
        owners = {rules.contract[n] for n in sections.defined_names(tree, parts) if n in rules.contract}
        walk = _Walk(rules, tree, lambda name, owners=owners: [found.cost(o, name) for o in owners],
                     f"{file} cell {i + 1}", found, aliases=shared.aliases, strings=shared.strings,
                     imported=shared.imported, local=local)
        walk.run()
        _not_found(walk.nodes, f"{file} cell {i + 1}", rules, local, found)
    return found


def own_modules(names) -> set[str]:
    """The module names a submission's files give it: each top-level file or folder, and each file's own name at any
    depth (a folder the submission puts on sys.path, as pytest does a tests folder, makes its files top-level too)."""
    found = set()
    for name in names:
        found.add(name.split("/")[0].removesuffix(".py"))
        found.add(name.rsplit("/", 1)[-1].removesuffix(".py"))
    return found


def _decoded(source: str | bytes) -> str:
    """The text of a source as Python reads it (its coding declaration, UTF-8 by default)."""
    if isinstance(source, str):
        return source
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError:
        encoding = "utf-8"
    try:
        return source.decode(encoding, errors="replace")
    except LookupError:
        return source.decode("utf-8", errors="replace")


class _Rules:
    def __init__(self, policy: dict, contract: dict):
        names, flags = policy.get("names", {}), policy.get("flags", {})
        self.anywhere = frozenset(names.get("anywhere", ()))
        self.torch_only = frozenset(names.get("torch_only", ()))
        self.kit = frozenset(names.get("kit_packages", ()))
        self.flag_modules = frozenset(flags.get("modules", ())) | REFUSED_IMPORTS | ALWAYS_FLAGGED_MODULES
        self.ordinary_imports = frozenset(flags.get("ordinary_imports", ()))
        attributes = flags.get("attributes", ())
        self.flag_attributes = frozenset(a for a in attributes if "." not in a) | ALWAYS_FLAGGED_ATTRIBUTES
        self.flag_rooted = frozenset(tuple(a.split(".", 1)) for a in attributes if "." in a)
        self.flag_calls = frozenset(flags.get("calls", ()))
        self.contract = contract
        # Every construct above needs one of these words in the file's text (a name glued together
        # from pieces reaches torch only through a lookup, an import, a dict or an eval, all named
        # here), so an ASCII file without any of them holds nothing to find and is not parsed
        # (~1 ms a file). Non-ASCII text is always parsed: NFKC folds other characters into names.
        # The library's names written backwards, to be turned round at run time: only ever written to hide them.
        self.backwards = frozenset(name[::-1] for name in (*self.anywhere, *self.torch_only) if len(name) >= 5)
        self.triggers = tuple({*self.anywhere, *self.torch_only, *self.kit, *self.flag_modules, *self.flag_calls,
                               *self.flag_attributes, *(attr for _, attr in self.flag_rooted), *self.backwards,
                               "getattr", "attrgetter", "__dict__", "vars", "import_module", "__import__",
                               "setattr", "delattr", "allow_pickle", "weights_only"})

    def worth_parsing(self, text: str) -> bool:
        return not text.isascii() or any(t in text for t in self.triggers) or bool(_SETS_AN_ATTRIBUTE.search(text))


class _Walk:
    """One pass over a tree: first what names mean (torch aliases, strings), then costs and flags.

    No method recurses: an expression thousands of terms deep ("ab" + "ab" + ...) is folded with an
    explicit stack, and each node is worked out once per pass (memos), so a pass is linear in the tree."""

    def __init__(self, rules, tree, cost, where, found, aliases=None, strings=None, imported=None, local=frozenset()):
        self.rules, self.tree, self.cost_to, self.where, self.found = rules, tree, cost, where, found
        self.aliases = set(aliases or ())  # names bound to torch or something inside it
        # Names an import statement binds to a library (a module, or a name from one); the submission's own modules
        # (`local`, and relative imports) are not libraries: setting their attributes is the student's business.
        self.imported = set(imported or ())
        self.local = frozenset(local)
        self.strings = dict(strings or {})  # name -> the string it was assigned (when it can be worked out)
        # Names bound to something of a library, other than by an import (`T = torch.Tensor`, a loop variable over
        # such things, a parameter's default): name -> what it stands for (`torch.Tensor`). An attribute set on one
        # replaces the library's as surely (red team s40r).
        self.library: dict[str, str] = {}
        self._folded: dict = {}  # node -> its string or None, for the current meaning of names
        self._torchy: dict = {}  # node -> whether it stands for torch or something inside it
        self.nodes = _nodes(tree)  # every node, once, in ast.walk's order

    def _forget(self) -> None:
        self._folded, self._torchy = {}, {}

    def collect(self) -> None:
        nodes = [n for n in self.nodes if isinstance(n, (ast.Import, ast.ImportFrom, ast.Assign))]
        bindings = [n for n in self.nodes if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.For,
                                                             ast.AsyncFor, ast.arguments, ast.withitem))]
        for _ in range(3):  # aliases of aliases (x = torch.nn; y = x.functional), until nothing changes
            before = (len(self.aliases), len(self.strings), len(self.library))
            for node in nodes:
                self._forget()  # names may have gained a meaning since the last statement
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    self.aliases |= _torch_names(node)
                    if isinstance(node, ast.Import):
                        self.imported |= {(a.asname or a.name).split(".")[0] for a in node.names
                                          if a.name.split(".")[0] not in self.local}
                    elif not node.level and (node.module or "").split(".")[0] not in self.local:
                        self.imported |= {a.asname or a.name for a in node.names if a.name != "*"}
                elif isinstance(node, ast.Assign):
                    value = self.fold(node.value)
                    torchy = self.is_torch(node.value)
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            if value is not None:
                                self.strings[target.id] = value
                            if torchy:
                                self.aliases.add(target.id)
            for node in bindings:
                self._forget()
                for name, value in _bound(node):
                    origin = self.of_library(value)
                    if origin is not None:
                        self.library[name] = origin
            if (len(self.aliases), len(self.strings), len(self.library)) == before:
                break
        self._forget()

    def of_library(self, node) -> str | None:
        """What `node` stands for (`torch.Tensor`) when it is a library or something inside one, reached by
        lookups (a.b[c], getattr(x, "name")), import_module("name") or __import__("name"), from a name an import
        bound or a name bound to such a thing; None for anything else (the result of any other call: an object the
        submission made, whose attributes are its own business)."""
        parts = []
        for _ in range(200):  # a chain this long is no lookup anyone writes
            if isinstance(node, ast.Attribute):
                if node.attr in self.library and not parts:
                    return self.library[node.attr]  # a class attribute bound to one (H.t, with t = torch.Tensor)
                parts.append(node.attr)
                node = node.value
            elif isinstance(node, ast.Subscript):
                node = node.value
            elif isinstance(node, ast.Call) and node.args:
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name == "getattr" and len(node.args) >= 2:
                    parts.append(self.fold(node.args[1]) or "...")
                    node = node.args[0]
                elif name in ("import_module", "__import__"):
                    module = self.fold(node.args[0])
                    if not module or module.split(".")[0] in self.local:
                        return None
                    return ".".join([module, *reversed(parts)])
                else:
                    return None
            elif isinstance(node, ast.Name):
                if node.id in self.library:
                    return ".".join([self.library[node.id], *reversed(parts)])
                if node.id in self.imported:
                    return ".".join([node.id, *reversed(parts)])
                return None
            else:
                return None
        return None

    def run(self) -> None:
        self.collect()
        called = {id(n.func) for n in self.nodes if isinstance(n, ast.Call)}
        for node in self.nodes:
            line = getattr(node, "lineno", 0)
            if isinstance(node, ast.Attribute):
                self.attribute(node, line)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.imports(node, line)
            elif isinstance(node, ast.Call):
                self.call(node, line)
            elif isinstance(node, (ast.Name, ast.FunctionDef)):
                # __array_interface__ = {...} in a class body, or a property of that name: raw memory to numpy
                name = node.id if isinstance(node, ast.Name) else node.name
                if name in ALWAYS_FLAGGED_ATTRIBUTES:
                    self.flag(line, f"{name} (reflective access)")
                elif isinstance(node, ast.Name) and name in self.rules.flag_calls and id(node) not in called:
                    # `run = exec; run(text)`: exec called under another name, the code it runs read from anywhere
                    self.flag(line, f"{name} used as a value (reflective access)")
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                setting = isinstance(node, (ast.Assign, ast.AnnAssign)) and _a_setting(node.value)
                for target in node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]:
                    self.replaced(target, line, setting)
            value = self.fold(node) if isinstance(node, (ast.Constant, ast.BinOp, ast.JoinedStr)) else None
            if value is not None:
                self.string(value, line)

    # -- what a name or an expression stands for
    def is_torch(self, node) -> bool:
        """Whether `node` stands for torch or something inside it. Walks down a chain of lookups
        (a.b[c].d, getattr(getattr(x, ...), ...)) iteratively, and remembers every node on the way."""
        memo, path = self._torchy, []
        answer = False
        while True:
            if node in memo:
                answer = memo[node]
                break
            path.append(node)
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                node = node.value
                continue
            if isinstance(node, ast.Name):
                answer = node.id in self.aliases or node.id == "torch"
                break
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in ("import_module", "__import__", "reload"):  # importlib.import_module("torch...")
                    text = self.fold(node.args[0])
                    if text and text.split(".")[0] == "torch":
                        answer = True
                        break
                    node = node.args[0]
                    continue
                if name == "getattr":
                    node = node.args[0]
                    continue
            break
        for visited in path:
            memo[visited] = answer
        return answer

    def fold(self, node):
        """The string `node` evaluates to, when it is made of constants only (and is at most
        MAX_FOLDED characters when glued from pieces); otherwise None."""
        memo = self._folded
        if node in memo:
            return memo[node]
        stack = [(node, False)]
        while stack:
            current, ready = stack.pop()
            if current in memo:
                continue
            parts = _fold_parts(current)
            if not ready and parts:
                stack.append((current, True))
                stack.extend((p, False) for p in parts if p not in memo)
                continue
            memo[current] = self._fold_one(current, parts)
        return memo[node]

    def _fold_one(self, node, parts):
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            return self.strings.get(node.id)
        if parts is None:
            return None
        values = [self._folded.get(p) for p in parts]
        if None in values:
            return None
        if isinstance(node, ast.Call):  # "sep".join([...])
            sep, *pieces = values
            if sum(map(len, pieces)) + len(sep) * len(pieces) > MAX_FOLDED:
                return None
            return sep.join(pieces)
        if sum(map(len, values)) > MAX_FOLDED:
            return None
        return "".join(values)

    # -- costs and flags
    def cost(self, name: str) -> None:
        if self.cost_to is not None:
            self.cost_to(name)

    def flag(self, line: int, what: str, kind: str | None = None) -> None:
        """`kind` is `what` without the student's own words (a variable's or a module's name)."""
        if self.found is not None:
            self.found.flag(f"{self.where} line {line}: {what}", kind or what)

    def replaced(self, target, line, setting: bool = False) -> None:
        """Flag an attribute set (or deleted) on something an import statement bound: a library's own function or
        class replaced for the whole process (torch.Tensor.detach, numpy.array), which can change what the
        grader's own code reads. A tuple of targets is looked into; the submission's own objects are not. A
        `setting` (a number or bool) stored in torch's backends is what PyTorch's reproducibility notes ask for
        (`torch.backends.cudnn.deterministic = True`): not shown."""
        todo = [target]
        while todo:
            current = todo.pop()
            if isinstance(current, (ast.Tuple, ast.List)):
                todo += current.elts
            elif isinstance(current, ast.Starred):
                todo.append(current.value)
            elif isinstance(current, ast.Attribute):
                origin = self.of_library(current.value)
                if origin is None:
                    continue
                dotted = f"{origin}.{current.attr}"
                parts = dotted.split(".")
                if setting and len(parts) > 2 and parts[1] == "backends" and (parts[0] in self.aliases
                                                                             or parts[0] == "torch"):
                    continue
                self.flag(line, f"replaces {_shown(dotted)} (a library's attribute, set by the submission)",
                          "replaces a library's attribute")

    def attribute(self, node, line) -> None:
        attr = node.attr
        if attr in self.rules.anywhere or (attr in self.rules.torch_only and self.is_torch(node.value)):
            self.cost(attr)

        root = node.value.id if isinstance(node.value, ast.Name) else None
        if attr in self.rules.flag_attributes or (root, attr) in self.rules.flag_rooted:
            self.flag(line, f"{_shown('.'.join(filter(None, (root, attr))))} (reflective access)",
                      f"{attr} (reflective access)")
        elif attr == "__dict__" and self.is_torch(node.value):
            self.flag(line, "__dict__ of a torch module (reflective access)")

    def imports(self, node, line) -> None:
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for module in modules:
            top = module.split(".")[0]
            if top in self.rules.kit and not (isinstance(node, ast.ImportFrom) and node.level):
                self.cost(f"the kit's own code ({top})")
                self.flag(line, f"imports {_shown(module)} (the grader's own code)", "imports the grader's own code")
            elif top in self.rules.flag_modules and top not in self.rules.ordinary_imports:
                self.flag(line, f"imports {_shown(module)}", f"imports {top}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            for alias in node.names:
                if alias.name in self.rules.anywhere or alias.name in self.rules.torch_only:
                    self.cost(alias.name)
                if alias.name in self.rules.flag_attributes:
                    self.flag(line, f"imports {alias.name} from {_shown(node.module)}", f"imports {alias.name}")

    def call(self, node, line) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else None
        if name in self.rules.flag_calls:
            self.flag(line, f"{name}()")
        if name == "vars" and node.args and self.is_torch(node.args[0]):
            self.flag(line, "vars() of a torch module (reflective access)")
        if name in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
            text = self.fold(node.args[1])
            on_torch = self.is_torch(node.args[0])
            if text in self.rules.flag_attributes or text in self.rules.flag_calls:
                # getattr(frame, "f_globals") is frame.f_globals; getattr(builtins, "eval") is eval
                self.flag(line, f"{name}(..., {_shown(text)!r}) (reflective access)", f"{text} (reflective access)")
            if name in ("setattr", "delattr"):
                origin = self.of_library(node.args[0])
                if origin is not None:
                    self.flag(line, f"replaces {_shown(origin)}.{_shown(str(text or '...'))} (a library's attribute, "
                                    "set by the submission)", "replaces a library's attribute")
                elif text is None and isinstance(node.args[0], ast.Name) and node.args[0].id not in ("self", "cls"):
                    # A helper `_put(owner, name, value)` called with a library: neither the owner nor the name is
                    # known here (red team s46r replaced torch.softmax so). An object's own attributes go by self.
                    self.flag(line, f"{name}({node.args[0].id}, <a name worked out at run time>, ...) (an attribute of "
                                    "whatever object is passed in)", f"{name}() with a name worked out at run time")
            if text is None:
                if on_torch:
                    self.flag(line, f"{name}() on torch with a name worked out at run time")
            elif text in self.rules.torch_only and on_torch:
                self.cost(text)
        if isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__") and node.args:
            # type.__setattr__(torch.Tensor, "detach", f), object.__setattr__(torch, ...), torch.Tensor.__setattr__(...)
            origin = self.of_library(node.args[0]) if len(node.args) >= 2 else None
            origin = origin or self.of_library(func.value)
            if origin is not None:
                what = self.fold(node.args[1]) if len(node.args) >= 2 else None
                self.flag(line, f"replaces {_shown(origin)}.{_shown(str(what or '...'))} (a library's attribute, set by "
                                "the submission)", "replaces a library's attribute")
        if isinstance(func, ast.Attribute) and func.attr == "load":
            # Unpickling runs whatever the file names: numpy's allow_pickle=True, torch's weights_only=False (torch's
            # own default loads tensors only).
            for keyword, safe in (("allow_pickle", False), ("weights_only", True)):
                if any(k.arg == keyword and not (isinstance(k.value, ast.Constant) and k.value.value is safe)
                       for k in node.keywords):
                    self.flag(line, f"{_shown(_dotted(func) or 'load')}(..., {keyword}=...) (unpickling a file runs "
                                    "whatever it names)", f"load(..., {keyword}=...)")
        if (name == "__import__" or (isinstance(func, ast.Attribute) and func.attr in ("import_module", "reload"))) \
                and node.args:
            module = self.fold(node.args[0])
            if module is None:
                self.flag(line, "imports a module whose name is worked out at run time")
            elif module.split(".")[0] in self.rules.kit:
                self.cost(f"the kit's own code ({module.split('.')[0]})")

    def string(self, text: str, line: int) -> None:
        parts = text.replace(":", ".").split(".")
        if text in self.rules.anywhere or parts[-1] in self.rules.anywhere and parts[0] == "torch":
            self.cost(parts[-1])
        elif parts[0] == "torch" and parts[-1] in self.rules.torch_only and len(parts) > 1:
            self.cost(parts[-1])
        elif parts[0] in self.rules.kit and len(parts) > 1 and parts[0] != text:
            self.flag(line, f"names the grader's own module {_shown(text)!r}", "names the grader's own module")
        for backwards in self.rules.backwards:
            if backwards in text:
                self.flag(line, f"spells {backwards[::-1]!r} backwards (a name written to hide it)",
                          "spells a library name backwards")


def _bound(node) -> list:
    """(name, value) for each name `node` binds to a value that could be a library's thing: `x = v` (and `x: T = v`,
    `x := v`), a loop variable over a tuple or list of such values (or over one), a parameter's default, `with v as
    x`."""
    if isinstance(node, ast.Assign):
        return [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
        return [(node.target.id, node.value)]
    if isinstance(node, ast.NamedExpr):
        return [(node.target.id, node.value)]
    if isinstance(node, (ast.For, ast.AsyncFor)) and isinstance(node.target, ast.Name):
        values = node.iter.elts if isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)) else [node.iter]
        return [(node.target.id, v) for v in values]
    if isinstance(node, ast.arguments):
        positional = node.posonlyargs + node.args
        pairs = list(zip(positional[len(positional) - len(node.defaults):], node.defaults))
        pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
        return [(a.arg, d) for a, d in pairs]
    if isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
        return [(node.optional_vars.id, node.context_expr)]
    return []


# A line that imports (what _not_found looks at in a file the scan need not otherwise parse).
# Any `import` word: a statement may follow `;` or a one-line `if x:` (red team s41r), and a word in a comment costs
# only a parse.
_IMPORTS = re.compile(r"\bimport\b")


def _not_found(nodes, where: str, rules, local, found: Findings) -> None:
    """Flag each module a file imports (`nodes`: every node of its tree, as _nodes lists them) that no file handed in
    provides and no library installed for grading does (an import inside a `try` that catches its failure aside: an
    optional library). Such a module can only be one the submission writes at run time, or one it reaches in an
    archive: code no scan or similarity reads (red team s40r: a classmate's files kept as base64, written beside the
    shim at import; a zip put on sys.path). The node list is the walk's own: walking the tree twice more cost each
    scan more than the rest of the file's checks."""
    imports = [n for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not imports:
        return
    contract = {f.removesuffix(".py") for f in rules.contract.values()}
    optional = set()
    for node in nodes:
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))) and any(
                _catches_import_errors(h) and not any(isinstance(s, ast.Raise) for s in h.body) for h in node.handlers):
            optional |= {id(n) for n in _run_in_place(node.body)}
    seen, path = set(), _library_path()
    for node in imports:
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module.split(".")[0]]
        else:
            continue
        for name in names:
            if name in seen or name in local or name in contract or name in rules.kit or _installed(name, path):
                continue
            seen.add(name)
            found.flag(f"{where} line {node.lineno}: imports {_shown(name)}, which is no file handed in and no library "
                       "installed for grading (the import fails, unless the submission writes the module at run time "
                       "or reads it from an archive: code no scan reads)",
                       "imports a module that is neither handed in nor installed")


def _run_in_place(body) -> list:
    """The nodes of the statements `body` runs itself: not the bodies of the functions it defines, which run later,
    outside whatever `try` holds them (red team s41r hid an import in a function defined inside one)."""
    found, stack = [], list(body)
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.expr_context))
    return found


def _catches_import_errors(handler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is None or any(isinstance(k, ast.Name) and k.id in ("ImportError", "ModuleNotFoundError",
                                                                            "Exception", "BaseException")
                                       for k in kinds)


def _library_path() -> list[str]:
    """This process's import path (the kit's environment, which the child's is), the working folder left out."""
    here = os.getcwd()
    return [p for p in sys.path if p and os.path.abspath(p) != here]


def _installed(name: str, path: list[str]) -> bool:
    """Whether `name` is a module Python finds without the submission: built in, the standard library, or on `path`
    (_library_path)."""
    if name in sys.builtin_module_names or name in getattr(sys, "stdlib_module_names", ()):
        return True
    try:
        return importlib.machinery.PathFinder.find_spec(name, path) is not None
    except (ImportError, ValueError, OSError):
        return True  # cannot tell: no flag


def _nodes(tree) -> list:
    """Every node of `tree` but the Load/Store markers, breadth first (ast.walk's order), iteratively."""
    found, i = [tree], 0
    while i < len(found):
        node = found[i]
        i += 1
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                if not isinstance(value, ast.expr_context):
                    found.append(value)
            elif isinstance(value, list):
                found.extend(v for v in value if isinstance(v, ast.AST))
    return found


def _fold_parts(node) -> list | None:
    """The sub-expressions whose strings make `node`'s (None when it is a leaf or cannot be a string)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [node.left, node.right]
    if isinstance(node, ast.JoinedStr):
        return [v.value if isinstance(v, ast.FormattedValue) else v for v in node.values]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" \
            and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)):
        return [node.func.value, *node.args[0].elts]
    return None


def _a_setting(value) -> bool:
    """Whether an assigned value is a plain number or bool (a setting, not a function or object put in place)."""
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        value = value.operand
    return isinstance(value, ast.Constant) and type(value.value) in (bool, int, float)


def _dotted(node) -> str | None:
    """`a.b.c` for a chain of attribute lookups on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute) and len(parts) < 50:
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _torch_names(node) -> set[str]:
    """The names an import statement binds to torch or to something inside it."""
    if isinstance(node, ast.Import):
        return {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "torch"}
    if (node.module or "").split(".")[0] == "torch":
        return {a.asname or a.name for a in node.names}
    return set()


def _imported_by_text(text: str) -> set[str]:
    """The modules a file that needs no parse imports, for `Findings.reaching` (a line-based reading)."""
    found = set()
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("import", "from"):
            found.add(words[1].split(".")[0].rstrip(",")[:MAX_SHOWN])
    return found


def _imported(nodes) -> set[str]:
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


# -- what was handed in ---------------------------------------------------------------------------
def snapshot(directory: Path, notebook_module: str, generated: dict[str, str] | None = None,
             kit: dict[str, bytes] | None = None,
             earlier: dict[str, frozenset] | None = None) -> tuple[list[tuple[str, bytes, bool]], Findings]:
    """Read a submission's sources into memory, before any student code runs: (file name, bytes, whether
    it is the notebook module whose cells are read) for every `.py` file under `directory` (its path
    relative to it), and the flags of the files the scan will not read (over MAX_SOURCE_BYTES, compiled
    modules, past MAX_FILES). `generated` (file name -> text) are the modules the intake writes around
    a notebook's cells: a file with exactly that text is the kit's, not the student's (its globals() call
    is no integrity flag), and the cells it runs are read from the notebook module. `kit` (path -> bytes)
    are the files the release ships that are the kit's: one handed back unchanged at its path (line endings
    aside) is not read either, nor is one that is an earlier release's version of it (`earlier`: path -> the
    sha256 digests of every version shipped). Links are never followed (the intake copies none)."""
    directory = Path(directory)
    sources, found, total = [], Findings(), 0
    for rel in _files(directory):
        name = rel.as_posix()
        if rel.suffix in COMPILED:
            found.flag(*not_read(name, "compiled code, which Python can import but the scan cannot read"))
            continue
        if rel.suffix != ".py":
            continue
        if len(sources) >= MAX_FILES:
            found.flag(*not_read(name, f"a submission's first {MAX_FILES} source files are read"))
            continue
        data, size = _read(directory / rel, MAX_TOTAL_BYTES - total)
        if data is None:
            if size is not None and size > MAX_SOURCE_BYTES:
                found.flag(*not_read(name, f"{_size(size)}, over the scan's {_size(MAX_SOURCE_BYTES)}"))
            elif size is not None:
                found.flag(*not_read(name, f"a submission's first {_size(MAX_TOTAL_BYTES)} of source are read"))
            continue
        total += len(data)
        if generated and len(rel.parts) == 1 and generated.get(name, "").encode() == data:
            continue
        as_shipped = data.replace(b"\r\n", b"\n")
        if kit and name in kit and kit[name] == as_shipped:
            continue
        if earlier and name in earlier and kit_digest(as_shipped) in earlier[name]:
            continue
        sources.append((name, data, len(rel.parts) == 1 and rel.stem == notebook_module
                        and written_from_cells(data)))
    return sources, found


def kit_digest(data: bytes) -> str:
    """The digest a shipped file is known by (`snapshot`'s `earlier`), line endings aside: a checkout on Windows hands
    it back with CRLF."""
    return hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest()


def _files(directory: Path) -> list[Path]:
    """Every regular file under `directory`, relative to it, in a fixed order (iteratively)."""
    found, todo = [], [Path()]
    while todo:
        rel = todo.pop()
        try:
            entries = sorted(os.scandir(directory / rel), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                todo.append(rel / entry.name)
            elif entry.is_file(follow_symlinks=False):
                found.append(rel / entry.name)
    return sorted(found)


def _read(path: Path, room: int) -> tuple[bytes | None, int | None]:
    """(bytes, size) of a regular file of at most MAX_SOURCE_BYTES and `room` bytes; (None, size) when
    larger; (None, None) when it cannot be opened as a regular file. The size is checked before a byte
    is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, None
        limit = min(MAX_SOURCE_BYTES, room)
        if st.st_size > limit:
            return None, st.st_size
        data = f.read(limit + 1)
    return (None, len(data)) if len(data) > limit else (data, len(data))


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1_000_000 else f"{n / 1e3:.0f} KB"


def read_sources(directory: Path, notebook_module: str,
                 generated: dict[str, str] | None = None) -> list[tuple[str, bytes, list | None]]:
    """(file name, source, cells) for each `.py` file of a folder, as scan_sources takes them; cells for
    the notebook module (see `snapshot`, which also names the files left unread)."""
    sources, _ = snapshot(directory, notebook_module, generated)
    return [(name, data, read_cells(data) if cells else None) for name, data, cells in sources]


# The data the intake writes into a notebook's module (grader/intake/submissions.py, notebook_module_source).
WRITTEN_VALUES = ("NOTEBOOK", "CELLS", "NUMBERS", "PARTS", "FUTURE")


def written_from_cells(data: bytes) -> bool:
    """Whether `data` is exactly the module the intake writes for a notebook (its WRITTEN_VALUES put back into
    grader/intake/submissions.py's notebook_module_source): only then are its cells all the code it runs, and
    the scan reads them alone. A file handed in under that name with more code in it (red team s45r ran a rewriter
    from its body, unread) is read whole, as any other."""
    from grader.intake.submissions import notebook_module_source

    try:
        tree = ast.parse(data)
        values = {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                  for t in node.targets if isinstance(t, ast.Name) and t.id in WRITTEN_VALUES}
        written = notebook_module_source(values["NOTEBOOK"], values["CELLS"], values["NUMBERS"],
                                         parts=values["PARTS"], future=values["FUTURE"])
        return written.encode() == data
    except (SyntaxError, ValueError, TypeError, KeyError, AttributeError, RecursionError, MemoryError):
        return False


def read_cells(source: str | bytes) -> list:
    """The code cells of the notebook module the intake wrote (its CELLS list)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CELLS" for t in node.targets):
            try:
                cells = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return []
            return [c for c in cells if isinstance(c, str)] if isinstance(cells, list) else []
    return []


# -- the helper process ---------------------------------------------------------------------------
MAX_ANSWER_BYTES = 8 << 20  # one file's findings: costs from the policy's names, flags capped by kind


class LimitedScan(LimitedHelper):
    """`scan(directory) -> Findings`: the submission's sources read here, at once (before any student
    code runs), then parsed one file at a time by a helper process limited to `memory_bytes` of address
    space, waited on at most `seconds` a file and `budget` seconds for the whole submission. A file that
    runs the helper out of memory or time, or crashes it, is flagged as not read (the helper is started
    again for the next file); the other files are scanned as usual, and the run goes on.

    `policy`: the lesson's forbidden policy (`lesson.forbidden_policy`, parsed once by the lesson value);
    `contract`: name -> contract file (for notebook cells); `notebook_module`, `generated`, `kit`: as for
    `snapshot`. The helper gets the policy and the contract as one line of JSON, never a file to read."""

    def __init__(self, *, policy: dict, contract: dict, notebook_module: str, generated: dict | None = None,
                 kit: dict | None = None, earlier: dict | None = None, memory_bytes: int = 512 << 20,
                 seconds: float = 5.0, budget: float = 20.0):
        self.spec = json.dumps({"policy": policy, "contract": dict(contract)}, sort_keys=True)
        self.contract = dict(contract)
        self.notebook_module, self.generated, self.kit = notebook_module, dict(generated or {}), dict(kit or {})
        self.earlier = dict(earlier or {})
        super().__init__()
        self.memory_bytes, self.seconds, self.budget = int(memory_bytes), float(seconds), float(budget)
        self.max_answer_bytes = MAX_ANSWER_BYTES

    def scan(self, directory) -> Findings:
        sources, found = snapshot(Path(directory), self.notebook_module, self.generated, self.kit, self.earlier)
        # The submission's own modules: an import of one of them is what `Findings.reaching` follows.
        local = sorted(own_modules([*(name for name, _, _ in sources), *(self.kit or ())]))
        spent = 0.0  # the helper's CPU seconds for this submission (helper_process: CPU time, not wall)
        for name, data, cells in sources:
            remaining = self.budget - spent
            if remaining <= 0:
                found.flag(*not_read(name, f"the scan's {self.budget:g} s of CPU time for one submission ran out"))
                continue
            allowed = min(self.seconds, remaining)
            try:
                found.merge(self._ask(name, data, cells, local, allowed))
                spent += self.last_cpu
            except TimeoutError:
                self.close()
                spent += allowed
                found.flag(*not_read(name, f"parsing it took more than {allowed:g} s of CPU time"))
            except (OSError, ValueError, KeyError, TypeError):
                self.close()
                found.flag(*not_read(name, f"parsing it needed more than the scan's {self.memory_bytes >> 20} MB, "
                                           "or crashed the scan"))
        return found

    def _command(self) -> list[str]:
        return ["grader.judging.source_scan", self.spec]

    def _ask(self, name: str, data: bytes, cells: bool, local: list, seconds: float) -> Findings:
        proc = self._helper()
        since_wall, since_cpu = time.monotonic(), cpu_seconds(proc.pid)
        header = json.dumps({"file": name, "bytes": len(data), "cells": cells, "local": local}).encode()
        proc.stdin.write(header + b"\n" + data)
        proc.stdin.flush()
        return Findings.from_json(json.loads(self._read_line(proc, seconds, since_wall=since_wall,
                                                             since_cpu=since_cpu)))


def _serve(spec: str) -> None:
    """The helper: one request (a JSON header line, then the file's bytes) in, one JSON line out. `spec`:
    the policy and the contract, as LimitedScan built them from the lesson value."""
    given = json.loads(spec)
    rules = _Rules(given["policy"], given["contract"])
    stdin, stdout = sys.stdin.buffer, sys.stdout
    while header := stdin.readline():
        request = json.loads(header)
        name, data = str(request["file"]), stdin.read(int(request["bytes"]))
        local = set(request["local"])
        try:
            found = scan_file(name, data, read_cells(data) if request["cells"] else None, rules, local)
        except (RecursionError, MemoryError):
            found = Findings()
            found.flag(*not_read(name, "too deep or too large for the scan"))
        found.imports = {f: {m for m in modules if m in local} for f, modules in found.imports.items()}
        found.imports.setdefault(name, set())
        stdout.write(json.dumps(found.to_json()) + "\n")
        stdout.flush()


if __name__ == "__main__":
    _serve(sys.argv[1])

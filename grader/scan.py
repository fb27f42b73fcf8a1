"""The trusted static scan of a submission's source, done in the grader's own process.

Nothing a submission runs can change what this finds. It reads each top-level `.py` file (and each
code cell of a notebook submission) and reports, against the lesson's policy (grader.forbidden):

- costs: library attention or the kit's own code reached from a file, by name (`F.scaled_dot_product_attention`,
  `torch.nn.modules.activation.MultiheadAttention`, `torch.ops.aten._native_multi_head_attention`), through
  a string, even one glued together from pieces (`getattr(F, "scaled_" + "dot_product_attention")`,
  `importlib.import_module("torch.nn.attention.flex_attention")`), or by importing the kit (`grader`);
- flags: reflective constructs the assignment never needs (a heap walk, frames, `__wrapped__`,
  `importlib`, `exec`, `ctypes`, `sys.modules`, `vars()` of a torch module, a torch attribute looked
  up by a computed name...). A flag is shown to the instructor and costs nothing.

A string the scan cannot work out (decoded at run time) is only flagged: the sandboxed child, where
library attention gives no answer, covers it.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

MAX_SOURCE_BYTES = 1_000_000  # a file larger than this is not parsed (the child still covers it)


@dataclass
class Findings:
    costs: dict = field(default_factory=dict)  # file name -> set of names it reaches
    flags: list = field(default_factory=list)  # "file line N: what", in file and line order
    imports: dict = field(default_factory=dict)  # file name -> top-level module names it imports

    def reaching(self, file: str, others=()) -> set:
        """What `file` reaches itself or through the submission's own modules it imports (a helper file);
        never through `others` (the other graded files, which its part runs against stand-ins of)."""
        names, seen, todo = set(), set(), [file]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            names |= self.costs.get(current, set())
            todo += [f"{m}.py" for m in self.imports.get(current, ()) if f"{m}.py" in self.imports and f"{m}.py" not in others]
        return names

    def cost(self, file: str, name: str) -> None:
        self.costs.setdefault(file, set()).add(name)

    def flag(self, text: str) -> None:
        if text not in self.flags:
            self.flags.append(text)


def scan_sources(sources: list[tuple[str, str, list | None]], policy: dict, contract: dict | None = None) -> Findings:
    """sources: (file name, source text, cells or None). For a notebook module, `cells` are its code
    cells, and a cell's costs go to the contract file (`contract`: name -> file) of the names it defines."""
    found = Findings()
    rules = _Rules(policy, contract or {})
    for file, text, cells in sources:
        if cells is None:
            if not rules.worth_parsing(text):
                found.imports[file] = _imported_by_text(text)
                continue
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            _Walk(rules, tree, lambda name, f=file: found.cost(f, name), file, found).run()
            found.imports[file] = _imported(tree)
            continue
        trees = []
        for cell in cells:
            try:
                trees.append(ast.parse(cell))
            except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
                continue
        # Cells share one namespace: an alias bound in one is known in all of them.
        shared = _Walk(rules, ast.Module(body=[s for t in trees for s in t.body], type_ignores=[]), None, file, None)
        shared.collect()
        for i, tree in enumerate(trees):
            owners = {rules.contract[n] for n in _defined_names(tree) if n in rules.contract}
            walk = _Walk(rules, tree, lambda name, owners=owners: [found.cost(o, name) for o in owners],
                         f"{file} cell {i + 1}", found, aliases=shared.aliases, strings=shared.strings)
            walk.run()
    return found


class _Rules:
    def __init__(self, policy: dict, contract: dict):
        names, flags = policy.get("names", {}), policy.get("flags", {})
        self.anywhere = frozenset(names.get("anywhere", ()))
        self.torch_only = frozenset(names.get("torch_only", ()))
        self.kit = frozenset(names.get("kit_packages", ()))
        self.flag_modules = frozenset(flags.get("modules", ()))
        self.ordinary_imports = frozenset(flags.get("ordinary_imports", ()))
        attributes = flags.get("attributes", ())
        self.flag_attributes = frozenset(a for a in attributes if "." not in a)
        self.flag_rooted = frozenset(tuple(a.split(".", 1)) for a in attributes if "." in a)
        self.flag_calls = frozenset(flags.get("calls", ()))
        self.contract = contract
        # Every construct above needs one of these words in the file's text (a name glued together
        # from pieces reaches torch only through a lookup, an import, a dict or an eval, all named
        # here), so an ASCII file without any of them holds nothing to find and is not parsed
        # (~1 ms a file). Non-ASCII text is always parsed: NFKC folds other characters into names.
        self.triggers = tuple({*self.anywhere, *self.torch_only, *self.kit, *self.flag_modules, *self.flag_calls,
                               *self.flag_attributes, *(attr for _, attr in self.flag_rooted),
                               "getattr", "attrgetter", "__dict__", "vars", "import_module", "__import__"})

    def worth_parsing(self, text: str) -> bool:
        return not text.isascii() or any(t in text for t in self.triggers)


class _Walk:
    """One pass over a tree: first what names mean (torch aliases, strings), then costs and flags."""

    def __init__(self, rules, tree, cost, where, found, aliases=None, strings=None):
        self.rules, self.tree, self.cost_to, self.where, self.found = rules, tree, cost, where, found
        self.aliases = set(aliases or ())  # names bound to torch or something inside it
        self.strings = dict(strings or {})  # name -> the string it was assigned (when it can be worked out)

    def collect(self) -> None:
        nodes = [n for n in ast.walk(self.tree) if isinstance(n, (ast.Import, ast.ImportFrom, ast.Assign))]
        for _ in range(3):  # aliases of aliases (x = torch.nn; y = x.functional), until nothing changes
            before = (len(self.aliases), len(self.strings))
            for node in nodes:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    self.aliases |= _torch_names(node)
                elif isinstance(node, ast.Assign):
                    value = self.fold(node.value)
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            if value is not None:
                                self.strings[target.id] = value
                            if self.is_torch(node.value):
                                self.aliases.add(target.id)
            if (len(self.aliases), len(self.strings)) == before:
                break

    def run(self) -> None:
        self.collect()
        for node in ast.walk(self.tree):
            line = getattr(node, "lineno", 0)
            if isinstance(node, ast.Attribute):
                self.attribute(node, line)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.imports(node, line)
            elif isinstance(node, ast.Call):
                self.call(node, line)
            value = self.fold(node) if isinstance(node, (ast.Constant, ast.BinOp, ast.JoinedStr)) else None
            if value is not None:
                self.string(value, line)

    # -- what a name or an expression stands for
    def is_torch(self, node) -> bool:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, ast.Name):
            return node.id in self.aliases or node.id == "torch"
        if isinstance(node, ast.Call):  # importlib.import_module("torch..."), __import__("torch")
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__", "reload") and node.args:
                text = self.fold(node.args[0])
                return bool(text) and text.split(".")[0] == "torch" or self.is_torch(node.args[0])
            if name == "getattr" and node.args:
                return self.is_torch(node.args[0])
        return False

    def fold(self, node):
        """The string `node` evaluates to, when it is made of constants only; otherwise None."""
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            return self.strings.get(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.fold(node.left), self.fold(node.right)
            return left + right if left is not None and right is not None else None
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                text = self.fold(value.value if isinstance(value, ast.FormattedValue) else value)
                if text is None:
                    return None
                parts.append(text)
            return "".join(parts)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" \
                and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)):
            sep = self.fold(node.func.value)
            parts = [self.fold(e) for e in node.args[0].elts]
            return sep.join(parts) if sep is not None and None not in parts else None
        return None

    # -- costs and flags
    def cost(self, name: str) -> None:
        if self.cost_to is not None:
            self.cost_to(name)

    def flag(self, line: int, what: str) -> None:
        if self.found is not None:
            self.found.flag(f"{self.where} line {line}: {what}")

    def attribute(self, node, line) -> None:
        attr = node.attr
        if attr in self.rules.anywhere or (attr in self.rules.torch_only and self.is_torch(node.value)):
            self.cost(attr)
        root = node.value.id if isinstance(node.value, ast.Name) else None
        if attr in self.rules.flag_attributes or (root, attr) in self.rules.flag_rooted:
            self.flag(line, f"{'.'.join(filter(None, (root, attr)))} (reflective access)")
        elif attr == "__dict__" and self.is_torch(node.value):
            self.flag(line, "__dict__ of a torch module (reflective access)")

    def imports(self, node, line) -> None:
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for module in modules:
            top = module.split(".")[0]
            if top in self.rules.kit and not (isinstance(node, ast.ImportFrom) and node.level):
                self.cost(f"the kit's own code ({module})")
                self.flag(line, f"imports {module} (the grader's own code)")
            elif top in self.rules.flag_modules and top not in self.rules.ordinary_imports:
                self.flag(line, f"imports {module}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            for alias in node.names:
                if alias.name in self.rules.anywhere or alias.name in self.rules.torch_only:
                    self.cost(alias.name)
                if alias.name in self.rules.flag_attributes:
                    self.flag(line, f"imports {alias.name} from {node.module}")

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
            if text is None:
                if on_torch:
                    self.flag(line, f"{name}() on torch with a name worked out at run time")
            elif text in self.rules.torch_only and on_torch:
                self.cost(text)
        if (name == "__import__" or (isinstance(func, ast.Attribute) and func.attr in ("import_module", "reload"))) \
                and node.args:
            module = self.fold(node.args[0])
            if module is None:
                self.flag(line, "imports a module whose name is worked out at run time")
            elif module.split(".")[0] in self.rules.kit:
                self.cost(f"the kit's own code ({module})")

    def string(self, text: str, line: int) -> None:
        parts = text.replace(":", ".").split(".")
        if text in self.rules.anywhere or parts[-1] in self.rules.anywhere and parts[0] == "torch":
            self.cost(parts[-1])
        elif parts[0] == "torch" and parts[-1] in self.rules.torch_only and len(parts) > 1:
            self.cost(parts[-1])
        elif parts[0] in self.rules.kit and len(parts) > 1 and parts[0] != text:
            self.flag(line, f"names the grader's own module {text!r}")


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
            found.add(words[1].split(".")[0].rstrip(","))
    return found


def _imported(tree) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def _defined_names(tree) -> set[str]:
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def read_sources(directory: Path, notebook_module: str,
                 generated: dict[str, str] | None = None) -> list[tuple[str, str, list | None]]:
    """(file name, text, cells) for each top-level .py file of a scratch copy; cells for the notebook module.
    `generated` (file name -> text) are the modules the intake writes around a notebook's cells: a file
    with exactly that text is the kit's, not the student's (its globals() call is no integrity flag),
    and the cells it runs are read from the notebook module."""
    sources = []
    for path in sorted(Path(directory).glob("*.py")):
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_SOURCE_BYTES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if generated and generated.get(path.name) == text:
            continue
        cells = None
        if path.stem == notebook_module:
            cells = _notebook_cells(text)
        sources.append((path.name, text, cells))
    return sources


def _notebook_cells(text: str) -> list:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CELLS" for t in node.targets):
            try:
                cells = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, RecursionError, MemoryError):
                return []
            return [c for c in cells if isinstance(c, str)] if isinstance(cells, list) else []
    return []

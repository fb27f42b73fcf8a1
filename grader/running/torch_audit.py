"""Know every attention in the installed torch: list the candidates and hold each to the lesson's policy.

Library attention is banned by name (the lesson's forbidden.toml), so a torch that ships one more
attention, written in plain Python out of ordinary ops, would give a student full marks for code they
did not write. This audit lists every candidate in the installed torch:

- a Python function (or method) in torch's source that calls a softmax, or whose name or module
  mentions attention or sdpa (read from the source files, nothing imported);
- a registered operator whose name mentions attention or sdpa (after importing the modules the
  policy bans functions in, as the sandbox's zygote does, so their operators are registered).

Each candidate must be banned by the policy (an aten operator in [kernels] ops; a function in
[python] functions, or something inside it; a module in [python] modules) or be listed in the lesson's
review file ([audit] reviewed in forbidden.toml) with the reason it is harmless. The review file is
lesson data; an entry names a module (and so everything under it), a "module:qualname" (and what is
defined inside it), or an operator ("namespace::name", or a prefix ending in "*").

    python -m grader.running.torch_audit [--lesson NAME|PATH]   # exit 1, listing them, when any is unaccounted for

A test runs it, so the next torch that adds an attention fails the kit's tests until it is banned or
reviewed.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

MENTIONS = re.compile(r"attention|sdpa", re.IGNORECASE)


@dataclass(frozen=True)
class Candidate:
    name: str  # "module:qualname" for a Python function, "namespace::op" for an operator
    why: str

    @property
    def is_op(self) -> bool:
        return "::" in self.name


def python_candidates(package_root: Path, package: str = "torch") -> list[Candidate]:
    """Every function or method under `package_root` that calls a softmax or whose name or module
    mentions attention or sdpa, read from the source (no module is imported)."""
    found = []
    for path in sorted(Path(package_root).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(package_root).with_suffix("")
        module = ".".join([package, *rel.parts]).removesuffix(".__init__")
        data = path.read_bytes()
        lowered = data.lower()
        if not MENTIONS.search(module) and b"softmax" not in lowered and b"attention" not in lowered \
                and b"sdpa" not in lowered:
            continue  # no candidate can be in it (parsing all of torch takes minutes)
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # not Python this interpreter can import either (e.g. a file for a newer Python)
        found += _functions_of(tree, module)
    return found


def _functions_of(tree, module: str) -> list[Candidate]:
    found, todo = [], [(tree, "")]
    while todo:
        node, prefix = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    why = _why(child, module, qualname)
                    if why:
                        found.append(Candidate(f"{module}:{qualname}", why))
                todo.append((child, qualname + "."))
            else:
                todo.append((child, prefix))
    return found


def _why(function, module: str, qualname: str) -> str | None:
    if MENTIONS.search(qualname):
        return "its name mentions attention or sdpa"
    if MENTIONS.search(module):
        return "its module mentions attention or sdpa"
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if "softmax" in name.lower():
                return "it calls a softmax"
    return None


def op_candidates(policy: dict) -> list[Candidate]:
    """Registered operators whose name mentions attention or sdpa, once the modules the policy bans
    functions in are imported (as the zygote imports them)."""
    import torch

    for spec in policy.get("python", {}).get("functions", ()):
        with contextlib.suppress(Exception):
            importlib.import_module(spec.partition(":")[0])
    names = sorted(set(torch._C._dispatch_get_all_op_names()))
    return [Candidate(name, "its name mentions attention or sdpa") for name in names if MENTIONS.search(name)]


def banned(candidate: Candidate, policy: dict) -> bool:
    if candidate.is_op:
        namespace, _, op = candidate.name.partition("::")
        return namespace == "aten" and op.split(".")[0] in set(policy.get("kernels", {}).get("ops", ()))
    module, _, qualname = candidate.name.partition(":")
    python = policy.get("python", {})
    for spec in python.get("functions", ()):
        spec_module, _, spec_qualname = spec.partition(":")
        if spec_module == module and (spec_qualname == qualname or _inside(spec_qualname, qualname)
                                      or _inside(qualname, spec_qualname)):
            return True  # the function itself, its implementation (attention_23._init_fn), or a function inside it
    return any(_inside(module, m) or module == m for m in python.get("modules", ()))


def reviewed(candidate: Candidate, entries: list[dict]) -> str | None:
    """The reason of the review entry that covers `candidate`, or None."""
    for entry in entries:
        for match in entry.get("match", ()):
            if candidate.is_op:
                hit = match == candidate.name or (match.endswith("*") and candidate.name.startswith(match[:-1]))
            elif ":" in match:
                hit = match == candidate.name or _inside(candidate.name, match)
            else:
                module = candidate.name.partition(":")[0]
                hit = module == match or _inside(module, match)
            if hit:
                return entry.get("reason")
    return None


def _inside(name: str, outer: str) -> bool:
    return name.startswith(outer + ".")


def unaccounted(candidates: list[Candidate], policy: dict, entries: list[dict]) -> list[Candidate]:
    return [c for c in candidates if not banned(c, policy) and not reviewed(c, entries)]


def review_entries(policy: dict, policy_path: Path) -> list[dict]:
    """The lesson's review file's entries ([audit] reviewed in forbidden.toml, relative to it); each
    must give a reason."""
    name = policy.get("audit", {}).get("reviewed")
    if not name:
        return []
    path = Path(policy_path).parent / name
    with open(path, "rb") as f:
        entries = tomllib.load(f).get("reviewed", [])
    for i, entry in enumerate(entries):
        if not str(entry.get("reason", "")).strip() or not entry.get("match"):
            raise ValueError(f"{path}: review entry {i + 1} needs a match list and a reason (why it is harmless)")
    return entries


def audit(policy_path: Path) -> tuple[list[Candidate], list[Candidate]]:
    """(all candidates, those neither banned nor reviewed) for the installed torch."""
    import torch

    from grader.running.forbidden import load_policy

    policy = load_policy(policy_path)
    entries = review_entries(policy, policy_path)
    candidates = python_candidates(Path(torch.__file__).parent) + op_candidates(policy)
    return candidates, unaccounted(candidates, policy, entries)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.running.torch_audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lesson", help="the lesson (name or folder) whose forbidden.toml to hold torch to")
    args = parser.parse_args(argv)
    from grader.lesson import load_lesson

    lesson = load_lesson(args.lesson)
    import torch

    candidates, left = audit(lesson.forbidden_path)
    if not left:
        print(f"torch {torch.__version__}: all {len(candidates)} attention candidates are banned or reviewed "
              f"({lesson.forbidden_path})")
        return 0
    print(f"torch {torch.__version__}: {len(left)} of {len(candidates)} attention candidates are neither banned nor "
          f"reviewed. For each, read its code: ban it in {lesson.forbidden_path} ([python] functions or modules, "
          "[kernels] ops) if it computes attention a student could call, or add it to the review file with the "
          "reason it is harmless.", file=sys.stderr)
    for c in left:
        print(f"  {c.name}  ({c.why})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""The library scan: a part that reaches a library the lesson forbids fails its tests, as it loses the part.

Two readings, as the graders do: the part's file is read (a forbidden name costs the part even in code
that never runs: `named_in_source`, the graders' list as shipped in known_mistakes.json), and the library
functions the lesson watches are wrapped before the student's files are imported (`Watch`), so a call is
seen however it was imported.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

DEFAULT_MESSAGE = "Your code reaches {names}, which this lesson does not allow (see the README)."
LIBRARY_ROOTS = {"torch", "F", "nn", "functional"}  # the names torch is usually reached through


def message(policy: dict, names) -> str:
    """The graders' own words (the rubric's forbidden_message) for a part that reaches forbidden names."""
    return (policy.get("message") or DEFAULT_MESSAGE).format(names=", ".join(sorted(names)))


def named_in_source(path: Path, policy: dict) -> tuple[str, ...]:
    """The forbidden names that the file at `path` reaches by name: `anywhere` names on any object or as a
    string, `torch_only` names through torch (torch, F, nn, functional or an alias of them), imports of
    the kit's own packages."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return ()
    anywhere, torch_only = set(policy.get("anywhere", ())), set(policy.get("torch_only", ()))
    kit = set(policy.get("kit_packages", ()))
    torch_names, found, attributes = set(LIBRARY_ROOTS), set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            torch_names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "torch"}
            found |= {f"the kit's own code ({a.name})" for a in node.names if a.name.split(".")[0] in kit}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            if module.split(".")[0] == "torch":
                torch_names |= {a.asname or a.name for a in node.names}
                found |= {a.name for a in node.names if a.name in anywhere | torch_only}
            elif module.split(".")[0] in kit:
                found.add(f"the kit's own code ({module})")
        elif isinstance(node, ast.Attribute) and node.attr in anywhere | torch_only:
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            attributes.append((getattr(root, "id", None), node.attr))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = node.value.replace(":", ".").split(".")
            if node.value in anywhere or (parts[0] == "torch" and parts[-1] in anywhere | torch_only and len(parts) > 1):
                found.add(parts[-1])
    found |= {attr for root, attr in attributes if attr in anywhere or root in torch_names}
    return tuple(sorted(found))


class Watch:
    """Library functions wrapped so that each call is noted (`used`), whatever name it was reached by."""

    def __init__(self):
        self.used: set[str] = set()

    def watch(self, owner, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)
        if getattr(original, "_watched_as", None):  # the tests' module imported again: wrapped once
            original = original.__wrapped__

        @functools.wraps(original)
        def watched(*args, **kwargs):
            self.used.add(name)
            return original(*args, **kwargs)

        watched._watched_as = name
        setattr(owner, attribute, watched)

"""What `make setup` builds: a venv without the package whose import made every `import nbformat` slow
(pyproject.toml, below [project.optional-dependencies], says which and why)."""
import json
import os
import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]

# What a process of the kit's venv does with notebooks: nbformat validates one and refuses a broken one, and
# jsonschema checks a format it still knows; which modules that loaded, and what the checks answered.
_USE = """
import json, sys
import jsonschema, nbformat
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
nbformat.validate(nb)
broken = nbformat.v4.new_notebook()
broken.cells.append({"cell_type": "code", "source": 1})
try:
    nbformat.validate(broken)
    refused = False
except nbformat.ValidationError:
    refused = True
checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
print(json.dumps({"loaded": sorted({m.split(".")[0] for m in sys.modules} & {"rfc3987_syntax", "lark"}),
                  "refused": refused, "date": [checker.conforms("2026-12-03", "date"), checker.conforms("3 Dec", "date")]}))
"""


def test_notebooks_are_read_and_checked_without_the_iri_parser():
    ran = subprocess.run([sys.executable, "-c", _USE], capture_output=True, text=True, timeout=120, cwd=KIT)
    assert ran.returncode == 0, ran.stderr[-3000:]
    found = json.loads(ran.stdout)
    assert found["loaded"] == [], (
        f"importing nbformat loaded {found['loaded']} in {sys.prefix}: run `make setup`, which removes rfc3987-syntax "
        "(pyproject.toml says why); a venv built otherwise pays its parser's start in every nbgrader command")
    assert found["refused"], "nbformat no longer refuses a notebook its schema forbids"
    assert found["date"] == [True, False], "jsonschema no longer checks the formats it knows without rfc3987-syntax"


def _fresh_bytecode(source: Path) -> bool:
    """Whether the __pycache__ file Python would read for `source` exists and matches it (the mtime and size
    that a timestamp-checked .pyc records in bytes 8-16)."""
    import importlib.util

    cached = Path(importlib.util.cache_from_source(str(source)))
    try:
        header = cached.read_bytes()[:16]
    except OSError:
        return False
    stat = source.stat()
    return (len(header) == 16 and int.from_bytes(header[4:8], "little") == 0
            and int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF)


def test_make_test_and_make_grade_run_the_engine_from_its_compiled_bytecode():
    # Both compile grader/ first (make bytecode); every engine module then has bytecode Python takes as it is,
    # whatever PYTHONDONTWRITEBYTECODE says, and solutions/ and assignments/ get none.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL")}
    for target, command in (("test", "-m pytest"), ("grade", "-m grader grade")):
        plan = subprocess.run(["make", "-n", target], cwd=KIT, capture_output=True, text=True, timeout=60, env=env).stdout
        assert "-m compileall -q -j 0 grader" in plan and plan.index("compileall") < plan.index(command), plan
    made = subprocess.run(["make", "-s", "bytecode"], cwd=KIT, capture_output=True, text=True, timeout=300, env=env)
    assert made.returncode == 0, made.stderr[-3000:]
    stale = [str(p.relative_to(KIT)) for p in sorted((KIT / "grader").rglob("*.py")) if not _fresh_bytecode(p)]
    assert stale == [], f"no up-to-date bytecode after `make bytecode` for {stale[:5]}"
    for folder in ("solutions", "assignments"):
        assert not list((KIT / folder).rglob("__pycache__")), f"{folder}/ got a __pycache__"

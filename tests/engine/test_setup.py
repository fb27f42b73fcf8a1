"""What `make setup` builds: a venv without the package whose import made every `import nbformat` slow
(pyproject.toml, below [project.optional-dependencies], says which and why)."""
import json
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

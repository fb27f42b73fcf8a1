"""The student side of every lesson's visible tests: what `make test` says when a test fails.

A lesson's tests/conftest.py keeps only its own data (its parts, its stand-ins, the words of its error
hints) and hands it to `VisibleTests`, which gives the tests what every lesson's students get:

- checks whose failure shows expected, got and where they differ most (`checks.Check`);
- a misconception named only when the student's numbers are a catalogued mistake's (`checks.Evidence`,
  reading tests/known_mistakes.json, which the kit builds: python -m grader.devtools.visible_fingerprints),
  else the facts the numbers show (the engine's diagnose.py, shipped beside this package);
- the library scan: a forbidden name in a part's file, or a watched library call while its test runs,
  fails the test with the lesson's words (`library`);
- one short message at the student's line for an error raised in their code, told in full once, and a
  stub's NotImplementedError said once (`errors`);
- a file that does not import fails only the tests that need it; tests run in the order of the tasks.

The release copies this package into every student folder as tests/_feedback/ (with the engine's
diagnose.py inside it), so a student's folder needs nothing of the kit. Standalone on purpose: the
standard library, numpy and pytest only; torch values are read through their numpy view.
"""
from .checks import Check, Evidence, fingerprint
from .plugin import VisibleTests

__all__ = ["Check", "Evidence", "VisibleTests", "fingerprint"]

"""The BPE lesson's tolerances. Its answers are ids, bytes and strings, compared exactly; MATCH is what
the catalogue lookup (grader/judging/mutants.py) uses for any number inside them, so it is exact too."""
from grader.judging.tolerances import Tol

MATCH = Tol(0.0, 0.0, "ids and byte strings: a bug's answer is the same answer or another one")

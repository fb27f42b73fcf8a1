"""The BPE lesson's hidden graders, judged the way `python -m grader killrate --lesson bpe` judges them:
every catalogue mutant loses points in its own part only, fails its named test and gets its hint;
every correct variant gets full marks. The grading is the command itself (trusted code only: the
reference, its mutants, the variants). That the students' visible tests agree with it on every part
(parity) is every lesson's test: tests/engine/test_visible_parity.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grader.bpe.catalogue import BUGS

from .helpers import ROOT, VARIANTS


def _env():
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.fixture(scope="module")
def killrate_output():
    """What `python -m grader killrate --lesson bpe` prints (and its exit code): one verdict per mutant
    ("killed": it lost points in its own part and no other, failed its named test and got its hint) and
    one per correct variant ("full marks")."""
    done = subprocess.run([sys.executable, "-m", "grader", "killrate", "--lesson", "bpe"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout + done.stderr


def test_killrate_command_reports_every_mutant_killed_and_no_false_failure(killrate_output):
    code, said = killrate_output
    assert code == 0, said[-3000:]
    assert f"Kill rate: {len(BUGS)}/{len(BUGS)} = 100.0%" in said, said
    variants = len([p for p in VARIANTS.iterdir() if p.is_dir()])
    assert f"Correct implementations: {variants}" in said and "False failures: 0 of" in said, said
    for bug in BUGS:
        assert f"killed  {bug.id} " in said, bug.id

"""The answers of the visible multi-head tests' stand-in attention (assignments/day13/tests/attention_answers.pt).

The students' multi-head tests run their MultiHeadAttention on a stand-in for their
scaled_dot_product_attention that is not attention: it looks up the answer for the exact Q, K, V
and mask the tests lead to, with one Jacobian per head for the backward pass. This module makes
that table by running the visible multi-head tests on the reference with a recording stand-in
(grader/day13/standins.py, the graders' own) in its place:

    python -m grader.day13.visible_answers            # rewrite the table
    python -m grader.day13.visible_answers --check    # exit 1 when the table is out of date

Run it after changing a visible multi-head test; tests/day13/test_visible_tests.py checks the table is current.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = ROOT / "assignments" / "day13"
SOLUTIONS = ROOT / "solutions" / "day13"
TABLE = ASSIGNMENT / "tests" / "attention_answers.pt"
_OUT = "DAY13_VISIBLE_ANSWERS_OUT"
# Slopes are stored for the small calls only (the tests that take a gradient keep theirs small),
# so the table stays small enough to commit.
MAX_JACOBIAN = 5_000


def record(target: Path) -> None:
    """Run the visible multi-head tests on the reference, recording each attention call into `target`."""
    with tempfile.TemporaryDirectory(prefix="day13-answers-") as tmp:
        folder = Path(tmp) / "day13"
        shutil.copytree(ASSIGNMENT / "tests", folder / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
        shutil.copyfile(ASSIGNMENT / "pytest.ini", folder / "pytest.ini")
        for path in SOLUTIONS.glob("*.py"):
            shutil.copyfile(path, folder / path.name)
        env = {**os.environ, _OUT: str(target), "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "grader.day13.visible_answers", "-p",
                               "no:cacheprovider", "-m", "multihead", "-q"], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not target.exists():
            raise RuntimeError(f"recording the stand-in's answers failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


# -- the pytest plugin (active only in the recording run above) ---------------------------------
_records: list = []


def _recorder(Q, K, V, mask=None):
    import torch

    from grader.day13 import standins

    q, k, v = (t.detach().to(torch.float64) for t in (Q, K, V))
    out, weights = standins.scaled_dot_product_attention(q, k, v, mask)
    if not any(all(torch.equal(r[n], t) for n, t in (("Q", q), ("K", k), ("V", v)))
               and _same_mask(r["mask"], mask) for r in _records):
        B, h, T, d = q.shape
        jacobian = None
        if B * h * (T * d + T * T) * 3 * T * d <= MAX_JACOBIAN:
            jacobian = _jacobian(q, k, v, mask)
        _records.append({"Q": q, "K": k, "V": v, "mask": None if mask is None else torch.as_tensor(mask).clone(),
                         "out": out.detach(), "weights": weights.detach(), "jacobian": jacobian})
    return standins.scaled_dot_product_attention(Q, K, V, mask)


def _jacobian(q, k, v, mask):
    """(B, h, T·d + T·T, 3·T·d): for each head, d(out, weights) / d(Q, K, V), flattened."""
    import torch

    from grader.day13 import standins

    B, h, T, d = q.shape
    allowed = torch.ones(B, h, T, T) if mask is None else torch.broadcast_to(
        torch.as_tensor(mask) != 0, (B, h, T, T)).to(torch.float64)
    jacobian = torch.zeros(B, h, T * d + T * T, 3 * T * d, dtype=torch.float64)
    for b in range(B):
        for i in range(h):
            def head(flat, b=b, i=i):
                hq, hk, hv = flat.reshape(3, T, d)
                o, w = standins.scaled_dot_product_attention(hq, hk, hv, allowed[b, i])
                return torch.cat([o.reshape(-1), w.reshape(-1)])

            flat = torch.stack([q[b, i], k[b, i], v[b, i]]).reshape(-1)
            jacobian[b, i] = torch.autograd.functional.jacobian(head, flat)
    return jacobian


def _same_mask(a, b) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    b = torch.as_tensor(b)
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def pytest_collection_finish(session):
    conftest = sys.modules.get("conftest")
    if conftest is None or not hasattr(conftest, "_stand_in_attention"):
        raise RuntimeError("the visible tests' conftest.py has no _stand_in_attention to record")
    conftest._stand_in_attention = _recorder


def pytest_sessionfinish(session, exitstatus):
    import torch

    if exitstatus == 0 and os.environ.get(_OUT):
        torch.save(_records, os.environ[_OUT])


# -- checking -------------------------------------------------------------------------------------
def same_tables(a: list, b: list) -> bool:
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if set(x) != set(y):
            return False
        for key in x:
            if (x[key] is None) != (y[key] is None):
                return False
            # The reference computes Q, K, V in float32, and another CPU's kernels may round them a unit in
            # the last place differently (2e-7 seen): the table is current when it agrees at float32 precision,
            # far tighter than the students' lookup (1e-4) and far looser than a changed test's inputs.
            if x[key] is not None and not (x[key].shape == y[key].shape and torch.allclose(
                    x[key].to(torch.float64), y[key].to(torch.float64), rtol=1e-5, atol=1e-6)):
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(prog="python -m grader.day13.visible_answers", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the stored table instead of writing it")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "answers.pt"
        record(fresh)
        if args.check:
            current = TABLE.exists() and same_tables(torch.load(TABLE, weights_only=True),
                                                     torch.load(fresh, weights_only=True))
            print(f"{TABLE.relative_to(ROOT)} is {'up to date' if current else 'out of date: run python -m grader.day13.visible_answers'}")
            return 0 if current else 1
        shutil.copyfile(fresh, TABLE)
        print(f"wrote {TABLE.relative_to(ROOT)} ({len(torch.load(TABLE, weights_only=True))} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

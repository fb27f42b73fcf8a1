"""The run's seed: where the hidden tests' extra probes draw their inputs, and the order calls are sent in.

A probe a student could predict can be recognised and answered apart from the calls it stands for. So
the inputs a lesson's tests add to judge whether a function does the work (and the order of the calls
in each test) come from a seed made for the class run, not written in the tests. It is kept in the
run's output folder, so that grading the same folder again reuses it and gives byte-identical records;
`grade --seed N` pins it (and regrades what was graded under another). It lives in this process and in
OUT only (0600, in a folder no sandbox uid may read): a child never sees it, before or after it answers,
and no student-facing file shows it.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

FILE = "_seed"  # under OUT; "_" keeps it apart from the students' folders (like _rubrics)
BITS = 63


class SeedError(ValueError):
    """A seed that cannot be used: the message says where it came from and what to do."""


def read(out) -> int | None:
    """The seed kept in `out`, or None when none was made yet."""
    path = Path(out) / FILE
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SeedError(f"{path}: cannot read the run's seed ({exc}); delete it to draw a new one "
                        "(every submission is then graded again) or pass --seed N") from exc
    return parse(text, where=str(path))


def parse(value, *, where: str = "--seed") -> int:
    try:
        seed = int(str(value).strip())
    except ValueError:
        raise SeedError(f"{where}: {value!r} is not a whole number; a seed is 0 <= N < 2**{BITS}") from None
    if not 0 <= seed < 1 << BITS:
        raise SeedError(f"{where}: {seed} is out of range; a seed is 0 <= N < 2**{BITS}")
    return seed


def choose(out, pinned=None) -> tuple[int, bool]:
    """The seed this run grades with, and whether `out` was graded with another (its records then came from
    other probes and are graded again). `pinned` (--seed) wins; else the one kept in `out`; else a new one,
    from the system's RNG. Nothing is written: `keep` does, once the run starts."""
    kept = read(out)
    seed = parse(pinned) if pinned is not None else kept
    if seed is None:
        seed = secrets.randbits(BITS)
    return seed, kept is not None and seed != kept


def keep(out, seed: int) -> None:
    """Write `seed` to `out` (readable by this user only), unless it is there already."""
    out = Path(out)
    if read(out) == seed:
        return
    out.mkdir(parents=True, exist_ok=True)
    new = out / (FILE + ".new")
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(f"{seed}\n")
    os.replace(new, out / FILE)

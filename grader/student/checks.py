"""Comparisons whose failure shows expected, got and where they differ, and the evidence about mistakes.

`Check` is the `check` fixture of every lesson's visible tests. A failed comparison says what differs and
where; then, in this order of trust: a known mistake when the student's numbers are exactly that
mistake's (`Evidence`, from tests/known_mistakes.json), else the facts the numbers show (diagnose.py)
and the test's hint only when one of the facts it follows from was found. Nothing names a cause the
numbers do not show.
"""
from __future__ import annotations

import hashlib
import json
import math
import numbers

import pytest

SMALL = 16  # a value with at most this many entries is shown whole
SAMPLE = 64  # numbers a fingerprint keeps, evenly spread
MATCH_ATOL, MATCH_RTOL = 1e-4, 1e-3  # the graders' tolerance for "the same mistake"


# numpy and the fact finder are imported when a comparison of numbers needs them: a lesson whose values are
# strings and lists (its students may have the standard library and pytest only) never imports them.
def _np():
    import numpy

    return numpy


def _diagnose():
    try:  # the release ships the engine's diagnose.py inside this package
        from . import diagnose
    except ImportError:  # the kit's own copy of a lesson's tests: the engine's module
        from grader.judging import diagnose
    return diagnose


def as_array(value):
    """The numbers of a number, a list, a numpy array or a torch tensor, as float64 (a tensor detached)."""
    np = _np()
    if hasattr(value, "detach"):  # a torch tensor, read without importing torch
        value = value.detach().cpu().double().numpy()
    return np.asarray(value, dtype=np.float64)


def shape_of(value) -> tuple[int, ...]:
    return tuple(int(n) for n in (value.shape if hasattr(value, "shape") else _np().shape(value)))


def fingerprint(value) -> dict:
    """A compact, comparable summary of an array: its shape and at most SAMPLE of its values, evenly spread."""
    np = _np()
    array = as_array(value)
    flat = array.reshape(-1)
    if flat.size > SAMPLE:
        flat = flat[np.linspace(0, flat.size - 1, SAMPLE).round().astype(np.int64)]
    return {"shape": list(array.shape), "values": flat.tolist()}


def _sample(values: list) -> list:
    """At most SAMPLE of `values`, evenly spread (the indices numpy's linspace rounds to, without numpy)."""
    if len(values) <= SAMPLE:
        return values
    return [values[round(i * (len(values) - 1) / (SAMPLE - 1))] for i in range(SAMPLE)]


def structured_fingerprint(value) -> dict:
    """The fingerprint of a structured value (a string, bytes, a list, a dict): its numbers when it is a flat
    list of numbers, else its length and a digest of its canonical form (never the value itself)."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                 for v in value):
        return {"shape": [len(value)], "values": _sample([float(v) for v in value])}
    canonical = json.dumps(_plain(value), sort_keys=True, ensure_ascii=True)
    length = len(value) if hasattr(value, "__len__") else 0
    return {"shape": [length], "digest": hashlib.sha256(canonical.encode()).hexdigest()[:16]}


def _plain(value):
    if isinstance(value, bytes):
        return {"bytes": list(value)}
    if isinstance(value, dict):
        return [[_plain(k), _plain(v)] for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def same(stored: dict, seen: dict) -> bool:
    """Are a stored fingerprint and a seen one the same, up to the graders' tolerance?"""
    if stored.get("shape") != seen["shape"]:
        return False
    if "digest" in stored or "digest" in seen:
        return stored.get("digest") == seen.get("digest")
    if len(stored.get("values", ())) != len(seen["values"]):
        return False
    scale = max([1.0] + [abs(v) for v in stored["values"] if isinstance(v, (int, float)) and math.isfinite(v)])
    for a, b in zip(stored["values"], seen["values"]):
        a = float(a) if isinstance(a, str) else a  # "nan", "inf", "-inf"
        if math.isnan(a) or math.isnan(b):
            if not (math.isnan(a) and math.isnan(b)):
                return False
        elif a != b and not (math.isfinite(a) and math.isfinite(b)
                             and abs(a - b) <= MATCH_ATOL * scale + MATCH_RTOL * abs(a)):
            return False  # an infinity matches only itself: its relative tolerance would take any number
    return True


class Evidence:
    """Counts the comparisons of the running test; on a failure, the known mistakes that give the same numbers.

    `known` is tests/known_mistakes.json: for each test, the first comparison each catalogued mistake fails
    and what it gives there; the mistakes' hints; the words for facts."""

    def __init__(self, known: dict):
        self.known = known
        self.test, self.count = None, 0
        self.record = None  # the kit's fingerprint builder listens here: record(test, n, kind, got, expected, failed)
        self.told = None  # the kit's diagnostics audit listens here: told(test, what was found and said)
        self.extra, self.matched, self.pending = [], [], {}
        # The tests each known mistake fails, and what this run's tests did so far: test -> None (passed), or
        # the mistakes whose numbers its first failed comparison gave (see refuted).
        self.fails: dict[str, set[str]] = {}
        for test, comparisons in known.get("tests", {}).items():
            self.fails[test] = {m for entries in comparisons.values() for entry in entries for m in entry.get("mutants", ())}
        # The tests of its part each known mistake passes.
        self.passes: dict[str, set[str]] = {m: set(tests) for m, tests in known.get("passes", {}).items()}
        self.outcomes: dict[str, tuple[str, ...] | None] = {}
        self.first_matched: tuple[str, ...] | None = None

    def moved_on_its_own(self) -> bool:
        """Whether this test saw the same call give two answers (the `random` fact of a repeated call)."""
        return any(f.get("id") == "random" for f in self.extra)

    def start(self, test: str) -> None:
        self.test, self.count = test, 0
        self.extra, self.matched = [], []
        self.first_matched = None

    def finish(self, test: str, passed: bool) -> None:
        """What `test` did, for the tests after it: passed, or failed with whose numbers."""
        self.outcomes[test] = None if passed else (self.first_matched or ())

    def refuted(self, mistake: str) -> bool:
        """Whether a test this run already did rules `mistake` out: a test it fails that passed, or that failed
        with other numbers than the mistake's, or a test it passes that failed. Its numbers on one test are then a
        coincidence, not its cause."""
        return any((mistake in self.fails.get(test, ()) and (outcome is None or mistake not in outcome))
                   or (outcome is not None and test in self.passes.get(mistake, ()))
                   for test, outcome in self.outcomes.items() if test != self.test)

    def facts(self, got, expected, options, weights, allowed, means, atol) -> list[dict]:
        """What the numbers of a failed comparison show (diagnose.py), with the test's own observations."""
        found = []
        try:
            diagnose = _diagnose()
            found = diagnose.compare(got, expected, atol=atol, rtol=0.0, **(options or {}))
            if weights is not None:
                mask = None if allowed is None else as_array(allowed) != 0
                found += diagnose.distributions(as_array(weights), mask)
        except Exception:  # noqa: BLE001 - a fact that cannot be computed is not claimed
            pass
        if means and not self.moved_on_its_own():
            # `means` reads a difference between the student's own calls as a mistake; once the same call gave two
            # answers, randomness alone explains any such difference.
            found.append(dict(means) if isinstance(means, dict) else {"id": means})
        found += [f for f in self.extra if f not in found]
        if self.told is not None:
            self.pending = {"facts": found, "got": got.tolist(), "expected": expected.tolist(),
                            "options": {k: v for k, v in (options or {}).items() if k != "allowed"}, "atol": atol,
                            "allowed": _allowed_list(allowed if allowed is not None else (options or {}).get("allowed")),
                            "weights": None if weights is None else as_array(weights).tolist()}
        return found

    def words(self, evidence: str, found: list, hint: str, when) -> str:
        """The words of a failure: a known mistake's when the numbers are its, else the facts' and the hint
        when one of its facts is there. Nothing names a cause the numbers do not show."""
        shown = bool(hint) and not evidence and bool(found) and bool(_diagnose().matched(found, when))
        if self.told is not None:
            self.told(self.test, {**self.pending, "mutants": list(self.matched),
                                  "hint": hint if shown else "", "when": list(when)})
            self.pending = {}
        if evidence:
            return evidence
        sentences = _diagnose().words(found, self.known.get("facts", {})) if found else []
        text = "".join(f"\n- {line}" for line in sentences)
        text = f"\nWhat your numbers show:{text}" if text else ""
        return text + (f"\nHint: {hint}" if shown else "")

    def compared(self, kind: str, got, expected, failed: bool) -> str:
        """Call at every comparison; returns the text to add to a failure ("" when nothing is known)."""
        self.count += 1
        if self.record is not None:
            self.record(self.test, self.count, kind, *self.fingerprints(kind, got, expected), failed)
        if not failed:
            return ""
        same = self.matches(kind, got, expected)
        if self.first_matched is None:
            self.first_matched = tuple(same)
        self.matched = [m for m in same if not self.refuted(m)]
        return self.explain(self.matched)

    @staticmethod
    def fingerprints(kind: str, got, expected):
        if kind == "shape":  # only the shape is compared: the values may hang on how layers were initialised
            return {"shape": list(shape_of(got)), "values": []}, None
        if kind == "equal":
            return structured_fingerprint(got), None if expected is None else structured_fingerprint(expected)
        return fingerprint(got), None if expected is None else fingerprint(expected)

    def matches(self, kind: str, got, expected) -> list[str]:
        """The catalogue ids whose outputs are these, at this comparison of this test."""
        seen_got, seen_expected = self.fingerprints(kind, got, expected)
        found = []
        for entry in self.known.get("tests", {}).get(self.test or "", {}).get(str(self.count), ()):
            if entry.get("kind") != kind or not same(entry["got"], seen_got):
                continue
            if "expected" in entry:
                if entry["expected"] is None:  # the mistake gave no second value where these tests have one
                    if seen_expected is not None:
                        continue
                elif seen_expected is None or not same(entry["expected"], seen_expected):
                    continue
            found += [m for m in entry.get("mutants", ()) if m not in found]
        return found

    def explain(self, mistakes: list[str]) -> str:
        hints = self.known.get("hints", {})
        texts = [hints[m] for m in mistakes if m in hints]
        if not texts:
            return ""
        if len(texts) == 1:
            return f"\nLikely misconception (your numbers are exactly what this known mistake gives): {texts[0]}"
        return (f"\nYour numbers are exactly what each of these {len(texts)} known mistakes gives; "
                "one of them is likely yours:\n" + "\n".join(f"  - {text}" for text in texts))


def _allowed_list(allowed):
    """A mask as lists of booleans (True where an entry may be nonzero), for the kit's audit."""
    return None if allowed is None else (as_array(allowed) != 0).tolist()


class Check:
    """The `check` fixture: comparisons whose failure message shows expected, got, where they differ most,
    and what the evidence says. A lesson may subclass it (its own value types) and hand the class to
    VisibleTests."""

    @property
    def diagnose(self):
        """The fact finder, for a test's own observations (check.observe(*check.diagnose.mixes(...)))."""
        return _diagnose()

    def __init__(self, evidence: Evidence):
        self.evidence = evidence

    def value(self, value, what: str):
        """What a comparison reads of `value`; a lesson's subclass refuses the types its contract does not
        allow (a failure naming `what`)."""
        return value

    def shape(self, value, expected, what: str) -> None:
        value = self.value(value, what)
        failed = shape_of(value) != tuple(expected)
        evidence = self.evidence.compared("shape", value, None, failed)
        if failed:
            pytest.fail(f"{what}: expected shape {tuple(expected)}, got {shape_of(value)}" + evidence, pytrace=False)

    def close(self, got, expected, what: str, *, decimals=None, atol=1e-5, hint="", when=(), facts=None,
              weights=None, allowed=None, means=None) -> None:
        """got ≈ expected; `decimals` compares at the handout's rounding (half a unit of the last place).

        On a failure the message shows what differs and where, then what the numbers show: a known mistake
        whose numbers these are (its words), else the facts diagnose.py finds (`facts`: its options for
        this comparison; `weights`: values checked as distributions, with `allowed` for a mask; `means`:
        the fact this comparison's failure itself establishes) and `hint` only when one of the facts in
        `when` was found."""
        np = _np()
        got = as_array(self.value(got, what))
        expected = as_array(expected)
        if decimals is not None:
            atol = 0.5 * 10 ** -decimals + 1e-9
        if got.shape != expected.shape:
            evidence = self.evidence.compared("close", got, expected, True)
            found = self.evidence.facts(got, expected, facts, weights, allowed, means, atol)
            pytest.fail(f"{what}: expected shape {expected.shape}, got {got.shape}"
                        + self.evidence.words(evidence, found, hint, when), pytrace=False)
        with np.errstate(invalid="ignore", over="ignore"):
            gap = np.nan_to_num(np.abs(got - expected), nan=np.inf)  # NaN counts as the largest gap
        bad = ~(gap <= atol)
        evidence = self.evidence.compared("close", got, expected, bool(bad.any()))
        if bad.any():
            shown = 4 if decimals is None else decimals + 1
            found = self.evidence.facts(got, expected, facts, weights, allowed, means, atol)
            pytest.fail(f"{what}\n" + difference(got, expected, gap, bad, atol, shown)
                        + self.evidence.words(evidence, found, hint, when), pytrace=False)

    def equal(self, got, expected, what: str, *, hint="", when=()) -> None:
        """got == expected for structured values (strings, bytes, lists, dicts): on a failure, both and the
        first place where they differ."""
        got = self.value(got, what)
        failed = not _equal(got, expected)
        evidence = self.evidence.compared("equal", got, expected, failed)
        if failed:
            found = list(self.evidence.extra)
            pytest.fail(f"{what}\n" + structured_difference(got, expected)
                        + self.evidence.words(evidence, found, hint, when), pytrace=False)

    def observe(self, *facts) -> None:
        """Facts this test found with calls of its own (a repeated call, a changed input), told with its
        next failure."""
        self.evidence.extra += [f for f in facts if f not in self.evidence.extra]

    def seen(self) -> list:
        """The facts this test has observed so far."""
        return list(self.evidence.extra)

    def moved_on_its_own(self) -> bool:
        """Whether a call this test repeated gave two different answers (something random runs)."""
        return self.evidence.moved_on_its_own()


def _equal(a, b) -> bool:
    """Equal as the contract's values are: sequences item by item, dicts key by key, numbers by value, and
    otherwise of the same type and ==."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if _number(a) and _number(b):
        return a == b
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - a value that cannot be compared is not equal
        return False


def _number(value) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def difference(got, expected, gap, bad, atol, decimals) -> str:
    """Expected and got (whole when small, the row around the largest gap otherwise), and where they differ most."""
    where = tuple(int(i) for i in _np().argwhere(gap == gap.max())[0])
    lines = []
    if expected.size <= SMALL:
        lines += [f"expected:\n{_fmt(expected, decimals)}", f"got:\n{_fmt(got, decimals)}"]
    else:
        row = where[:-1]
        label = "[" + ", ".join([str(i) for i in row] + [":"]) + "]"
        lines += [f"{int(bad.sum())} of {expected.size} entries of a {expected.shape} tensor differ "
                  f"by more than {atol:.1g}; the row with the largest difference:",
                  f"expected{label}: {_fmt_row(expected[row], where[-1], decimals)}",
                  f"got{label}:      {_fmt_row(got[row], where[-1], decimals)}"]
    lines.append(f"largest difference at index {where}: expected {float(expected[where]):.{decimals}f}, "
                 f"got {float(got[where]):.{decimals}f} (allowed gap {atol:.1g})")
    return "\n".join(lines)


def _fmt(array, decimals) -> str:
    return str(array.round(decimals))


def _fmt_row(row, column, decimals, width=8) -> str:
    """At most `width` values of a row, around `column`."""
    start = max(0, min(column - width // 2, row.size - width))
    values = [f"{v:.{decimals}f}" for v in row[start:start + width].tolist()]
    return ("... " if start > 0 else "") + "[" + ", ".join(values) + "]" + (" ..." if start + width < row.size else "")


SHOWN_CHARS = 200  # how much of a long structured value a message shows


def structured_difference(got, expected) -> str:
    """Expected and got (shortened around the first difference), and where they first differ."""
    place = first_difference(got, expected)
    return f"expected: {_short(expected)}\ngot:      {_short(got)}\n{place}"


def first_difference(got, expected) -> str:
    if type(got) is not type(expected) and not (isinstance(got, (list, tuple)) and isinstance(expected, (list, tuple))):
        return f"expected a {type(expected).__name__}, got a {type(got).__name__}"
    if isinstance(expected, dict):
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if missing or extra:
            return (f"keys missing: {_short(missing)}" if missing else "") + \
                ("; " if missing and extra else "") + (f"keys not expected: {_short(extra)}" if extra else "")
        key = next(k for k in expected if not _equal(got[k], expected[k]))
        return f"first difference at key {key!r}: expected {_short(expected[key])}, got {_short(got[key])}"
    if isinstance(expected, (list, tuple, str, bytes)):
        for i, (a, b) in enumerate(zip(got, expected)):
            if not _equal(a, b):
                return f"first difference at index {i}: expected {_short(b)}, got {_short(a)}"
        return f"expected length {len(expected)}, got length {len(got)} (equal up to index {min(len(got), len(expected))})"
    return f"expected {_short(expected)}, got {_short(got)}"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + " ..."

"""Audit: feedback names a cause only when the student's numbers show it, in the hidden grading and in the
visible tests alike.

Every catalogue mutant, every correct variant and the fresh mistakes of tests/fixtures/fresh_mistakes.py (none
of them in the catalogue) go through both routes:
- the hidden grading (grader/judging/score.py, in this process: trusted code only), and each hidden test run again here
  to keep the numbers its failure compared;
- the visible tests, as a student runs them, recorded by the conftest's EVIDENCE.told (grader/day13/
  visible_fingerprints.record_visible).
Then: a hint naming a cause appears only with its fingerprint (a catalogue mistake) or with one of the facts
it is written for; every fact claimed is recomputed here, independently of grader/judging/diagnose.py, from the numbers
it was found in; the facts that need other calls (randomness) are held to what is known of each submission;
and each fresh mistake gets, in both routes, the fact that points at its place.
"""
from __future__ import annotations

import ast
import dataclasses
import math
import shutil
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from grader.judging import diagnose

from grader.admin import killrate

from grader.judging import score
from grader.results import feedback
from grader.running.calls import InProcessTransport
from grader.judging.assertions import GradeFailure
from grader.day13 import visible_fingerprints
from grader.lesson import load_lesson

ROOT = Path(__file__).resolve().parents[2]
DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage
TESTS = ROOT / "assignments" / "day13" / "tests"
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
from fresh_mistakes import FRESH  # noqa: E402

RUBRIC = tomllib.loads((ROOT / "grader" / "day13" / "rubric.toml").read_text(encoding="utf-8"))
# Facts found from one comparison's numbers (recomputed below), and facts found from other calls or from
# the test's own structure (a comparison of two of the student's answers, a rule, a missing gradient).
NUMBERS = {"differs", "shape", "permuted", "nonfinite", "sign_flipped", "scaled", "score_scale",
           "rows_not_normalised", "sums_to_1_along", "blocked_weight", "only_at"}
OTHER_CALLS = {"random", "batch_mixing", "only_with", "only_with_mask", "mask_ignored", "matches_own",
               "weights_right", "mask_kinds_differ", "differs_from_own", "order_matters", "rule", "no_gradient",
               "outputs_in_other_order",
               "ln_eps",  # an attribute read from the student's module (grader/day13/tests/test_block.py)
               "inplace_leaf", "bool_arithmetic"}  # and those found in an error's own message (assertions.error_facts)
# The fresh mistakes whose answers move between identical calls: the only ones a "random" fact may be told of.
RANDOM = {m.id for m in FRESH if m.random or any(f == "random" for f, _ in m.expect)}
# And the catalogue's: F.dropout left on in the attention function draws anew in every call.
RANDOM |= {"sa.functional_dropout", "sa.functional_dropout_output"}


def _known_key(key: str) -> bool:
    # over_standin.<fact>: a fact found by another part's tests (grader/judging/score.py, _lent_facts)
    return _known_key(key.removeprefix("over_standin.")) if key.startswith("over_standin.") else \
        key.split(".")[0] in NUMBERS | OTHER_CALLS


# -- every hint is attached to a fingerprint or a fact ----------------------------------------------
def test_every_rubric_hint_is_reachable_only_through_facts():
    lesson = load_lesson()
    loose = []
    for part in lesson.modules:
        for test_id, entry in RUBRIC[part].items():
            if isinstance(entry, dict) and entry.get("hint"):
                when = entry.get("when") or []
                if not when or not all(_known_key(k) for k in when):
                    loose.append(f"{part}.{test_id}: when = {when}")
    assert not loose, "rubric hints with no fact to be said on:\n" + "\n".join(loose)
    assert all(_known_key(k) for k in RUBRIC["facts"]), sorted(k for k in RUBRIC["facts"] if not _known_key(k))
    bugs = {b.id for b in killrate.catalogue(lesson=DAY13).bugs}
    assert set(RUBRIC["hints"]) <= bugs  # a misconception's words: said only on its mutant's fingerprint


def test_every_visible_hint_is_reachable_only_through_facts():
    loose = []
    for path in sorted(TESTS.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "close":
                words = {k.arg for k in node.keywords}
                if "hint" in words and "when" not in words:
                    loose.append(f"{path.name}:{node.lineno}")
    assert not loose, "visible comparisons with a hint and no `when`:\n" + "\n".join(loose)
    # The conftest's own hints live in ERROR_HINTS, keyed by the fact about the error that says them.
    tree = ast.parse((TESTS / "conftest.py").read_text(encoding="utf-8"))
    table = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and any(getattr(t, "id", "") == "ERROR_HINTS" for t in n.targets))
    inside = {id(n) for n in ast.walk(table)}
    stray = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and n.value.startswith("Hint:") and id(n) not in inside]
    assert not stray, f"conftest.py lines {stray}: a hint outside ERROR_HINTS"


# -- the submissions --------------------------------------------------------------------------------
def _fresh_folder(mistake, root: Path) -> Path:
    folder = root / mistake.id
    shutil.copytree(load_lesson().solutions, folder)
    for file, find, replace in mistake.patches:
        text = (folder / file).read_text(encoding="utf-8")
        assert text.count(find) == 1, f"{mistake.id}: the reference changed, update its patch of {file}"
        (folder / file).write_text(text.replace(find, replace), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def submissions(tmp_path_factory):
    root = tmp_path_factory.mktemp("fresh")
    found = {b.id: (b.component, killrate.catalogue(lesson=DAY13).mutant_dir(b.id)) for b in killrate.catalogue(lesson=DAY13).bugs
             if not b.forbidden}
    found.update({f"correct/{p.name}": (None, p) for p in killrate.variants(lesson=DAY13)})
    found.update({f"fresh/{m.id}": (m.part, _fresh_folder(m, root)) for m in FRESH})
    return found


def _graded(folder: Path, name: str, part: str | None):
    """The hidden grading's result, and each hidden test's failure with the numbers it compared: the grading
    runs once, its test functions wrapped to keep what they raise. A mistake in one part is graded on that
    part's tests (its other files are the reference's); a correct variant on every test."""
    caught = []

    def keeping(rid, fn):
        def run(student, reference):
            try:
                fn(student, reference)
            except GradeFailure as failure:
                caught.append((rid, failure))
                raise
        return run

    wrapped = tuple((c, t, keeping(f"{c}.{t}", fn)) for c, t, fn in DAY13.hidden_tests)
    tests = None if part is None else {f"{c}.{t}" for c, t, _ in wrapped if c == part}
    # A lesson value whose hidden tests are the wrapped ones (the value's cache, set before first use).
    lesson = dataclasses.replace(DAY13)
    lesson.__dict__["hidden_tests"] = wrapped
    # The reference's and the catalogue mutants' answers, cached by call, shared as a grading run's worker shares
    # them across its submissions: a value of its own each time computed them again (~40 s of this file's setup).
    lesson.__dict__.update(reference=DAY13.reference, catalogue=DAY13.catalogue)
    result = score.grade_submission(lesson=lesson, name=name, directory=folder,
                                    transport=InProcessTransport(folder, lesson=lesson),
                                    check_deliverables=lambda _: [], tests=tests)
    return result, caught


@pytest.fixture(scope="module")
def hidden(submissions):
    return {name: _graded(folder, name, part) for name, (part, folder) in submissions.items()}


@pytest.fixture(scope="module")
def recorded(submissions):
    # The reference's run too: with the mutants' runs, it is what known_mistakes.json is built from.
    plan = [{"name": "reference", "part": None, "folder": str(DAY13.solutions)}]
    plan += [{"name": name, "part": part, "folder": str(folder)} for name, (part, folder) in submissions.items()]
    return visible_fingerprints.record_visible(plan)


@pytest.fixture(scope="module")
def visible(recorded):
    return recorded["told"]


# -- recomputing a fact, independently of grader/judging/diagnose.py ----------------------------------------
def _bad(got, expected, atol, rtol):
    scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(expected), expected, 0.0)), initial=0.0)))
    with np.errstate(invalid="ignore"):
        ok = np.abs(got - expected) <= atol * scale + rtol * np.abs(expected)
    return ~(ok | (np.isnan(got) & np.isnan(expected)))


def holds(fact, got, expected, *, atol, rtol, allowed=None, weights=None) -> bool:
    """Is `fact` true of these numbers? Written apart from diagnose.py, as a reader checks it by hand."""
    g, e = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    w = g if weights is None else np.asarray(weights, dtype=np.float64)
    kind = fact["id"]
    if kind == "shape":
        return list(g.shape) == fact["got"] and list(e.shape) == fact["expected"] and g.shape != e.shape
    if kind == "permuted":  # within the comparison's own tolerance, as "differs" is judged
        moved = np.transpose(e, fact["axes"])
        return moved.shape == g.shape and not _bad(g, moved, atol, rtol).any()
    if g.shape != e.shape:
        return kind in ("rows_not_normalised", "sums_to_1_along", "blocked_weight") and weights is not None
    size = max(1e-9, float(np.abs(e[np.isfinite(e)]).max(initial=0.0)))
    if kind == "differs":
        bad = _bad(g, e, atol, rtol)
        return int(bad.sum()) == fact["count"] and bool(bad[tuple(fact["at"])])
    if kind == "nonfinite":
        return int((~np.isfinite(g) & np.isfinite(e)).sum()) == fact["count"]
    if kind == "sign_flipped":
        return np.allclose(g, -e, atol=5e-3 * size)
    if kind == "scaled":
        return np.allclose(g, fact["factor"] * e, atol=5e-3 * size * max(1.0, abs(fact["factor"])))
    if kind == "score_scale":
        valid = (g > 1e-12) & (e > 1e-12)
        if allowed is not None:
            valid &= np.broadcast_to(np.asarray(allowed, bool), g.shape)
        rest = np.where(valid, np.log(np.where(valid, g, 1)) - fact["factor"] * np.log(np.where(valid, e, 1)), np.nan)
        rows = ~np.all(np.isnan(rest), axis=-1)  # a row with no two weights to compare says nothing
        spread = np.nanmax(rest[rows], axis=-1) - np.nanmin(rest[rows], axis=-1)
        return bool(np.all(np.nan_to_num(spread) <= 2e-2 * max(1.0, abs(fact["factor"]))))
    if kind == "rows_not_normalised":
        return float(np.abs(w.sum(-1) - 1).max()) > 1e-4
    if kind == "sums_to_1_along":
        return np.allclose(w.sum(fact["axis"]), 1, atol=1e-3)
    if kind == "blocked_weight":
        blocked = ~np.broadcast_to(np.asarray(allowed, bool), w.shape)
        return bool(blocked[tuple(fact["at"])]) and w[tuple(fact["at"])] != 0 and int((blocked & (w != 0)).sum()) == fact["count"]
    if kind == "only_at":
        bad = _bad(g, e, atol, rtol)
        axis = fact["axis"] % g.ndim
        hit = bad.any(axis=tuple(a for a in range(g.ndim) if a != axis))
        where = list(np.flatnonzero(hit))
        n = g.shape[axis]
        expected_where = {"first": [0], "last": [n - 1], "even": list(range(0, n, 2)), "odd": list(range(1, n, 2)),
                          "from": list(range(fact["start"], n)), "up_to": list(range(0, fact["end"] + 1))}
        return 0 < len(where) < n and where == expected_where.get(fact["pattern"], where)
    raise AssertionError(f"no independent check for {kind}")


def _found(facts, expect):
    """The fact expected (an id and some of its parameters) is among `facts`."""
    kind, params = expect
    return any(f["id"] == kind and all(f.get(k) == v for k, v in params.items()) for f in facts)


# -- the hidden grading ------------------------------------------------------------------------------
def test_hidden_feedback_names_a_cause_only_on_evidence(hidden):
    lesson = load_lesson()
    catalogue_words = {bug: entry["text"] for bug, entry in RUBRIC["hints"].items()}
    words = feedback.Words.of(RUBRIC)  # what a student is shown: the record's words chosen from the rubric
    fact_words = {k: v["text"] for k, v in RUBRIC["facts"].items()}
    problems = []
    for name, (result, failures) in hidden.items():
        for t in result.tests:
            if t.status == "passed" or t.component not in lesson.modules:
                continue
            entry = RUBRIC[t.component][t.name.split(".", 1)[1]]
            shown = feedback.student_output(t, words, cut=False)
            for bug, text in catalogue_words.items():
                if text in shown and t.hint_id != bug:
                    problems.append(f"{name} {t.name}: says {bug}'s misconception without its fingerprint")
            if entry.get("hint") and entry["hint"] in shown and not diagnose.matched(t.facts, entry.get("when", ())):
                problems.append(f"{name} {t.name}: its hint without one of its facts {entry.get('when')}")
            block = shown.split("What your numbers show:\n", 1)
            said = [line[2:] for line in block[1].split("\n\n")[0].splitlines()] if len(block) > 1 else []
            if said != diagnose.words(t.facts, fact_words):
                problems.append(f"{name} {t.name}: says {said}, its facts say {diagnose.words(t.facts, fact_words)}")
        for rid, failure in failures:
            for fact in failure.facts:
                if fact["id"] in OTHER_CALLS:
                    continue
                if not any(holds(fact, g, e, atol=t.atol, rtol=t.rtol, allowed=o.get("allowed"))
                           for g, e, o, t in failure.compared):
                    problems.append(f"{name} {rid}: claims {fact} and the numbers do not show it")
            if any(f["id"] == "random" for f in failure.facts) and name.removeprefix("fresh/") not in RANDOM:
                problems.append(f"{name} {rid}: claims randomness in a submission with none")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


# -- the visible tests -------------------------------------------------------------------------------
def test_visible_feedback_names_a_cause_only_on_evidence(visible):
    problems = []
    for name, tests in visible.items():
        for test, records in tests.items():
            for r in records:
                if "facts" not in r:
                    continue
                if r["hint"] and (r["mutants"] or not diagnose.matched(r["facts"], r["when"])):
                    problems.append(f"{name} {test}: a hint without its fact")
                for fact in r["facts"]:
                    if fact["id"] in OTHER_CALLS:
                        continue
                    allowed = None
                    if r.get("allowed") is not None:
                        allowed = np.asarray(r["allowed"], bool)
                    if not holds(fact, r["got"], r["expected"], atol=r["atol"], rtol=0.0, allowed=allowed,
                                 weights=r.get("weights")):
                        problems.append(f"{name} {test}: claims {fact} and the numbers do not show it")
                if any(f["id"] == "random" for f in r["facts"]) and name.removeprefix("fresh/") not in RANDOM:
                    problems.append(f"{name} {test}: claims randomness in a submission with none")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


def _same_numbers(a, b) -> bool:
    """Two recorded fingerprints ({"shape", "values", ...}) hold the same numbers, to float32 rounding."""
    if a is None or b is None or not isinstance(a, dict) or not isinstance(b, dict):
        return a == b
    if {k: v for k, v in a.items() if k != "values"} != {k: v for k, v in b.items() if k != "values"}:
        return False
    x, y = (np.array([float(v) for v in f.get("values", [])], dtype=np.float64) for f in (a, b))
    return x.shape == y.shape and bool(np.allclose(x, y, rtol=1e-4, atol=1e-6, equal_nan=True))


def _first_failure(comparisons: list[dict]):
    """(index, kind, numbers) of a test's first failed comparison, or None when every comparison passed."""
    failed = next((c for c in comparisons if c["failed"]), None)
    return None if failed is None else (failed["n"], failed["kind"], failed["got"], failed["expected"])


def _ruled_out(mistake: str, name: str, test: str, comparisons: dict) -> str | None:
    """The test of `name`'s run, other than `test`, that rules `mistake` out: one the mistake fails that this student
    passed, or failed first at another comparison or with other numbers; None if every test agrees with it."""
    for other, theirs in comparisons.get(mistake, {}).items():
        mine, expected = comparisons[name].get(other), _first_failure(theirs)
        if other == test or mine is None or expected is None:
            continue  # a test the mistake passes, or that this student's run did not reach
        first = _first_failure(mine)
        if first is None and len(mine) < len(theirs):
            continue  # the student's test ended before the comparison the mistake fails (an error)
        if first is None or first[:2] != expected[:2] or not all(map(_same_numbers, first[2:], expected[2:])):
            return other
    return None


def test_a_named_mistake_is_never_one_the_students_own_tests_rule_out(recorded):
    """A catalogued mistake named to a student (visible route) must agree with every test of that student's run: each
    test the mistake fails, the student failed too, first at the same comparison with the same numbers. Where several
    are named ("one of them is likely yours"), at least one must. Recomputed from the recorded comparisons of the
    student's run and of the mistake's own run (not from known_mistakes.json, which the visible tests read)."""
    comparisons, told = recorded["comparisons"], recorded["told"]
    problems = []
    for name, tests in told.items():
        for test, records in tests.items():
            for r in records:
                named = r.get("mutants") or []
                why = {m: _ruled_out(m, name, test, comparisons) for m in named}
                if named and all(why.values()):
                    problems.append(f"{name} {test}: named {named}, ruled out by {why}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(sorted(set(problems))[:40])


def test_a_hidden_hint_names_no_mistake_the_students_own_tests_rule_out(hidden):
    """The hidden grading names a catalogued mistake (hint_id) only where that mistake's own grading agrees with the
    student's on every test of the part: each test the mistake fails, the student failed too, and no test the
    student failed passes under the mistake unless the student's numbers there are another mistake's."""
    problems = []
    for name, (result, _) in hidden.items():
        mine = {t.name: t.status for t in result.tests}
        for test in result.tests:
            mistake = test.hint_id
            if not mistake or mistake not in hidden or test.forbidden:
                continue
            theirs = {t.name: t.status for t in hidden[mistake][0].tests if t.component == test.component}
            ruled = [t for t, status in theirs.items() if status != "passed" and mine.get(t) == "passed"]
            if ruled:
                problems.append(f"{name} {test.name}: named {mistake}, which fails {ruled} that it passes")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


def test_the_known_mistakes_file_is_current(recorded):
    """assignments/day13/tests/known_mistakes.json holds what every catalogue mutant gives at the first visible
    comparison it fails, with the rubric's hints and forbidden rule: built from this module's recording of the same
    runs (the reference, each mutant on its part), so the visible tests run once for both."""
    from grader.devtools import visible_fingerprints as builder

    assert builder.is_current(lesson=DAY13, recorded=recorded), "run: python -m grader.day13.visible_fingerprints"


# -- the fresh mistakes: the fact that points at the place, in both routes ----------------------------
@pytest.mark.parametrize("mistake", [m for m in FRESH if m.expect], ids=lambda m: m.id)
def test_a_fresh_mistake_gets_the_fact_that_points_at_its_place(mistake, hidden, visible):
    name = f"fresh/{mistake.id}"
    result, failures = hidden[name]
    hidden_facts = [f for rid, failure in failures if rid.startswith(mistake.part + ".") for f in failure.facts]
    visible_facts = [f for records in visible[name].values() for r in records for f in r.get("facts", ())]
    for expect in mistake.expect:
        assert _found(hidden_facts, expect), f"hidden grading: no {expect} among {diagnose.ids(hidden_facts)}"
        assert _found(visible_facts, expect), f"visible tests: no {expect} among {diagnose.ids(visible_facts)}"
    assert any(t.status != "passed" for t in result.tests if t.component == mistake.part), "the mistake must fail its part"


def test_correct_variants_are_told_nothing(hidden, visible):
    for name in (n for n in hidden if n.startswith("correct/")):
        result, failures = hidden[name]
        assert not failures, f"{name}: {[rid for rid, _ in failures]}"
        assert not any(r for records in visible[name].values() for r in records), name


def test_answers_that_move_on_their_own_are_told_so_not_blamed_on_the_mask_or_the_module(visible):
    """An attention with dropout left on answers each call anew: a bool mask and its float twin, or SelfAttention and
    a second call of the same attention, then differ for that reason alone. The visible tests say so (the `random`
    fact), and tell neither the mask-kinds fact nor "the difference is in SelfAttention itself", nor their hints."""
    told = visible["fresh/sa_dropout_on_weights"]
    facts = {test.rsplit("::", 1)[-1]: {f["id"] for r in records for f in r.get("facts", ())}
             for test, records in told.items()}
    assert "random" in facts.get("test_mask_may_be_bool_or_float", ()), facts
    assert "random" in facts.get("test_s5_module_uses_its_three_projections", ()), facts
    assert not any({"mask_kinds_differ", "differs_from_own"} & found for found in facts.values()), facts
    # Dropped weights and survivors scaled by 1/(1-p): rows that do not sum to 1 are no softmax of scaled scores.
    assert not any("score_scale" in found for found in facts.values()), facts
    blamed = [(test, r["hint"]) for test, records in told.items() for r in records
              if r["hint"] and {"mask_kinds_differ", "differs_from_own"} & set(r.get("when") or ())]
    assert not blamed, blamed

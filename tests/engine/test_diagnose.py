"""grader/judging/diagnose.py: each fact is claimed exactly when the numbers show it, and every fact is data.

Each case builds a wrong answer whose fault is known by construction, and checks the fact found, its
parameters, and that no other cause-naming fact is claimed; the near misses (a factor that is not
constant, a permutation that is not exact) must find nothing of the kind.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from grader.judging import diagnose

CAUSES = {"scaled", "sign_flipped", "score_scale", "permuted", "rows_not_normalised", "sums_to_1_along",
          "blocked_weight", "nonfinite", "random", "batch_mixing"}


def _rng(seed):
    return np.random.default_rng(seed)


def _softmax(s, axis=-1):
    e = np.exp(s - s.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _by_id(facts):
    found = {}
    for f in facts:
        found.setdefault(f["id"], f)
    return found


def test_agreeing_answers_give_no_fact():
    a = _rng(0).standard_normal((2, 3, 4))
    assert diagnose.compare(a, a + 1e-9) == []


def test_facts_are_json_data():
    e = _rng(1).standard_normal((3, 4))
    facts = diagnose.compare(np.sqrt(2) * e, e, constants={"d_k": 2}, axes=("token", "feature"))
    assert json.loads(json.dumps(facts)) == facts
    assert all(isinstance(f["id"], str) for f in facts)


@pytest.mark.parametrize("factor,constants,name", [
    (math.sqrt(2), {}, "√2"), (1 / math.sqrt(8), {"d_k": 8}, "1/√d_k"), (8.0, {"d_k": 8}, "d_k"),
    (math.sqrt(5 / 3), {"d_k": 5, "d_v": 3}, "√(d_k/d_v)"), (0.37, {}, "0.37")])
def test_a_constant_factor_is_found_and_named(factor, constants, name):
    e = _rng(2).standard_normal((4, 5))
    facts = _by_id(diagnose.compare(factor * e, e, constants=constants))
    assert facts["scaled"]["name"] == name
    assert facts["scaled"]["factor"] == pytest.approx(factor, rel=1e-4)
    assert "sign_flipped" not in facts


def test_a_factor_that_is_not_constant_is_not_claimed():
    e = _rng(3).standard_normal((4, 5))
    g = e * np.linspace(1.2, 1.6, 5)  # a different factor per feature
    assert "scaled" not in _by_id(diagnose.compare(g, e))


def test_a_flipped_sign():
    e = _rng(4).standard_normal((3, 3))
    facts = _by_id(diagnose.compare(-e, e))
    assert "sign_flipped" in facts and "scaled" not in facts


def test_scores_scaled_by_a_constant_are_found_from_the_weights_alone():
    s = _rng(5).standard_normal((2, 4, 6))
    d_k, d_v = 5, 3
    expected = _softmax(s)
    got = _softmax(s * math.sqrt(d_k / d_v))  # divided by √d_v instead of √d_k
    facts = _by_id(diagnose.compare(got, expected, probabilities=True, constants={"d_k": d_k, "d_v": d_v}))
    assert facts["score_scale"]["name"] == "√(d_k/d_v)"
    # independently: log(got) - c·log(expected) is constant along each row
    c = facts["score_scale"]["factor"]
    rest = np.log(got) - c * np.log(expected)
    assert np.allclose(rest, rest[..., :1], atol=1e-3)
    assert "rows_not_normalised" not in facts


def test_weights_that_are_not_a_rescaling_claim_no_score_scale():
    s = _rng(6).standard_normal((3, 5))
    got = _softmax(s + _rng(7).standard_normal((3, 5)))
    assert "score_scale" not in _by_id(diagnose.compare(got, _softmax(s), probabilities=True))


def test_a_softmax_over_the_wrong_axis():
    s = _rng(8).standard_normal((2, 4, 4))
    facts = _by_id(diagnose.compare(_softmax(s, axis=-2), _softmax(s), probabilities=True))
    assert facts["rows_not_normalised"]["largest"] > 1e-3
    assert facts["sums_to_1_along"]["axis"] == -2
    assert np.allclose(_softmax(s, axis=-2).sum(-2), 1)  # the fact, recomputed


def test_weight_on_a_blocked_key():
    s = _rng(9).standard_normal((4, 4))
    allowed = np.tril(np.ones((4, 4), bool))
    expected = _softmax(np.where(allowed, s, -np.inf))
    got = _softmax(np.where(allowed, s, 0.0))  # blocked scores set to 0, not -inf
    facts = _by_id(diagnose.compare(got, expected, probabilities=True, allowed=allowed))
    blocked = facts["blocked_weight"]
    assert blocked["count"] == int((~allowed).sum())
    assert not allowed[tuple(blocked["at"])] and got[tuple(blocked["at"])] == pytest.approx(blocked["largest"], rel=1e-4)


@pytest.mark.parametrize("perm", [(1, 0, 2), (0, 2, 1), (2, 1, 0)])
def test_permuted_axes(perm):
    e = _rng(10).standard_normal((2, 3, 4))
    g = np.transpose(e, perm)
    facts = _by_id(diagnose.compare(g, e, axes=("sentence", "token", "feature")))
    found = facts["permuted"]
    assert np.array_equal(np.transpose(e, found["axes"]), g)
    assert found["names"] == [("sentence", "token", "feature")[p] for p in found["axes"]]


def test_a_square_transpose_of_the_same_shape():
    e = _rng(11).standard_normal((4, 4))
    assert _by_id(diagnose.compare(e.T, e))["permuted"]["axes"] == [1, 0]


@pytest.mark.parametrize("where,pattern", [
    ((slice(None), 0), "first"), ((slice(None), 7), "last"), ((slice(None), slice(0, None, 2)), "even"),
    ((slice(None), slice(1, None, 2)), "odd"), ((slice(None), slice(3, None)), "from"),
    ((slice(None), [1, 5]), "some")])
def test_a_difference_only_at_some_positions(where, pattern):
    e = _rng(12).standard_normal((3, 8))
    g = e.copy()
    g[where] += 1.0
    found = [f for f in diagnose.compare(g, e, axes=("token", "feature")) if f["id"] == "only_at"]
    assert [f["name"] for f in found] == ["feature"]
    fact = found[0]
    assert fact["pattern"] == pattern
    wrong = np.flatnonzero(np.abs(g - e).max(0) > 1e-6)  # recomputed
    assert fact["start"] == wrong[0] and fact["end"] == wrong[-1]
    if "indices" in fact:
        assert fact["indices"] == wrong.tolist()


def test_a_difference_everywhere_is_not_confined():
    e = _rng(13).standard_normal((3, 8))
    g = e + _rng(14).standard_normal((3, 8))
    assert "only_at" not in _by_id(diagnose.compare(g, e))


def test_nan_is_told_and_nothing_is_fitted_through_it():
    e = _rng(15).standard_normal((3, 3))
    g = 2 * e
    g[1, 2] = np.nan
    facts = _by_id(diagnose.compare(g, e))
    assert facts["nonfinite"] == {"id": "nonfinite", "count": 1, "at": [1, 2]}
    assert "scaled" not in facts


def test_the_largest_difference_and_where():
    e = np.zeros((2, 3))
    g = e.copy()
    g[1, 2], g[0, 0] = 5.0, 1.0
    d = _by_id(diagnose.compare(g, e))["differs"]
    assert d == {"id": "differs", "count": 2, "of": 6, "at": [1, 2], "expected": 0.0, "got": 5.0}


def test_a_shape_difference():
    facts = _by_id(diagnose.compare(np.zeros((3, 2)), np.zeros((2, 3))))
    assert facts["shape"]["expected"] == [2, 3] and facts["shape"]["got"] == [3, 2]


def test_randomness_and_batch_mixing():
    a = _rng(16).standard_normal((2, 3, 4))
    assert diagnose.repeat(a, a.copy()) == []
    b = a.copy()
    b[1, 0, 0] += 0.5
    assert diagnose.repeat(a, b)[0]["id"] == "random"
    changed = a.copy()
    changed[1] += 1  # sentence 1 moved although only sentence 0 was changed
    assert diagnose.mixes(a, changed, changed=(0,)) == [{"id": "batch_mixing", "moved": [1], "changed": [0]}]
    only_its_own = a.copy()
    only_its_own[0] += 1
    assert diagnose.mixes(a, only_its_own, changed=(0,)) == []


def test_words_come_from_the_ids_with_their_numbers():
    facts = [{"id": "scaled", "factor": 1.4142, "name": "√2"}, {"id": "only_at", "pattern": "even", "name": "feature",
                                                                  "axis": -1, "size": 4, "start": 0, "end": 2}]
    texts = {"scaled": "times {name}", "only_at.even.feature": "even features", "only_at": "somewhere"}
    assert diagnose.words(facts, texts) == ["times √2", "even features"]
    assert diagnose.words(facts, {"scaled": "needs {missing}"}) == []  # a sentence that cannot be filled says nothing
    assert diagnose.matched(facts, ["only_at.even"]) == ["only_at.even"]
    assert diagnose.matched(facts, ["only_at.odd", "permuted"]) == []


def test_too_few_numbers_to_show_a_constant_claim_none():
    """Two weights in one row are softmax(c · s) for some c whatever they are, and one number is a multiple of
    any other: neither is evidence of a scaling."""
    assert "score_scale" not in _by_id(diagnose.compare([[0.3, 0.7]], [[0.6, 0.4]], probabilities=True))
    assert "scaled" not in _by_id(diagnose.compare([3.0], [1.0]))


# -- a call's several outputs, compared one by one (grader/judging/assertions.same_outputs) --------------------
def _answer(*arrays):
    from grader.running.calls import Result

    return Result({"outputs": [{"kind": "tensor", "array": f"a{i}", "dtype": "float32"} for i in range(len(arrays))]},
                  {f"a{i}": np.asarray(a, dtype=np.float64) for i, a in enumerate(arrays)})


def _failure_of(got, expected):
    from grader.judging.assertions import GradeFailure, same_outputs
    from grader.judging.tolerances import Tol

    with pytest.raises(GradeFailure) as failed:
        same_outputs(got, expected, "f(x)", ("first", "second"), values=lambda dtype: Tol(1e-5, 1e-5))
    return failed.value


@pytest.mark.parametrize("shape", [(2, 3), (3, 3)], ids=["other shapes", "same shape"])
def test_outputs_handed_back_in_another_order_are_told(shape):
    rng = np.random.default_rng(5)
    first, second = rng.normal(size=(2, 3)), rng.normal(size=shape)
    failure = _failure_of(_answer(second, first), _answer(first, second))
    assert {"id": "outputs_in_other_order", "name": "first", "other": "second", "order": "first, second"} in failure.facts


def test_outputs_in_order_but_wrong_are_not_said_to_be_swapped():
    rng = np.random.default_rng(6)
    first, second = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    # Only one of the two is the other's: a half swap is a wrong answer, not a reordering.
    for got in (_answer(second, second), _answer(first + 1, second), _answer(second, first + 1)):
        assert "outputs_in_other_order" not in diagnose.ids(_failure_of(got, _answer(first, second)).facts)


def test_an_infinite_expected_value_is_matched_only_by_the_same_infinity():
    # |x - inf| <= rtol * |inf| holds for every finite x: each comparison must not let a finite number stand for an
    # infinity (found on a held-out student whose 0/1 mask "matched" a mutant's 0/-inf mask).
    from grader.judging import assertions, mutants
    from grader.judging.tolerances import Tol

    expected = np.triu(np.full((4, 4), -np.inf), 1)
    got = np.triu(np.ones((4, 4)), 1)
    t = Tol(1e-4, 1e-3)
    assert not mutants._close(got, expected, t)
    assert mutants._close(expected.copy(), expected, t)
    with pytest.raises(assertions.GradeFailure):
        assertions.close(got, expected, t, "mask")
    assertions.close(expected.copy(), expected, t, "mask")
    assert not diagnose._same(got, expected, t.atol, t.rtol).all()
    assert diagnose._same(expected.copy(), expected, t.atol, t.rtol).all()


def test_a_gradient_that_never_arrives_is_said_before_one_that_differs():
    # Found on a held-out student whose V came from W_k: W_v got no gradient, but the comparison stopped at the
    # gradient of x, which differed too, and the feedback never said that W_v is unused.
    from grader.judging.assertions import GradeFailure, same_grads
    from grader.judging.tolerances import Tol
    from grader.running.calls import Result

    def answer(grads):
        return Result({"outputs": [], "grads": {n: (f"g{n}" if g is not None else None) for n, g in grads.items()}},
                      {f"g{n}": np.asarray(g, dtype=np.float64) for n, g in grads.items() if g is not None})

    expected = answer({"x": [1.0, 2.0], "W_v": [3.0]})
    with pytest.raises(GradeFailure) as failed:
        same_grads(answer({"x": [5.0, 2.0], "W_v": None}), expected, "f", ("x", "W_v"), grads=lambda d: Tol(1e-5, 1e-5))
    assert failed.value.facts == [{"id": "no_gradient", "name": "W_v"}]
    with pytest.raises(GradeFailure) as failed:
        same_grads(answer({"x": [5.0, 2.0], "W_v": [3.0]}), expected, "f", ("x", "W_v"), grads=lambda d: Tol(1e-5, 1e-5))
    assert "gradient of x" in str(failed.value) and "no_gradient" not in diagnose.ids(failed.value.facts)


def test_weights_zero_where_no_rescaling_gives_zero_claim_no_score_scale():
    """softmax(c · s) is never 0 where softmax(s) is not: weights that are 0 where the answer's are not are no
    rescaling of its scores, however well the weights left fit one (a held-out student who zeroed entries the answer
    keeps was told that only the constant dividing the scores differed)."""
    expected = [[0.40, 0.20, 0.40], [0.20, 0.40, 0.40], [0.25, 0.25, 0.50]]
    got = [[1.0, 0.0, 0.0], [0.3302, 0.6698, 0.0], [0.2483, 0.2483, 0.5035]]
    assert "score_scale" not in _by_id(diagnose.compare(got, expected, probabilities=True))
    # A true rescaling whose smallest weights underflow to 0 is still a rescaling.
    s = _rng(7).standard_normal((4, 6)) * 8
    weights, doubled = _softmax(s), _softmax(2 * s)
    assert ((doubled <= 1e-12) & (weights > 1e-12)).any()  # the case: a weight that rescaling took to (almost) 0
    assert "score_scale" in _by_id(diagnose.compare(doubled, weights, probabilities=True))

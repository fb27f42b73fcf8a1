"""Calls whose contract is not a module's forward: plain functions and one instance stepped, on structured
values (grader/running/executor.py "call" and "session", grader/running/protocol.py value trees,
grader/judging/assertions.py same_value).

Run on the neutral fixture tests/fixtures/lessons/words (strings, bytes, dicts; no tensor), and on hostile
results written here: each must become a clear failure of that call, never a crash of the grader."""
from __future__ import annotations

import dataclasses
import json
import math
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from grader.judging import assertions as checks
from grader.judging import score
from grader.judging.mutants import results_match
from grader.judging.tolerances import Tol
from grader.running import protocol
from grader.running.calls import Adapter, Argument, Attr, Earlier, InProcessTransport, Method, Result
from grader.running.executor import CallLesson, ModuleLoader, execute
from grader.sandbox.transport import reply_problem
from grader.lesson import load_lesson  # noqa: E402


torch.set_num_threads(1)

KIT = Path(__file__).resolve().parents[2]
WORDS = KIT / "tests" / "fixtures" / "lessons" / "words" / "solutions"
TOY = KIT / "tests" / "fixtures" / "lessons" / "toy"
ZYGOTE_LESSON = load_lesson(str(TOY))  # whose spec the zygote gets: any lesson, the modules are the test's own
# What the executor needs of the words fixture: one module, no stand-ins.
SPEC = CallLesson(modules=("words",), always_standin={}, standin_names={}, contract="the words lesson's README.md")


@pytest.fixture
def words():
    return Adapter(InProcessTransport(WORDS, lesson=SPEC))


def folder_with(tmp_path, source: str, name: str = "hostile") -> Path:
    folder = tmp_path / "sub"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(source).lstrip())
    return folder


def hostile_adapter(tmp_path, source: str) -> Adapter:
    spec = dataclasses.replace(SPEC, modules=("hostile",))
    return Adapter(InProcessTransport(folder_with(tmp_path, source), lesson=spec))


# -- calls on plain functions --------------------------------------------------------------------
def test_a_function_returns_plain_structures(words):
    assert words.run("words", "count_words", args=("to be or not to be",)).value == \
        {"to": 2, "be": 2, "or": 1, "not": 1}
    assert words.run("words", "byte_pairs", args=(b"abc",)).value == [(b"a", b"b"), (b"b", b"c")]
    assert words.run("words", "index_of", args=(["x", "y"],)).value == {0: "x", 1: "y"}
    assert words.run("words", "mean", args=([1.0, 2.0, 4.5],)).value == 2.5


def test_arguments_of_every_kind_arrive_as_the_built_ins_they_were(tmp_path):
    adapter = hostile_adapter(tmp_path, """
        import torch
        def kinds(*args, **kwargs):
            def kind(v):
                if isinstance(v, torch.Tensor):
                    return ("tensor", str(v.dtype), list(v.shape))
                if isinstance(v, dict):
                    return {k: kind(x) for k, x in v.items()}
                if isinstance(v, (list, tuple)):
                    return (type(v).__name__, [kind(x) for x in v])
                return (type(v).__name__, v)
            return kind(list(args)), kind(kwargs)
    """)
    args = (b"\x00\xff", ("a", 1), {1: b"x", "k": None}, float("nan"), True, 2**70,
            np.arange(6, dtype=np.float32).reshape(2, 3))
    got = adapter.run("hostile", "kinds", args=args, kwargs={"special": ["<|end|>"]}).value
    positional, named = got
    assert positional[0] == "list"
    bytes_, pair, mapping, nan, flag, big, array = positional[1]
    assert bytes_ == ("bytes", b"\x00\xff") and pair == ("tuple", [("str", "a"), ("int", 1)])
    assert mapping == {1: ("bytes", b"x"), "k": ("NoneType", None)}
    assert nan[0] == "float" and math.isnan(nan[1]) and flag == ("bool", True) and big == ("int", 2**70)
    assert array == ("tensor", "torch.float32", [2, 3])
    assert named == {"special": ("list", [("str", "<|end|>")])}


def test_tensors_inside_a_structure_come_back_as_arrays(tmp_path):
    adapter = hostile_adapter(tmp_path, """
        import torch
        def state():
            return {"step": 3, "m": torch.ones(2, 2, dtype=torch.float64), "history": [torch.zeros(3)]}
    """)
    got = adapter.run("hostile", "state").value
    assert got["step"] == 3 and got["m"].dtype == np.float64 and np.array_equal(got["m"], np.ones((2, 2)))
    assert got["history"][0].shape == (3,) and got["history"][0].dtype == np.float32


# -- a sequence of method calls on one instance ------------------------------------------------------
def test_a_session_builds_one_instance_and_answers_each_step(words):
    res = words.session("words", "Tally", init=(["a"],), init_kwargs={"lower": True},
                        steps=[Method("add", "B c"), Method("encode", "a b c"), Method("decode", Earlier(1)),
                               Attr("total"), Method("add", "x").times(3), Attr("ids")])
    assert [checks.step(res, i, f"step {i}") for i in range(6)] == \
        [2, [0, 1, 2], "a b c", 2, 5, {"a": 0, "b": 1, "c": 2, "x": 3}]
    assert res.request == "Tally(...).add('B c').encode('a b c').decode(<step 1>).total.add('x') x3.ids"


def test_a_session_reads_back_an_argument_it_was_built_with_as_the_code_left_it(tmp_path):
    adapter = hostile_adapter(tmp_path, """
        class Keeps:
            def __init__(self, table, names=(), *, extra=None):
                self.table = dict(table)
                self.table["new"] = 1
        class Changes:
            def __init__(self, table, names=(), *, extra=None):
                self.table = table
                self.table["new"] = 1
                names.append("x")
                extra["k"] = 2
            def grow(self):
                self.table["more"] = 2
    """)
    given = {"a": 0}
    kept = adapter.session("hostile", "Keeps", init=(given, ["n"]), init_kwargs={"extra": {}},
                           steps=[Argument(0), Argument(1), Argument("extra")])
    assert [checks.step(kept, i, "argument") for i in range(3)] == [{"a": 0}, ["n"], {}]
    changed = adapter.session("hostile", "Changes", init=(given, ["n"]), init_kwargs={"extra": {}},
                              steps=[Argument(0), Method("grow"), Argument(0), Argument(1), Argument("extra")])
    assert [changed.step(i).get("value") for i in (0, 2, 3, 4)] == \
        [{"a": 0, "new": 1}, {"a": 0, "new": 1, "more": 2}, ["n", "x"], {"k": 2}]
    assert given == {"a": 0}  # the grader's own value never reaches the code
    for key in (2, "names", -1):
        res = adapter.session("hostile", "Keeps", init=(given,), steps=[Argument(key)])
        with pytest.raises(checks.GradeFailure, match=f"built with no argument {key!r} \\(an engine fault\\)"):
            checks.step(res, 0, "argument")


def test_the_instance_lives_only_inside_its_call(words):
    first = words.session("words", "Tally", steps=[Method("add", "a b c")])
    second = words.session("words", "Tally", steps=[Method("add", "d")])
    assert checks.step(first, 0, "add") == 3 and checks.step(second, 0, "add") == 1


def test_a_raising_step_ends_the_session_and_says_why_later_steps_did_not_run(words):
    res = words.session("words", "Tally", steps=[Method("add", "a"), Method("fail"), Attr("total")])
    assert checks.step(res, 0, "add") == 1
    with pytest.raises(checks.GradeFailure, match=r"fail\(\): ValueError while calling a method: this step always raises"):
        checks.step(res, 1, "fail()")
    with pytest.raises(checks.GradeFailure, match="not run, because an earlier step raised ValueError"):
        checks.step(res, 2, "total")
    going = words.session("words", "Tally", steps=[Method("add", "a"), Method("fail"), Attr("total")], keep_going=True)
    assert checks.step(going, 2, "total") == 1


def test_a_failed_step_tells_the_student_which_method_and_which_step_in_plain_words(words):
    res = words.session("words", "Tally", steps=[Method("add", "a"), Attr("total"), Method("fail"), Attr("ids")])
    error = res.step(2)["error"]
    assert error["step"] == {"index": 2, "of": "Tally", "method": "fail"}
    assert reply_problem({"error": None, "steps": [{"value": 1}, {"value": 1}, {"error": error}]}, {}) is None
    said = score._crash_text(error)
    assert said.startswith("ValueError while calling fail on your Tally (step 3: the grader builds one Tally and "
                           "makes its calls on it in order): this step always raises"), said
    assert "in fail" in said  # the student's line is still shown under it
    missing = words.session("words", "Tally", steps=[Attr("totals")]).step(0)["error"]
    assert score._crash_text(missing).startswith("AttributeError while reading the attribute totals of your Tally (step 1:")
    # An error of no step (a constructor's, a function's) keeps its stage's words; a forged place is refused.
    assert score._crash_text({"type": "E", "message": "m", "stage": "call"}) == "E while calling the function: m"
    assert score._crash_text({"type": "E", "message": "m", "stage": "step", "step": {"index": "2"}}) == \
        "E while calling a method: m"
    for forged in ({"index": "2"}, {"index": 1, "method": 3}, ["fail"]):
        assert "not an error record" in reply_problem({"steps": [{"error": {"type": "E", "message": "m", "step": forged}}]}, {})


def test_a_student_s_own_exception_names_the_built_in_errors_it_derives_from(tmp_path):
    adapter = hostile_adapter(tmp_path, """
        class VocabError(ValueError):
            pass
        class Pretender(Exception):
            __module__ = "builtins"
        def custom():
            raise VocabError("vocab_size is smaller than 256")
        def plain():
            raise ValueError("plain")
        def pretender():
            raise Pretender("not a built-in")
    """)
    assert adapter.run("hostile", "custom").error["bases"] == ["ValueError", "Exception", "BaseException"]
    assert "bases" not in adapter.run("hostile", "plain").error  # a built-in's record is as it always was
    assert adapter.run("hostile", "pretender").error["bases"] == ["Exception", "BaseException"]
    assert reply_problem({"error": {"type": "E", "message": "m", "bases": "ValueError"}}, {}) == \
        "'error' is not an error record"


def test_a_call_too_large_for_a_child_to_accept_is_refused_where_it_is_built(words):
    with pytest.raises(protocol.ValueNotCarried, match="an argument is larger than 900,000 characters"):
        words.run("words", "count_words", args=("word " * 300_000,))
    with pytest.raises(ValueError, match="over the .* a call may carry"):
        words.session("words", "Tally", steps=[Method("add", "word " * 100_000)] * 3)


def test_a_missing_class_or_method_is_named(words):
    res = words.session("words", "Talley", steps=[Attr("total")])
    with pytest.raises(checks.GradeFailure, match="words.py defines no class Talley"):
        checks.step(res, 0, "total")
    res = words.session("words", "Tally", steps=[Method("encoded", "a")])
    with pytest.raises(checks.GradeFailure, match="AttributeError while calling a method: 'Tally' object has no attribute 'encoded'"):
        checks.step(res, 0, "encoded")


def test_an_earlier_step_that_raised_gives_no_value_to_a_later_one(words):
    res = words.session("words", "Tally", steps=[Method("fail"), Method("decode", Earlier(0))], keep_going=True)
    with pytest.raises(checks.GradeFailure, match="step 0 did not return a value"):
        checks.step(res, 1, "decode")


# -- hostile results: each a clear failure of its own call ------------------------------------------
HOSTILE = """
    import torch

    def generator():
        return (i for i in range(10))

    def a_set():
        return {1, 2, 3}

    def itself():
        loop = [1]
        loop.append(loop)
        return loop

    def itself_in_a_dict():
        loop = {}
        loop["me"] = [loop]
        return loop

    def million_keys():
        return dict.fromkeys(range(10**6), 0)

    def deep():
        value = []
        for _ in range(100_000):
            value = [value]
        return value

    def shared_many_times():
        row = list(range(1000))
        return [row] * 1000

    class Unmeasurable:
        def __len__(self):
            raise RuntimeError("no length")
        def __iter__(self):
            raise RuntimeError("no items")

    def unmeasurable():
        return Unmeasurable()

    def huge_text():
        return "x" * 10_000_000

    def snowmen():
        return "\\u2603" * 200_000  # 200,000 characters, 1.2 MB as JSON

    def surrogate():
        return b"caf\\xff".decode("utf-8", "surrogateescape")

    def huge_int():
        return 2 ** 100_000

    class Same(str):
        def __eq__(self, other):
            return True
        def __hash__(self):
            return 0

    def two_equal_keys():
        return {Same("k"): 1, "k": 2}

    def object_array():
        import numpy
        return numpy.array([object()], dtype=object)

    def a_class():
        return Unmeasurable

    class Impostor:
        @property
        def __class__(self):
            return str

    def impostor():
        return [Impostor()]
"""
HOSTILE_CASES = {
    "generator": "is a generator, which the grader cannot read: return a list",
    "a_set": "is a set, which the grader cannot read: return a sorted list",
    "itself": "contains itself at [1]",
    "itself_in_a_dict": "contains itself at ['me'][0]",
    "million_keys": "holds 1,000,000 items, more than the 200,000",
    "deep": "nested more than 32 levels deep",
    "shared_many_times": "far more than this call needs",
    "unmeasurable": "is a Unmeasurable, which the grader cannot read",
    "huge_text": "larger than 900,000 characters",
    "huge_int": "has more than 256 bits",
    "snowmen": "takes 1,200,002 characters to send, more than the 900,000",
    "two_equal_keys": "has two keys equal to \"k\"",
    "object_array": "has dtype object: return numbers",
    "a_class": "is a type, which the grader cannot read",
    "impostor": "at [0] is a Impostor, which the grader cannot read",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_CASES))
def test_a_result_the_grader_cannot_read_fails_that_call_and_says_what_to_return(tmp_path, name):
    adapter = hostile_adapter(tmp_path, HOSTILE)
    started = time.perf_counter()
    res = adapter.run("hostile", name)
    assert time.perf_counter() - started < 10  # refused at the cap, not after walking everything
    assert res.error["type"] == "UngradableResult" and res.error["stage"] == "output", res.error
    assert HOSTILE_CASES[name] in res.error["message"]
    json.dumps(res.header)  # the answer itself stays small and plain
    with pytest.raises(checks.GradeFailure, match="UngradableResult while reading the result"):
        checks.value(res, name)


def test_a_str_whose_eq_lies_reaches_the_test_as_a_plain_str(tmp_path):
    adapter = hostile_adapter(tmp_path, """
        class Liar(str):
            def __eq__(self, other):
                return True
            __hash__ = str.__hash__
            def __str__(self):
                return "what the grader expects"
            def __repr__(self):
                return "what the grader expects"
        def decode(ids):
            return Liar("wrong")
        def merges():
            return [(Liar("a"), Liar("b"))]
    """)
    got = adapter.run("hostile", "decode", args=([1, 2],)).value
    assert type(got) is str and got == "wrong"
    with pytest.raises(checks.GradeFailure, match="differs"):
        checks.same_value(got, "what the grader expects", "decode")
    pairs = adapter.run("hostile", "merges").value
    assert [type(s) for pair in pairs for s in pair] == [str, str]


def test_a_str_no_codec_can_write_arrives_as_it_was_and_is_shown_escaped(tmp_path):
    value = hostile_adapter(tmp_path, HOSTILE).run("hostile", "surrogate").value
    assert value == "caf\udcff"
    with pytest.raises(checks.GradeFailure) as caught:
        checks.same_value(value, "café", "decode")
    caught.value.message.encode("utf-8")  # feedback files are UTF-8: the message must be writable


def test_containers_are_read_through_the_built_ins_not_their_overrides(tmp_path):
    adapter = hostile_adapter(tmp_path, """
        class Hidden(list):
            def __len__(self):
                raise RuntimeError("no length")
            def __iter__(self):
                return iter(["forged"])
        class Keys(dict):
            def items(self):
                return [("forged", 0)]
        class Number(int):
            def __int__(self):
                return 99
            def __repr__(self):
                return "99"
        class Blob(bytes):
            def __bytes__(self):
                return b"forged"
            def __buffer__(self, flags):  # Python 3.12+: what memoryview() would read
                return memoryview(b"forged")
        class Buffer(bytearray):
            def __bytes__(self):
                return b"forged"
        def values():
            return Hidden([1, 2]), Keys(a=1), Number(3), Blob(b"real"), Buffer(b"also real")
    """)
    assert adapter.run("hostile", "values").value == ([1, 2], {"a": 1}, 3, b"real", b"also real")


def test_the_cap_is_shared_by_every_step_of_a_session(tmp_path):
    adapter = hostile_adapter(tmp_path, """
        class Big:
            def chunk(self):
                return "y" * 400_000
    """)
    res = adapter.session("hostile", "Big", steps=[Method("chunk")] * 3, keep_going=True)
    answers = res.steps
    assert "value" in answers[0] and "value" in answers[1]
    assert answers[2]["error"]["type"] == "UngradableResult"


# -- forged answers are refused before anything reads them -------------------------------------------
FORGED = [
    {"set": [1, 2]},  # no such tag
    {"tuple": [1], "bytes": ""},  # two tags
    {"bytes": "not base64!"},
    {"array": "absent"},
    {"dict": [[[1, 2], 3]]},  # a list as a key
    {"dict": [["k", 1], ["k", 2]]},  # a key twice
    {"dict": [["k"]]},
    {"float": "1e999"},
    {"step": 0},  # only an argument may refer to a step
    2 ** 300,
    [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
]


@pytest.mark.parametrize("tree", FORGED, ids=range(len(FORGED)))
def test_a_forged_value_tree_is_refused_as_the_answer_s_fault(tree):
    assert protocol.value_problem(tree, {}) is not None
    assert "value tree" in reply_problem({"error": None, "outputs": [], "value": tree}, {})
    assert "step 0 is not a value tree" in reply_problem({"error": None, "steps": [{"value": tree}]}, {})


def test_a_forged_step_is_refused():
    assert reply_problem({"steps": {"value": 1}}, {}) == "'steps' is not a list"
    assert reply_problem({"steps": [{"value": 1, "error": None}]}, {}) == "step 0 is neither a value nor an error"
    assert reply_problem({"steps": [{"error": {"type": 1}}]}, {}) == "step 0: not an error record"
    assert reply_problem({"steps": [{"value": {"array": "a"}}, {"error": {"type": "E", "message": "m"}}]},
                         {"a": np.zeros(2)}) is None


def test_value_trees_round_trip_every_kind():
    value = ({1: b"\x00", "s": [None, True, 1.5, float("inf")], (b"a", 2): ()}, [[], {}], -(2**200))
    arrays: dict = {}
    tree = protocol.pack(value, arrays)
    back = protocol.unpack(json.loads(json.dumps(tree)), arrays)
    assert back == value and type(back[0][(b"a", 2)]) is tuple


# -- comparing structures -------------------------------------------------------------------------
def failure(got, expected, **options) -> str:
    with pytest.raises(checks.GradeFailure) as caught:
        checks.same_value(got, expected, "pair_counts(text, 262)", **options)
    return caught.value.message


def test_same_value_names_the_first_difference_with_expected_and_got():
    # A pair is shown whole (a held-out student read "differs at [19][0]: length 1, expected 2" about one token).
    assert failure([(b"a", b"b"), (b"t", b"h")], [(b"a", b"b"), (b"h", b"e")]) == \
        "pair_counts(text, 262): differs at [1]\n  expected: (b'h', b'e')\n  got:      (b't', b'h')"
    assert failure([[b" ", b"of"]], [(b" m", b"erge")]).endswith("expected: (b' m', b'erge')\n  got:      [b' ', b'of']")
    assert failure([[1, [2, 3]]], [[1, [2, 4]]]).startswith("pair_counts(text, 262): differs at [0][1]")  # not plain
    assert failure({256: b"th"}, {256: b"th", 257: b"he"}).startswith(
        "pair_counts(text, 262): differs at [257]: key 257 is missing\n  expected: b'he'")
    assert "differs at [300]: 1 key not expected, the first 300" in failure({256: b"a", 300: b"b"}, {256: b"a"})
    assert "differs at [2]: length 3, expected 2 (the first extra item)" in failure([1, 2, 3], [1, 2])
    assert "differs at [0]: a str where bytes was expected" in failure(["a"], [b"a"])
    assert "differs: first at character 100 (shown from character 80)" in failure("x" * 100 + "a", "x" * 100 + "b")


def test_numbers_within_the_tolerance_and_the_types_a_contract_allows_are_equal():
    checks.same_value({"lr": 0.1 + 1e-9, "steps": [1, 2]}, {"lr": 0.1, "steps": (1, 2.0)}, "state", tol=Tol(1e-6, 0))
    checks.same_value([float("nan")], [float("nan")], "nan")
    checks.same_value({"m": np.ones(3)}, {"m": np.ones(3)}, "arrays")
    assert "differs at ['lr']" in failure({"lr": 0.1001}, {"lr": 0.1}, tol=Tol(1e-6, 0))
    assert "a bool where a number was expected" in failure([True], [1])
    assert "a list where tuple was expected" in failure([[1, 2]], [(1, 2)], strict_sequences=True)
    assert "differs at ['m']: 1 of 3 values differ" in failure({"m": np.array([1.0, 2, 3])}, {"m": np.ones(3) * [1, 2, 4]})


def test_a_value_difference_is_a_fact_a_fingerprint_can_name():
    with pytest.raises(checks.GradeFailure) as caught:
        checks.same_value({"a": [1, 2]}, {"a": [1, 3]}, "x")
    assert caught.value.facts == [{"id": "value_differs", "where": "['a'][1]", "kind": "value"}]


def test_value_with_count_asks_for_that_many_return_values(words):
    with pytest.raises(checks.GradeFailure, match="expected 2 return values \\(a tuple\\), got dict"):
        checks.value(words.run("words", "count_words", args=("a",)), "count_words", count=2)


def test_the_mutant_lookup_tells_structured_answers_apart(words):
    t = Tol(1e-6, 0)
    one, same, other = (words.run("words", "count_words", args=(text,)) for text in ("a b", "a b", "a a"))
    assert results_match(one, same, t) and not results_match(one, other, t)
    s1, s2 = (words.session("words", "Tally", steps=[Method("add", text), Method("fail")]) for text in ("a", "a b"))
    assert results_match(s1, s1, t) and not results_match(s1, s2, t)


# -- the lesson is a value handed to the executor --------------------------------------------------
def test_the_executor_reads_the_lesson_it_is_given_never_the_ambient_one(monkeypatch):
    from grader import lesson as lessons
    toy = lessons.load_lesson(str(TOY))
    # a sandboxed child gets the lesson's spec (plain data), the grader's process the value: the same view
    assert dataclasses.replace(CallLesson.of(toy.spec()), standins_module=toy.standins_module) == CallLesson.of(toy)

    def ambient(*args, **kwargs):
        raise AssertionError("the executor looked the lesson up")
    monkeypatch.setattr(lessons, "load_lesson", ambient)
    loader = ModuleLoader(TOY / "solutions", isolated=True, lesson=toy)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    header, arrays = execute({"op": "function", "module": "activations", "name": "softmax",
                              "args": [{"array": "x"}]}, {"x": x}, loader=loader)
    assert header["error"] is None and np.allclose(arrays["out0"].sum(-1), 1)
    # the classifier imports the grader's softmax stand-in, found through the lesson's standins_module
    header, _ = execute({"op": "inspect", "module": "classifier", "cls": "Classifier", "init": [3, 2]}, {}, loader=loader)
    assert header["error"] is None and header["inspect"]["type"] == "Classifier"


def test_library_code_a_step_was_refused_is_named_like_a_call_s():
    from grader.running.forbidden import MARK
    refused = {"type": "RuntimeError", "message": f"{MARK}: torch.nn.modules.activation.MultiheadAttention.forward.",
               "traceback": "", "stage": "step"}
    res = Result({"error": None, "steps": [{"value": 1}, {"error": refused}]}, {})
    assert res.forbidden == ["MultiheadAttention"]


def test_an_answer_is_a_result_a_test_can_read_offline():
    res = Result({"error": None, "value": {"tuple": [{"bytes": "YQ=="}, {"array": "v0"}]}}, {"v0": np.zeros(2)})
    value = res.value
    assert value[0] == b"a" and value[1].shape == (2,)


# -- through the sandboxed child: the same refusals, and the child goes on answering ----------------
@pytest.fixture(scope="module")
def sandboxed():
    import os
    import shutil
    import sys
    import tempfile
    sys.path.insert(0, str(KIT / "tests" / "fixtures"))
    from engine_helpers import descendants, make_submission, processes_of, settled, uid_base_for_tests
    from grader.sandbox import SandboxConfig
    from grader.sandbox.confinement import prepare_scratch, slot_uid
    from grader.sandbox.transport import SandboxTransport
    from grader.sandbox.zygote import Zygote

    config = SandboxConfig(call_timeout=10.0, spawn_timeout=20, cpu_seconds=20, uid_base=uid_base_for_tests(11))
    work = Path(tempfile.mkdtemp(prefix="executor-structured-"))
    os.chmod(work, 0o711)
    scratch = make_submission(work / "sub", {"hostile.py": textwrap.dedent(HOSTILE).lstrip(),
                                             "words.py": (WORDS / "words.py").read_text()}, reference=False)
    prepare_scratch(scratch, slot_uid(config, 0))
    zygote = Zygote(slots=1, config=config, lesson=ZYGOTE_LESSON)
    zygote.wait_ready()
    transport = SandboxTransport(zygote=zygote, slot=0, scratch=scratch, config=config)
    yield Adapter(transport)
    transport.close()
    zygote.close()
    shutil.rmtree(work)
    assert settled(lambda: descendants(os.getpid())) == []
    assert settled(lambda: processes_of(range(config.uid_base, config.uid_base + 1))) == []


def test_the_sandboxed_child_carries_structures_and_refuses_what_it_cannot_read(sandboxed):
    assert sandboxed.run("words", "index_of", args=(["x", "y"],)).value == {0: "x", 1: "y"}
    for name in ("generator", "itself", "million_keys", "deep", "unmeasurable", "two_equal_keys", "huge_text"):
        res = sandboxed.run("hostile", name)
        assert res.error["type"] == "UngradableResult" and HOSTILE_CASES[name] in res.error["message"], res.error
    res = sandboxed.session("words", "Tally", steps=[Method("encode", "a b a"), Method("decode", Earlier(0))])
    assert [checks.step(res, i, "") for i in (0, 1)] == [[0, 1, 0], "a b a"]  # the same child, still answering


# -- a session over the grader's stand-in of a function its class calls -------------------------------------
COUNTER = """
    def double(x):
        if @@BROKEN@@:
            raise RuntimeError("double is not written yet")
        return 2 * x

    class Counter:
        def __init__(self, start=0):
            self.total = start
        def add(self, x):
            self.total += double(x)
            return self.total
        def own_bug(self):
            raise KeyError("the class's own mistake")
"""


@pytest.fixture
def over_standins(tmp_path, monkeypatch):
    """(adapter, broken): the Counter module whose class calls its own graded function `double`, graded through
    the scorer's OverStandIns with a stand-in of `double`; `broken(flag)` writes `double` raising or not."""
    from grader.judging.score import OverStandIns
    (tmp_path / "grader_test_counter_standins.py").write_text("def double(x):\n    return x + x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = CallLesson(modules=("counter",), always_standin={}, standin_names={"counter": {"double": "double"}},
                      contract="the counter's contract", standins_module="grader_test_counter_standins")

    def adapter(broken: bool) -> Adapter:
        (tmp_path / ("broken" if broken else "fine")).mkdir()
        folder = folder_with(tmp_path / ("broken" if broken else "fine"),
                             COUNTER.replace("@@BROKEN@@", str(broken)), name="counter")
        return Adapter(OverStandIns(InProcessTransport(folder, lesson=spec), spec.standin_names))
    return adapter


def test_a_session_stopped_by_a_crash_in_its_function_is_asked_again_over_the_function_s_stand_in(over_standins):
    """A crash in `double` costs double's tests; Counter is judged over the grader's double (fair partial
    credit), as a single call of a class is, and says so (over_standins, which the scorer's notes name)."""
    broken = over_standins(True)
    res = broken.session("counter", "Counter", init=(1,), steps=[Method("add", 2), Method("add", 5), Attr("total")])
    assert [checks.step(res, i, "step") for i in range(3)] == [5, 15, 15]
    assert res.header["over_standins"] == ["double"]
    with pytest.raises(checks.GradeFailure, match="double is not written yet"):
        checks.value(broken.run("counter", "double", args=(3,)), "double(3)")  # its own tests still fail
    # The class's own mistake is its own: over the stand-in it runs further, and fails where it is wrong.
    own = broken.session("counter", "Counter", steps=[Method("add", 1), Method("own_bug"), Method("add", 1)])
    assert checks.step(own, 0, "add") == 2 and own.header["over_standins"] == ["double"]
    with pytest.raises(checks.GradeFailure, match="the class's own mistake"):
        checks.step(own, 1, "own_bug")
    # An honest sibling, whose double works, is never asked again; nor is a session failing in its own code.
    fine = over_standins(False)
    res = fine.session("counter", "Counter", steps=[Method("add", 2), Method("own_bug")], keep_going=True)
    assert checks.step(res, 0, "add") == 4 and "over_standins" not in res.header
    assert "inside" not in res.step(1)["error"]


def test_a_session_is_replaced_only_by_a_better_answer_over_the_stand_ins():
    from grader.judging.score import _better, _retry_over_standins
    names = {"counter": {"double": "double"}}
    session = {"op": "session", "module": "counter", "cls": "Counter", "steps": []}
    inside = {"type": "E", "message": "m", "stage": "step", "inside": ["double"]}
    first = {"error": None, "steps": [{"value": 1}, {"error": inside}]}
    assert _retry_over_standins(session, first, names)["over_standins"] == ["double"]
    assert _retry_over_standins(dict(session, over_standins=["double"]), first, names) is None  # asked once
    assert _retry_over_standins(session, {"error": None, "steps": [{"error": dict(inside, inside=["Counter"])}]},
                                names) is None  # never over a stand-in of the class it grades
    assert _retry_over_standins(session, {"error": None, "steps": [{"error": dict(inside, inside=["other"])}]},
                                names) is None  # a name without a stand-in
    assert _better({"error": None, "steps": [{"value": 1}, {"value": 2}]}, first)
    assert not _better({"error": None, "steps": [{"value": 1}, {"error": {}}]}, first)  # no further
    assert not _better({"error": {"type": "E"}, "steps": []}, first)
    assert _better({"error": None, "steps": [{"error": {}}]}, {"error": inside})  # built this time


def test_only_a_caller_is_graded_over_its_callee_s_stand_in():
    """A function that raises inside a class of its own module is not graded over that class's stand-in when the
    stand-in runs the grader's version of the function itself: the child would answer with the grader's work."""
    from grader.judging.score import _retry_over_standins
    from grader.sandbox.lending import lending

    source = textwrap.dedent('''
        def double(x):
            return 2 * x


        class Counter:
            def add(self, x):
                return double(x)


        def halve(x):
            return x / 2
    ''')
    names = {"counter": {"double": "double", "Counter": "Counter", "halve": "halve"}}
    lent = lending(source, {"double": ["counter.double"], "Counter": ["counter.Counter"], "halve": ["counter.halve"]},
                   always_standin={}, standin_names=names)
    assert lent.over_allowed("counter", "Counter", "double")  # the class over its function's stand-in
    assert not lent.over_allowed("counter", "double", "Counter")  # never the reverse
    assert not lent.over_allowed("counter", "double", "double")
    # Nor over a sibling the class never calls, nor a function over a sibling function (red team s36r).
    assert not lent.over_allowed("counter", "Counter", "halve")
    assert not lent.over_allowed("counter", "halve", "double") and not lent.over_allowed("counter", "double", "halve")
    raised = {"error": {"type": "E", "message": "m", "stage": "call", "inside": ["Counter"]}}
    call = {"op": "call", "module": "counter", "name": "double"}
    assert _retry_over_standins(call, raised, names)["over_standins"] == ["Counter"]  # what the child's word asks
    assert _retry_over_standins(call, raised, names, lent.over_allowed) is None  # what the lesson allows
    assert lent.needed(dict(call, over_standins=["Counter"])) == frozenset()  # nor is it lent, if asked
    session = {"op": "session", "module": "counter", "cls": "Counter", "steps": []}
    assert lent.needed(dict(session, over_standins=["double"])) == frozenset({"double"})

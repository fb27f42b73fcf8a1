"""grader/running/protocol.py: frames round-trip exactly, every malformed frame is refused before allocation, and
value trees pack and unpack exactly as pinned here (trees, budgets, messages and the places they name)."""
import base64
import json
import math
import socket
import struct
import threading
import time

import numpy as np
import pytest

from grader.running import protocol
from grader.running.protocol import ConnectionClosed, Limits, ProtocolError, recv_message, send_message


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _raw_frame(doc, payload=b""):
    body = json.dumps(doc).encode()
    return struct.pack(">I", len(body)) + body + payload


def _send_raw(sock, data):
    # A writer thread, so frames bigger than the socket buffer do not deadlock the test.
    t = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    t.start()
    return t


def test_round_trip_every_dtype_and_shape(pair):
    a, b = pair
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "f64": rng.standard_normal(5),
        "bool": rng.random((3, 3)) > 0.5,
        "i64": np.arange(-3, 3, dtype=np.int64),
        "i32": np.array(7, dtype=np.int32),  # 0-d
        "empty": np.zeros((0, 4), dtype=np.float32),
        "strided": np.arange(20, dtype=np.float64).reshape(4, 5)[:, ::2],  # not contiguous
        "big_endian": np.arange(4, dtype=">f4"),
    }
    header = {"op": "function", "name": "softmax", "nested": {"x": [1, 2.5, None]}}
    t = threading.Thread(target=send_message, args=(a, header, arrays))
    t.start()
    got_header, got = recv_message(b, deadline=time.monotonic() + 5)
    t.join()
    assert got_header == header
    assert list(got) == list(arrays)
    for name, want in arrays.items():
        assert got[name].shape == want.shape
        assert got[name].dtype.kind == want.dtype.kind
        np.testing.assert_array_equal(got[name], want)
        assert got[name].flags.aligned  # the arrays share one read buffer; a float after 9 bools is copied
    assert got["big_endian"].dtype == np.dtype("<f4")


def test_several_messages_in_a_row_stay_framed(pair):
    a, b = pair
    for i in range(3):
        send_message(a, {"i": i}, {"x": np.full(3, i, dtype=np.int64)})
    for i in range(3):
        h, arr = recv_message(b)
        assert h == {"i": i} and arr["x"].tolist() == [i, i, i]


@pytest.mark.parametrize("array", [
    np.array([object()], dtype=object),
    np.zeros(2, dtype=np.float16),
    np.array(["a"]),
    np.zeros(2, dtype=np.complex64),
])
def test_sender_refuses_dtypes_outside_the_whitelist(array):
    with pytest.raises(ValueError, match="convert it"):
        protocol.encode({}, {"x": array})


def test_sender_refuses_non_json_header():
    with pytest.raises(TypeError):
        protocol.encode({"x": object()})


def _spec(**over):
    spec = {"name": "x", "dtype": "float32", "shape": [2], "nbytes": 8}
    spec.update(over)
    return spec


@pytest.mark.parametrize("doc, match", [
    ({"header": {}, "arrays": [_spec(dtype="object")]}, "dtype"),
    ({"header": {}, "arrays": [_spec(dtype="float16")]}, "dtype"),
    ({"header": {}, "arrays": [_spec(nbytes=12)]}, "is not 12 bytes"),
    ({"header": {}, "arrays": [_spec(shape=[-1], nbytes=-4)]}, "shape"),
    ({"header": {}, "arrays": [_spec(shape=[True, 2])]}, "shape"),
    ({"header": {}, "arrays": [_spec(shape=[2.0], nbytes=8)]}, "shape"),
    ({"header": {}, "arrays": [_spec(shape=[1] * 9, nbytes=4)]}, "shape"),
    ({"header": {}, "arrays": [_spec(), _spec()]}, "twice"),
    ({"header": {}, "arrays": [_spec(name="")]}, "name"),
    ({"header": {}, "arrays": [{"name": "x", "dtype": "float32", "shape": [2]}]}, "exactly"),
    ({"header": [], "arrays": []}, "object"),
    ({"header": {}}, "exactly the keys"),
    ({"header": {}, "arrays": [], "extra": 1}, "exactly the keys"),
    ([1, 2], "exactly the keys"),
])
def test_receiver_refuses_malformed_specs(pair, doc, match):
    a, b = pair
    _send_raw(a, _raw_frame(doc, b"\0" * 8)).join()
    with pytest.raises(ProtocolError, match=match):
        recv_message(b, deadline=time.monotonic() + 2)


def test_huge_declared_shape_is_refused_before_allocation(pair):
    # 2**60 floats would be exabytes: the check must come before any buffer is made.
    a, b = pair
    doc = {"header": {}, "arrays": [_spec(shape=[2**30, 2**30], nbytes=2**62)]}
    _send_raw(a, _raw_frame(doc)).join()
    with pytest.raises(ProtocolError, match="cap"):
        recv_message(b, deadline=time.monotonic() + 2)


def test_caps_on_header_size_array_count_and_total(pair):
    a, b = pair
    limits = Limits(max_header_bytes=64, max_arrays=2, max_total_bytes=16)
    a.sendall(struct.pack(">I", 65) + b"x" * 65)
    with pytest.raises(ProtocolError, match="header of 65 bytes"):
        recv_message(b, limits=limits, deadline=time.monotonic() + 2)

    a2, b2 = socket.socketpair()
    with a2, b2:
        send_message(a2, {}, {n: np.zeros(1, np.float32) for n in "abc"})
        with pytest.raises(ProtocolError, match="3 arrays"):
            recv_message(b2, limits=Limits(max_arrays=2), deadline=time.monotonic() + 2)
    a3, b3 = socket.socketpair()
    with a3, b3:
        send_message(a3, {}, {"a": np.zeros(3, np.float32), "b": np.zeros(2, np.float32)})
        with pytest.raises(ProtocolError, match="16-byte cap"):
            recv_message(b3, limits=Limits(max_total_bytes=16), deadline=time.monotonic() + 2)


@pytest.mark.parametrize("body", [b"\xff\xfe not utf8", b"{not json", b"[" * 100000 + b"]" * 100000])
def test_garbage_header_is_a_protocol_error(pair, body):
    a, b = pair
    _send_raw(a, struct.pack(">I", len(body)) + body)
    with pytest.raises(ProtocolError):
        recv_message(b, deadline=time.monotonic() + 5)


def test_eof_at_boundary_and_mid_frame(pair):
    a, b = pair
    a.close()
    with pytest.raises(ConnectionClosed, match="before a new frame"):
        recv_message(b, deadline=time.monotonic() + 2)

    a2, b2 = socket.socketpair()
    with b2:
        frame = b"".join(bytes(p) for p in protocol.encode({}, {"x": np.zeros(100, np.float64)}))
        a2.sendall(frame[:-10])
        a2.close()
        with pytest.raises(ConnectionClosed, match="middle"):
            recv_message(b2, deadline=time.monotonic() + 2)


def test_deadline_raises_timeout_for_a_silent_peer(pair):
    a, b = pair
    a.sendall(struct.pack(">I", 10) + b"{")  # starts a frame, never finishes it
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        recv_message(b, deadline=start + 0.2)
    assert time.monotonic() - start < 2


def test_a_message_larger_than_the_socket_buffer_arrives_whole_in_order():
    # sendmsg then sends part of it at a time: what is left must follow, nothing twice or lost.
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    rng = np.random.default_rng(0)
    arrays = {f"a{i}": rng.standard_normal((257 + i, 33)).astype(np.float32) for i in range(5)}
    arrays["empty"] = np.zeros((0, 3), np.float64)
    sender = threading.Thread(target=send_message, args=(a, {"k": 1}, arrays))
    sender.start()
    time.sleep(0.05)  # let the sender fill the buffer and block first
    header, got = recv_message(b, deadline=time.monotonic() + 10)
    sender.join()
    assert header == {"k": 1} and list(got) == list(arrays)
    for name in arrays:
        np.testing.assert_array_equal(got[name], arrays[name])
    a.close()
    b.close()


# -- value trees: pack and unpack ------------------------------------------------------------------
# These pin what pack and unpack answer, byte for byte: the trees, the budget they spend, and each refusal's
# message with the place it names. Both are a security boundary and both have fast paths for leaves of the
# exact built-in types, so the cases are the ones a fast path could get wrong: subclasses that lie, bool
# beside int, a limit reached at a leaf rather than at a container, a place inside a dict or a key.
from grader.running.protocol import ValueLimits, ValueNotCarried  # noqa: E402


def _packed(value, **options):
    budget = options.pop("budget", {})
    return protocol.pack(value, {}, budget=budget, **options), budget


def _refusal(value, **options) -> tuple[str, dict]:
    budget = options.pop("budget", {})
    with pytest.raises(ValueNotCarried) as caught:
        protocol.pack(value, {}, budget=budget, **options)
    return str(caught.value), budget


def _nested(levels: int, leaf=1):
    for _ in range(levels):
        leaf = [leaf]
    return leaf


class _LyingInt(int):
    def __int__(self):
        return 99

    def __index__(self):
        return 99

    def __repr__(self):
        return "99"

    __str__ = __repr__

    def __eq__(self, other):
        return True

    def __hash__(self):
        return 7


class _LyingStr(str):
    def __str__(self):
        return "forged"

    def __eq__(self, other):
        return True

    __hash__ = str.__hash__

    def __len__(self):
        return 0


class _Apart(str):
    """A str no other key is equal to, whatever its contents."""

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)


class _LyingBytes(bytes):
    def __bytes__(self):
        return b"forged"

    def __len__(self):
        return 0

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)


def test_a_value_of_every_kind_packs_to_exactly_this_tree():
    value = {"merges": [(b"a", b"b"), (b"ab", b"\xff")], 3: [True, 1, False, 0, None, 1.5, -2],
             (1, b"k"): "t\u00e9xt", b"raw": bytearray(b"ab"), None: [[], (), {}],
             "floats": [math.nan, math.inf, -math.inf, -0.0]}
    tree, budget = _packed(value)
    assert tree == {"dict": [
        ["merges", [{"tuple": [{"bytes": "YQ=="}, {"bytes": "Yg=="}]},
                    {"tuple": [{"bytes": "YWI="}, {"bytes": "/w=="}]}]],
        [3, [True, 1, False, 0, None, 1.5, -2]],
        [{"tuple": [1, {"bytes": "aw=="}]}, "t\u00e9xt"],
        [{"bytes": "cmF3"}, {"bytes": "YWI="}],
        [None, [[], {"tuple": []}, {"dict": []}]],
        ["floats", [{"float": "nan"}, {"float": "inf"}, {"float": "-inf"}, -0.0]],
    ]}
    # bool stays bool and int stays int, on the way out and back
    assert [type(x) for x in tree["dict"][1][1][:4]] == [bool, int, bool, int]
    assert budget == {"nodes": 35, "chars": 202}
    back = protocol.unpack(json.loads(json.dumps(tree)), {})
    assert [type(x) for x in back[3][:4]] == [bool, int, bool, int]
    assert math.copysign(1, back["floats"][3]) == -1 and math.isnan(back["floats"][0])
    assert {k: v for k, v in back.items() if k != "floats"} == {k: v for k, v in value.items() if k != "floats"}


def test_numpy_scalars_pack_as_the_numbers_they_hold():
    tree, budget = _packed([np.int64(3), np.uint8(200), np.float32(0.5), np.float64("nan"), np.bool_(True)])
    assert tree == [3, 200, 0.5, {"float": "nan"}, True]
    assert [type(x) for x in tree] == [int, int, float, dict, bool]
    assert budget == {"nodes": 6, "chars": 24}


def test_subclasses_pack_as_what_they_hold_never_as_what_their_methods_say():
    value = [_LyingInt(3), _LyingStr("real"), _LyingBytes(b"real"), (_LyingInt(-4),), {_LyingStr("k"): _LyingInt(5)}]
    tree, budget = _packed(value)
    assert tree == [3, "real", {"bytes": "cmVhbA=="}, {"tuple": [-4]}, {"dict": [["k", 5]]}]
    assert [type(x) for x in tree[:2]] == [int, str]
    assert budget == {"nodes": 9, "chars": 54}


class _HiddenList(list):
    def __len__(self):
        raise RuntimeError("no length")

    def __iter__(self):
        return iter(["forged"])


class _HiddenTuple(tuple):
    def __iter__(self):
        return iter(["forged"])


class _HiddenDict(dict):
    def items(self):
        return [("forged", 0)]


class _Impostor:
    @property
    def __class__(self):
        return int


def test_containers_pack_as_what_they_hold_and_an_impostor_as_what_it_is():
    value = [_HiddenList([1, _HiddenTuple((2, 3))]), _HiddenDict(a=_HiddenList([4]))]
    assert _packed(value) == ([[1, {"tuple": [2, 3]}], {"dict": [["a", [4]]]}], {"nodes": 10, "chars": 45})
    assert _refusal([1, _Impostor()])[0] == (
        "the result at [1] is a _Impostor, which the grader cannot read: return "
        "plain values: str, bytes, int, float, bool, None, lists, tuples, dicts, tensors")


def test_keys_equal_in_content_are_refused_even_when_their_eq_and_hash_keep_them_apart():
    assert _refusal({_LyingInt(1): "a", 1: "b"})[0] == "the dict has two keys equal to 1"
    assert _refusal({"k": 0, "x": {_Apart("k"): 1, "k": 2}})[0] == "the dict at ['x'] has two keys equal to \"k\""
    assert _refusal({(1, 2): 0, (_LyingInt(1), 2): 1})[0] == 'the dict has two keys equal to {"tuple": [1, 2]}'
    assert _refusal({b"k": 0, _LyingBytes(b"k"): 1})[0] == 'the dict has two keys equal to {"bytes": "aw=="}'
    # equal in Python, different on the wire: all kept
    assert _packed({1: "i", "1": "s", 1.5: "f", None: "n"})[0] == \
        {"dict": [[1, "i"], ["1", "s"], [1.5, "f"], [None, "n"]]}


def test_a_value_that_contains_itself_is_refused_where_the_loop_closes():
    loop = [1, [2, [3]]]
    loop[1][1].append(loop)
    assert _refusal(loop) == ("the result contains itself at [1][1][1]: return a value, not a loop of references",
                              {"nodes": 7, "chars": 31})
    mapping = {"a": [0]}
    mapping["a"].append((mapping,))
    assert _refusal(mapping)[0] == "the result contains itself at ['a'][1][0]: return a value, not a loop of references"
    shared = [1, 2]
    assert _packed([shared, (shared, shared)])[0] == [[1, 2], {"tuple": [[1, 2], [1, 2]]}]  # shared is no loop


def test_depth_is_refused_one_level_past_the_limit_at_the_first_place_it_is_reached():
    assert _packed(_nested(32))[1] == {"nodes": 33, "chars": 133}
    at = "[0]" * 33
    assert _refusal(_nested(33)) == (f"the result is nested more than 32 levels deep at {at}",
                                     {"nodes": 33, "chars": 132})
    assert _refusal(_nested(33, [])) == _refusal(_nested(33))  # a container too deep as a leaf
    assert _refusal([1, _nested(2, "x")], limits=ValueLimits(max_depth=2))[0] == \
        "the result is nested more than 2 levels deep at [1][0][0]"
    assert _refusal({"k": {"j": [b"x"]}}, limits=ValueLimits(max_depth=2))[0] == \
        "the result is nested more than 2 levels deep at ['k']['j'][0]"
    assert _refusal({"k": {(1,): 0}}, limits=ValueLimits(max_depth=2))[0] == \
        "the result is nested more than 2 levels deep at a key of ['k'][0]"


def test_an_integer_too_large_is_refused_at_its_place():
    assert _refusal([0, 1, [2**300]]) == ("an integer at [2][0] has more than 256 bits", {"nodes": 5, "chars": 22})
    assert _refusal({"a": [1, -(2**256)]})[0] == "an integer at ['a'][1] has more than 256 bits"
    assert _refusal({b"k": (2**300,)})[0] == "an integer at [b'k'][0] has more than 256 bits"
    assert _refusal({3: {(1, 2**300): 1}})[0] == "an integer at a key of [3][1] has more than 256 bits"
    assert _refusal({2**300: 1})[0] == "an integer at a key of the dict has more than 256 bits"
    assert _refusal([_LyingInt(2**300)])[0] == "an integer at [0] has more than 256 bits"
    assert _packed([2**256 - 1, -(2**256 - 1)])[1] == {"nodes": 3, "chars": 12 + 2 * 78 + 1}


def test_the_node_budget_is_refused_at_the_node_that_overflows_it():
    small = ValueLimits(max_nodes=8)
    assert _refusal({k: 0 for k in "abcde"}, limits=small) == (
        "the result at ['d'] holds more than 8 items, far more than this call needs", {"nodes": 9, "chars": 43})
    assert _refusal({k: 0 for k in "abcde"}, limits=ValueLimits(max_nodes=7)) == (
        "the result at a key of the dict holds more than 7 items, far more than this call needs",
        {"nodes": 8, "chars": 38})
    assert _refusal([[[1, 2]], 3, 4], limits=ValueLimits(max_nodes=6)) == (
        "the result at [2] holds more than 6 items, far more than this call needs", {"nodes": 7, "chars": 31})
    # a container that holds more than is left is refused before its items are walked
    assert _refusal({"a": [1, 2, 3], "b": list(range(9))}, limits=ValueLimits(max_nodes=10)) == (
        "the result at ['b'] holds 9 items, more than the 10 a result may hold", {"nodes": 8, "chars": 37})
    assert _packed(list(range(7)), limits=small)[1] == {"nodes": 8, "chars": 39}


def test_the_char_budget_is_refused_at_the_leaf_that_overflows_it():
    assert _refusal(["x" * 10, ["y" * 30]], limits=ValueLimits(max_chars=50)) == (
        "the result at [1][0] is larger than 50 characters, far more than this call needs", {"nodes": 4, "chars": 56})
    assert _packed(["x" * 10, ["y" * 30]], limits=ValueLimits(max_chars=56))[1] == {"nodes": 4, "chars": 56}
    assert _refusal({k: "xx" for k in "abcde"}, limits=ValueLimits(max_chars=20)) == (
        "the result at ['b'] is larger than 20 characters, far more than this call needs", {"nodes": 5, "chars": 24})
    assert _refusal({k: "xx" for k in "abcde"}, limits=ValueLimits(max_chars=30))[0] == \
        "the result at a key of the dict is larger than 30 characters, far more than this call needs"
    # the node's own 4 characters, before its contents: the place is the same, the total is what it was then
    assert _refusal([1, 2, b"abc"], limits=ValueLimits(max_chars=17)) == (
        "the result at [2] is larger than 17 characters, far more than this call needs", {"nodes": 4, "chars": 18})
    assert _refusal([1, 2, b"abc"], limits=ValueLimits(max_chars=20)) == (
        "the result at [2] is larger than 20 characters, far more than this call needs", {"nodes": 4, "chars": 26})
    assert _refusal([7, 12345], limits=ValueLimits(max_chars=12)) == (
        "the result at [1] is larger than 12 characters, far more than this call needs", {"nodes": 3, "chars": 13})
    assert _refusal([7, 12345], limits=ValueLimits(max_chars=16)) == (
        "the result at [1] is larger than 16 characters, far more than this call needs", {"nodes": 3, "chars": 18})


def test_a_budget_is_shared_by_the_values_of_one_answer_and_keeps_its_total_after_a_refusal():
    budget: dict = {}
    protocol.pack([1, "ab", b"c"], {}, budget=budget)
    assert budget == {"nodes": 4, "chars": 16 + 1 + 2 + 5}
    protocol.pack({"k": (None, 2.5)}, {}, budget=budget)
    assert budget == {"nodes": 9, "chars": 44 + 1}
    limits = ValueLimits(max_nodes=13)
    with pytest.raises(ValueNotCarried, match=r"^the result at \[2\] holds more than 13 items"):
        protocol.pack([[0], 1, 2], {}, budget=budget, limits=limits)
    assert budget == {"nodes": 14, "chars": 67}
    with pytest.raises(ValueNotCarried, match="^the result holds more than 13 items"):
        protocol.pack("x", {}, budget=budget, limits=limits)
    assert budget == {"nodes": 15, "chars": 71}


def test_an_unknown_type_is_refused_at_its_place_with_the_advice_for_it():
    assert _refusal([1, {2}]) == ("the result at [1] is a set, which the grader cannot read: return a sorted list",
                                  {"nodes": 3, "chars": 13})
    assert _refusal({"k": [range(3)]}, noun="an argument")[0] == \
        "an argument at ['k'][0] is a range, which the grader cannot read: return a list (list(range(...)))"
    assert _refusal((x for x in [1]))[0] == \
        "the result is a generator, which the grader cannot read: return a list (list(...) around the generator)"
    assert _refusal({object(): 1})[0] == ("the result at a key of the dict is a object, which the grader cannot read: "
                                          "return plain values: str, bytes, int, float, bool, None, lists, tuples, "
                                          "dicts, tensors")
    assert _refusal([1.5j])[0].startswith("the result at [0] is a complex, which")


def test_arrays_go_beside_the_tree_under_the_prefix_and_are_capped():
    arrays: dict = {"p0": None}
    tree = protocol.pack({"x": np.arange(3, dtype=np.int16), "y": [np.ones((2, 2), np.float32)]}, arrays, prefix="p")
    assert tree == {"dict": [["x", {"array": "p1"}], ["y", [{"array": "p2"}]]]}
    assert arrays["p1"].dtype == np.dtype("<i8") and arrays["p2"].dtype == np.dtype("<f4")
    assert _refusal([0, np.array([object()])])[0] == "an array at [1] has dtype object: return numbers"
    assert _refusal({np.zeros(1).tobytes(): np.zeros(5)}, limits=ValueLimits(max_array_elements=4))[0] == \
        "an array at [b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00'] has 5 elements, far more than this call needs"
    with pytest.raises(ValueNotCarried, match="a key at \\['k'\\] is an array"):
        protocol.pack({"k": {(0,): 0, np.int64(1): 1}}, {},
                      special=lambda v: {"array": "a"} if type(v) is tuple else None)
    assert _refusal([np.zeros(1)] * 3, limits=ValueLimits(max_arrays=2))[0] == "the result holds more than 2 arrays"


def test_special_is_asked_about_every_container_and_no_leaf_of_a_built_in_type():
    asked = []

    def special(value):
        asked.append(type(value).__name__)
        return {"step": 0} if type(value) is tuple else None
    tree = protocol.pack({"k": [1, "s", b"b", None, True, 1.5, (2,)]}, {}, special=special)
    assert tree == {"dict": [["k", [1, "s", {"bytes": "Yg=="}, None, True, 1.5, {"step": 0}]]]}
    assert asked == ["dict", "list", "tuple"]


_FORGED_TREES = [
    ({"set": [1]}, "not a value tree: {'set': [1]}"),
    ([1, {"tuple": [1], "bytes": ""}], "not a value tree: {'tuple': [1], 'bytes': ''}"),
    ([(1, 2)], "not a value tree: (1, 2)"),
    ({"tuple": {"a": 1}}, "a 'tuple' value is malformed: {'a': 1}"),
    ([{"tuple": "ab"}], "a 'tuple' value is malformed: ab"),
    ({"dict": [["k", 1], ["k", 2]]}, "a dict has the key k twice"),
    ({"dict": [[{"tuple": [1, {"bytes": "YQ=="}]}, 0], [{"tuple": [1, {"bytes": "YQ=="}]}, 1]]},
     "a dict has the key (1, b'a') twice"),
    ({"dict": [[1, "a"], [True, "b"]]}, "a dict has the key True twice"),
    ({"dict": [[[1, 2], 3]]}, "a dict key must be None, a bool, number, str, bytes or a tuple of them"),
    ({"dict": [[{"tuple": [[1]]}, 3]]}, "a dict key must be None, a bool, number, str, bytes or a tuple of them"),
    ({"dict": [["k"]]}, "a dict's items must be [key, value] pairs"),
    ({"dict": [("k", 1)]}, "a dict's items must be [key, value] pairs"),
    ({"dict": [[{"array": "a"}, 1]]}, "a 'array' value is malformed: a"),  # keys never name arrays
    ([{"bytes": "not base64!"}], "a bytes value is not base64"),
    ({"bytes": "\u00e9"}, "a bytes value is not base64"),
    ({"float": "1e999"}, "a 'float' value is malformed: 1e999"),
    ({"array": "absent"}, "a 'array' value is malformed: absent"),
    ({"step": 0}, "a 'step' value is malformed: 0"),
    ([0, [2**300]], "an integer has more than 256 bits"),
    ({"dict": [[2**256, 1]]}, "an integer has more than 256 bits"),
    (_nested(34), "a value is nested more than 32 levels deep"),
]


@pytest.mark.parametrize("tree, message", _FORGED_TREES, ids=range(len(_FORGED_TREES)))
def test_unpack_refuses_a_forged_tree_with_this_message(tree, message):
    with pytest.raises(ProtocolError) as caught:
        protocol.unpack(tree, {"a": np.zeros(1)})
    assert str(caught.value) == message


def test_unpack_counts_nodes_in_order_and_stops_at_the_first_problem():
    small = ValueLimits(max_nodes=3)
    assert protocol.unpack([1, 2, 3], {}, limits=small) == [1, 2, 3]  # the root and max_nodes items
    for tree in ([1, 2, 3, 4], [[1], [2]], {"dict": [[1, 2], [3, 4]]}, [1, 2, 3, {"set": 0}], ["a", None, 1.5, True]):
        with pytest.raises(ProtocolError, match="^a value holds more than 3 items$"):
            protocol.unpack(tree, {}, limits=small)
    with pytest.raises(ProtocolError, match="^not a value tree"):
        protocol.unpack([{"set": 0}, 1, 2, 3, 4], {}, limits=small)
    with pytest.raises(ProtocolError, match="^an integer has more than 8 bits$"):
        protocol.unpack([1, 256, 2, 3, 4], {}, limits=ValueLimits(max_nodes=3, max_int_bits=8))
    assert protocol.unpack(_nested(33), {}) == _nested(33)  # one level more than pack allows: the answer's root
    with pytest.raises(ProtocolError, match="^a value is nested more than 2 levels deep$"):
        protocol.unpack([[[[1]]]], {}, limits=ValueLimits(max_depth=2))
    assert protocol.unpack([[[[]]]], {}, limits=ValueLimits(max_depth=2)) == [[[[]]]]


def test_unpack_builds_plain_built_ins_and_hands_back_the_named_arrays():
    a = np.arange(3)
    got = protocol.unpack({"dict": [["x", {"array": "a"}], [{"tuple": [1, True]}, [None, 1.5, {"float": "-inf"}]],
                                    [{"bytes": ""}, {"step": 2}]]}, {"a": a}, earlier=lambda i: ("step", i))
    assert got == {"x": a, (1, True): [None, 1.5, -math.inf], b"": ("step", 2)}
    assert got["x"] is a
    assert [type(k) for k in got] == [str, tuple, bytes]
    assert [type(x) for x in next(k for k in got if type(k) is tuple)] == [int, bool]
    with pytest.raises(ProtocolError):
        protocol.unpack({"step": 2.0}, {}, earlier=lambda i: i)
    assert protocol.value_problem(_nested(5000), {}) in ("a value is nested more than 32 levels deep",
                                                         "a value is nested too deeply")


_BASE64 = ["", "YQ==", "YWI=", "YWJj", "/w==", "+/+/", "YQ", "YQ=", "YQ===", "=", "==YQ", "YQ==YQ==", "Y Q==", "YQ==\n",
           "YW-_", "YQ%3D", "\u00e9", "YWI=\u00e9", "YWJ\x00"]


@pytest.mark.parametrize("text", _BASE64, ids=range(len(_BASE64)))
def test_a_bytes_value_is_read_as_strict_base64_reads_it_wherever_it_is(text):
    try:
        want = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        want = "a bytes value is not base64"
    for tree, where in [({"bytes": text}, lambda v: v), ([0, {"bytes": text}], lambda v: v[1]),
                        ({"dict": [[{"bytes": text}, 1]]}, lambda v: next(iter(v))),
                        ({"dict": [[1, {"bytes": text}]]}, lambda v: v[1])]:
        try:
            got = where(protocol.unpack(tree, {}))
        except ProtocolError as exc:
            got = str(exc)
        assert got == want, tree


def test_bytes_pack_as_their_standard_base64():
    for n in range(40):
        data = bytes((7 * i + n) % 256 for i in range(n))
        assert protocol.pack([data, (data,)], {}) == [{"bytes": base64.b64encode(data).decode("ascii")},
                                                     {"tuple": [{"bytes": base64.b64encode(data).decode("ascii")}]}]


def test_a_frame_is_written_and_read_by_functions_bound_at_import(pair, monkeypatch):
    """Red team s38r: the child's side of the protocol runs in the submission's process, after its code. json's
    encoder and decoder and the socket's methods are module and class attributes that code can replace (rewriting
    an inspect's shapes on the way out, or the arguments of a request on the way in); the protocol writes and reads
    frames with the C functions they stand for, bound when it is imported."""
    a, b = pair
    real_encode, real_loads = json.JSONEncoder.encode, json.loads

    def forged_encode(self, o):
        return real_encode(self, o).replace('"shape":[2,3]', '"shape":[2,4]')

    def forged_loads(text, *args, **kwargs):
        doc = real_loads(text, *args, **kwargs)
        doc["header"]["init"] = [9]
        return doc

    def dropped(self, *args, **kwargs):
        raise AssertionError("the socket's method, looked up at call time")

    monkeypatch.setattr(json.JSONEncoder, "encode", forged_encode)
    monkeypatch.setattr(json.JSONEncoder, "iterencode", lambda self, o, _one_shot=False: iter(['{"forged":1}']))
    monkeypatch.setattr(json, "loads", forged_loads)
    monkeypatch.setattr(json.decoder.JSONDecoder, "decode", lambda self, s, **k: {"forged": 1})
    for method in ("sendmsg", "sendall", "recv_into", "recv"):
        monkeypatch.setattr(socket.socket, method, dropped)
    header = {"op": "inspect", "init": [2], "shape": [2, 3], "nested": {"x": [1.5, float("inf"), None, True, "é"]}}
    arrays = {"x": np.arange(6, dtype=np.float64).reshape(2, 3)}
    send_message(a, header, arrays)
    got_header, got = recv_message(b)
    assert got_header == header
    np.testing.assert_array_equal(got["x"], arrays["x"])
    assert got["x"].dtype == np.float64

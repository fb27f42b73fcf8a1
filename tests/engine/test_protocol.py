"""grader/running/protocol.py: frames round-trip exactly, and every malformed frame is refused before allocation."""
import json
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

"""Frames that carry one call or one result between the grader and a sandboxed child.

A message is a JSON header plus named arrays, and nothing else: no pickle ever crosses the
boundary, in either direction. On the wire:

    u32 big-endian length | JSON {"header": {...}, "arrays": [{"name", "dtype", "shape", "nbytes"}, ...]}
    | the raw little-endian bytes of each array, in the declared order

The receiver validates everything before it allocates: the header size, the number of arrays,
each dtype against a whitelist, each shape against its byte count, and the total against a cap.
A child is untrusted, so a malformed or oversized frame is a `ProtocolError`, never a crash or an
allocation the child chose.
"""
from __future__ import annotations

import json
import math
import socket
import struct
import time
from dataclasses import dataclass

import numpy as np

# Little-endian on the wire whatever the host, so a frame means the same thing everywhere.
DTYPES = {
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "bool": np.dtype("bool"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
}
_PREFIX = struct.Struct(">I")
_WIRE_NAMES = {dtype: name for name, dtype in DTYPES.items()}  # exactly these dtypes, byte order included


class ProtocolError(ValueError):
    """The peer sent something that is not a valid frame (or closed the connection mid-frame)."""


class ConnectionClosed(ProtocolError):
    """The peer closed the connection (at a frame boundary or inside one)."""


class OversizedFrame(ProtocolError):
    """A well-formed frame that declares more than the caps allow (`declared`: its size in bytes,
    header and arrays together, as far as it could be read before refusing it)."""

    def __init__(self, message: str, declared: int):
        super().__init__(message)
        self.declared = declared


@dataclass(frozen=True)
class Limits:
    """Caps checked on receipt, before any memory is allocated for the arrays."""

    max_header_bytes: int = 1 << 20
    max_arrays: int = 256
    max_total_bytes: int = 256 << 20
    max_ndim: int = 8
    max_name_chars: int = 200


DEFAULT_LIMITS = Limits()


def encode(header: dict, arrays: dict[str, np.ndarray] | None = None) -> list:
    """Turn a message into the list of buffers to send (no copy of C-contiguous little-endian arrays).

    Raises ValueError for an array whose dtype is not in DTYPES: convert it first
    (e.g. `.astype(np.float32)`), and TypeError for a header json.dumps cannot write.
    """
    if not isinstance(header, dict):
        raise TypeError(f"a message header must be a dict, not {type(header).__name__}")
    arrays = arrays or {}
    specs, payload = [], []
    for name, array in arrays.items():
        if not isinstance(name, str):
            raise TypeError(f"array names must be str, got {name!r}")
        array = np.asarray(array)
        wire_name = _WIRE_NAMES.get(array.dtype)
        if wire_name is not None and array.flags.c_contiguous:
            data = array  # already what goes on the wire (the usual case): skip the conversions below
        else:
            wire = _wire_dtype(array.dtype, name)
            data = np.require(array, dtype=wire, requirements="C")  # keeps 0-d arrays 0-d
            wire_name = _dtype_name(wire)
        specs.append({"name": name, "dtype": wire_name, "shape": list(data.shape), "nbytes": data.nbytes})
        payload.append(memoryview(data).cast("B") if data.nbytes else b"")
    body = json.dumps({"header": header, "arrays": specs}, separators=(",", ":")).encode("utf-8")
    return [_PREFIX.pack(len(body)), body, *payload]


def send_message(sock: socket.socket, header: dict, arrays: dict[str, np.ndarray] | None = None) -> None:
    """Send one message; blocks until every byte is handed to the kernel."""
    send_parts(sock, encode(header, arrays))


def send_parts(sock: socket.socket, parts: list) -> None:
    """Send encoded parts (of one or more messages, see `encode`); blocks until all are handed over.

    One sendmsg for all the parts (gathered, not copied) rather than a send per part: the peer,
    blocked in recv, wakes once per message instead of once per part (~100 messages a submission)."""
    parts = [memoryview(part).cast("B") for part in parts if len(part)]
    while parts:
        sent = sock.sendmsg(parts[:_MAX_PARTS])
        while parts and sent >= len(parts[0]):  # a partial send: drop what went, resend the rest
            sent -= len(parts.pop(0))
        if sent:
            parts[0] = parts[0][sent:]


_MAX_PARTS = 1000  # below IOV_MAX (1024 on Linux)


def recv_message(sock: socket.socket, *, limits: Limits = DEFAULT_LIMITS,
                 deadline: float | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """Receive and validate one message. Returns (header, arrays).

    `deadline` is a time.monotonic() value; past it, TimeoutError is raised (the caller decides
    what to do with a peer that is too slow). A bad frame raises ProtocolError.
    """
    return recv_frame(sock, limits=limits, deadline=deadline)[:2]


def recv_frame(sock: socket.socket, *, limits: Limits = DEFAULT_LIMITS,
               deadline: float | None = None) -> tuple[dict, dict[str, np.ndarray], int]:
    """`recv_message`, plus the frame's size on the wire (for a caller that caps a running total)."""
    if deadline is None:
        sock.settimeout(None)
    (length,) = _PREFIX.unpack(_recv_exact(sock, _PREFIX.size, deadline, at_boundary=True))
    if length > limits.max_header_bytes:
        raise OversizedFrame(f"header of {length} bytes is over the {limits.max_header_bytes}-byte cap",
                             _PREFIX.size + length)
    header, specs = _parse_header(_recv_exact(sock, length, deadline), limits)
    arrays = {}
    if specs:
        # The arrays follow each other: one read for all of them (their total is capped by _parse_header).
        raw = _recv_exact(sock, sum(spec[3] for spec in specs), deadline)
        offset = 0
        for name, dtype, shape, nbytes in specs:
            array = np.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(shape)
            arrays[name] = array if array.flags.aligned else array.copy()  # e.g. a float after 3 bools
            offset += nbytes
    return header, arrays, _PREFIX.size + length + sum(spec[3] for spec in specs)


def _wire_dtype(dtype: np.dtype, name: str) -> np.dtype:
    for wire in DTYPES.values():
        if dtype.kind == wire.kind and dtype.itemsize == wire.itemsize:
            return wire
    raise ValueError(f"array {name!r} has dtype {dtype}, which frames cannot carry; "
                     f"convert it to one of {', '.join(DTYPES)}")


def _dtype_name(dtype: np.dtype) -> str:
    return next(k for k, v in DTYPES.items() if v == dtype)


def _parse_header(body: bytes, limits: Limits):
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"header is not valid UTF-8 JSON ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict) or set(doc) != {"header", "arrays"}:
        raise ProtocolError("header must be a JSON object with exactly the keys 'header' and 'arrays'")
    header, declared = doc["header"], doc["arrays"]
    if not isinstance(header, dict) or not isinstance(declared, list):
        raise ProtocolError("'header' must be an object and 'arrays' a list")
    if len(declared) > limits.max_arrays:
        raise OversizedFrame(f"{len(declared)} arrays declared, over the cap of {limits.max_arrays}",
                             _PREFIX.size + len(body))
    specs, names, total = [], set(), 0
    for spec in declared:
        name, dtype, shape, nbytes = _check_spec(spec, limits, len(body))
        if name in names:
            raise ProtocolError(f"array {name!r} declared twice")
        names.add(name)
        total += nbytes
        if total > limits.max_total_bytes:
            raise OversizedFrame(f"arrays total more than the {limits.max_total_bytes}-byte cap",
                                 _PREFIX.size + len(body) + total)
        specs.append((name, dtype, shape, nbytes))
    return header, specs


def _check_spec(spec, limits: Limits, header_bytes: int):
    if not isinstance(spec, dict) or set(spec) != {"name", "dtype", "shape", "nbytes"}:
        raise ProtocolError("each array spec must have exactly name, dtype, shape and nbytes")
    name, dtype, shape, nbytes = spec["name"], spec["dtype"], spec["shape"], spec["nbytes"]
    if not isinstance(name, str) or not 0 < len(name) <= limits.max_name_chars:
        raise ProtocolError(f"bad array name {str(name)[:40]!r}")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ProtocolError(f"array {name!r}: dtype {str(dtype)[:20]!r} is not one of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or len(shape) > limits.max_ndim or not all(map(_is_count, shape)):
        raise ProtocolError(f"array {name!r}: shape must be a list of at most {limits.max_ndim} non-negative ints")
    if not _is_count(nbytes):
        raise ProtocolError(f"array {name!r}: nbytes must be a non-negative int")
    wire = DTYPES[dtype]
    if math.prod(shape) * wire.itemsize != nbytes:
        raise ProtocolError(f"array {name!r}: shape {shape} of {dtype} is not {nbytes} bytes")
    if nbytes > limits.max_total_bytes:
        raise OversizedFrame(f"array {name!r} of {nbytes} bytes is over the {limits.max_total_bytes}-byte cap",
                             _PREFIX.size + header_bytes + nbytes)
    return name, wire, tuple(shape), nbytes


def _is_count(v) -> bool:
    # type() rather than isinstance: bool is a subclass of int, and True is no dimension or byte count.
    return type(v) is int and v >= 0


def _recv_exact(sock: socket.socket, n: int, deadline: float | None, at_boundary: bool = False) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no complete answer before the deadline")
            sock.settimeout(remaining)
        try:
            k = sock.recv_into(view[got:], n - got)
        except socket.timeout:
            raise TimeoutError("no complete answer before the deadline") from None
        except (ConnectionResetError, BrokenPipeError):
            k = 0
        if k == 0:
            where = "before a new frame" if at_boundary and got == 0 else "in the middle of a frame"
            raise ConnectionClosed(f"the peer closed the connection {where}")
        got += k
    return buf

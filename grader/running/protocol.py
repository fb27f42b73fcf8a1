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

import binascii
import json
import math
import re
import socket
import struct
import time
from _json import encode_basestring_ascii as _c_quote, make_encoder as _c_make_encoder, make_scanner as _c_make_scanner
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
# A sandboxed child frames its answers in the submission's own process, after the submission's code ran: json's
# encoder and decoder and the socket's methods are module and class attributes that code can replace (to rewrite an
# inspect's shapes on the way out, or a request's arguments on the way in). Frames are written and read with the C
# functions those stand for, bound here, when the protocol is imported (in the zygote, before any student code).
_SENDMSG, _RECV_INTO = socket.socket.sendmsg, socket.socket.recv_into
_SETTIMEOUT, _GETTIMEOUT = socket.socket.settimeout, socket.socket.gettimeout
_SCAN = _c_make_scanner(json.JSONDecoder())  # the decoder's settings are read once, here
_BLANK = re.compile(r"[ \t\n\r]*")
_NOT_JSON = json.JSONDecodeError


def _unwritable(o):
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _json_text(obj) -> str:
    """json.dumps(obj, separators=(",", ":")): ASCII, NaN and Infinity allowed, a cycle refused."""
    return "".join(_c_make_encoder({}, _unwritable, _c_quote, None, ":", ",", False, False, True)(obj, 0))


def _json_value(text: str):
    """json.loads(text)."""
    at = _BLANK.match(text, 0).end()
    try:
        value, end = _SCAN(text, at)
    except StopIteration as err:
        raise _NOT_JSON("Expecting value", text, err.value) from None
    end = _BLANK.match(text, end).end()
    if end != len(text):
        raise _NOT_JSON("Extra data", text, end)
    return value

_DOC_KEYS, _SPEC_KEYS = frozenset({"header", "arrays"}), frozenset({"name", "dtype", "shape", "nbytes"})
_WIRE_NAMES = {dtype: name for name, dtype in DTYPES.items()}  # exactly these dtypes, byte order included
# The dtype a returned tensor of each dtype is sent as (grader/running/executor.py, to_numpy): numpy has no
# bfloat16, and one float and one integer width of each kind is all a comparison needs. An answer's header
# names the tensor's own dtype; its array must be what that dtype is sent as (grader/sandbox/transport.py).
SENT_AS = {"float32": "float32", "float64": "float64", "int64": "int64", "bool": "bool",
           "float16": "float32", "bfloat16": "float32", "int8": "int64", "int16": "int64", "int32": "int64",
           "uint8": "int64"}


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
# The most of an error record's words an answer carries (the executor writes no more; the grader cuts any more off).
ERROR_TEXT_CAPS = {"message": 600, "traceback": 1500}

# The error types the sandbox's transport gives a call it got no answer to from the student's code (a time-out,
# a dead or condemned child, a reply it refused; grader/sandbox/transport.py). Such an error is not an answer,
# so there is nothing in it to compare with another answer to the same call.
FAULTS = frozenset({"Timeout", "Crashed", "ProtocolError", "OversizedReply", "OutOfMemory"})


def unanswered(header) -> bool:
    """Whether a call's result header is the transport's fault rather than the code's answer (an exception the
    student's code raised comes with its traceback)."""
    error = header.get("error") if isinstance(header, dict) else None
    return isinstance(error, dict) and error.get("type") in FAULTS and not error.get("traceback")


def encode(header: dict, arrays: dict[str, np.ndarray] | None = None) -> list:
    """Turn a message into the list of buffers to send (no copy of C-contiguous little-endian arrays).

    Raises ValueError for an array whose dtype is not in DTYPES: convert it first
    (e.g. `.astype(np.float32)`), and TypeError for a header json.dumps cannot write.
    """
    if not isinstance(header, dict):
        raise TypeError(f"a message header must be a dict, not {type(header).__name__}")
    specs, payload = [], []
    for name, array in (arrays or {}).items():
        if not isinstance(name, str):
            raise TypeError(f"array names must be str, got {name!r}")
        if type(array) is not np.ndarray:
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
    body = _json_text({"header": header, "arrays": specs}).encode("utf-8")
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
        sent = _SENDMSG(sock, parts[:_MAX_PARTS])
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
    if deadline is None and _GETTIMEOUT(sock) is not None:  # a system call each frame otherwise
        _SETTIMEOUT(sock, None)
    (length,) = _PREFIX.unpack(_recv_exact(sock, _PREFIX.size, deadline, at_boundary=True))
    if length > limits.max_header_bytes:
        raise OversizedFrame(f"header of {length} bytes is over the {limits.max_header_bytes}-byte cap",
                             _PREFIX.size + length)
    header, specs = _parse_header(_recv_exact(sock, length, deadline), limits)
    arrays, total = {}, sum(spec[3] for spec in specs)
    if specs:
        # The arrays follow each other: one read for all of them (their total is capped by _parse_header).
        raw = _recv_exact(sock, total, deadline)
        offset = 0
        for name, dtype, shape, nbytes in specs:
            array = np.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(shape)
            arrays[name] = array if array.flags.aligned else array.copy()  # e.g. a float after 3 bools
            offset += nbytes
    return header, arrays, _PREFIX.size + length + total


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
        doc = _json_value(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"header is not valid UTF-8 JSON ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict) or doc.keys() != _DOC_KEYS:
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
    if not isinstance(spec, dict) or spec.keys() != _SPEC_KEYS:
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
            _SETTIMEOUT(sock, remaining)
        try:
            k = _RECV_INTO(sock, view[got:], n - got)
        except socket.timeout:
            raise TimeoutError("no complete answer before the deadline") from None
        except (ConnectionResetError, BrokenPipeError):
            k = 0
        if k == 0:
            where = "before a new frame" if at_boundary and got == 0 else "in the middle of a frame"
            raise ConnectionClosed(f"the peer closed the connection {where}")
        got += k
    return buf


# -- structured values ----------------------------------------------------------------------------
# A call's arguments and a result that is not one tensor travel as a *value tree*: JSON in the header,
# arrays beside it as usual. null, booleans, integers, finite floats and strings stand for themselves and
# a JSON list for a Python list; everything else is an object with exactly one of these keys:
#
#     {"tuple": [...]}  {"bytes": "<base64>"}  {"dict": [[key, value], ...]}  {"float": "nan"|"inf"|"-inf"}
#     {"array": name}   {"step": i}  (an argument only: the value step i of a session returned)
#
# `pack` writes a tree from Python values and `unpack` reads one back. Packing reads a value through the
# built-in types' own methods (list.__iter__, str.__str__, dict.items...), never through a subclass's
# overrides, so a student's object can neither lie about its contents nor run code while it is packed; it
# stops at the caps below, at a container that holds itself, and at any type it does not know, with a
# message saying what to return instead. Unpacking builds plain built-ins only and checks everything a
# forged tree could get wrong (tags, key types, depth, size) before it trusts any of it.
@dataclass(frozen=True)
class ValueLimits:
    """Caps on one value tree (all the values of one answer together). `max_chars` keeps the JSON under
    the 1 MiB header a reply frame may have (`Limits.max_header_bytes`)."""

    max_depth: int = 32
    max_nodes: int = 200_000
    max_chars: int = 900_000  # characters of strings, bytes (as base64) and digits, plus a few per node
    max_int_bits: int = 256
    max_arrays: int = 200
    max_array_elements: int = 4_000_000


VALUE_LIMITS = ValueLimits()
_TAGS = frozenset({"tuple", "bytes", "dict", "float", "array", "step"})
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
# numpy scalars of these exact types are numbers to a reader: carried as int, float or bool.
_NUMPY_INTS = tuple(np.dtype(c).type for c in "bBhHiIlLqQ")
_NUMPY_FLOATS = (np.float16, np.float32, np.float64)
_ADVICE = {
    "generator": "return a list (list(...) around the generator)",
    "set": "return a sorted list", "frozenset": "return a sorted list",
    "dict_keys": "return a list (list(d.keys()))", "dict_values": "return a list (list(d.values()))",
    "dict_items": "return a list of tuples", "map": "return a list (list(map(...)))",
    "filter": "return a list", "range": "return a list (list(range(...)))", "zip": "return a list of tuples",
}


class ValueNotCarried(TypeError):
    """A value that cannot travel as a value tree (its type, its size, a container holding itself)."""


def pack(value, arrays: dict, *, prefix: str = "v", limits: ValueLimits = VALUE_LIMITS, special=None,
         budget: dict | None = None, noun: str = "the result"):
    """The value tree of `value`; arrays found inside go into `arrays` under `prefix` + a number.

    `special(value)` may answer a tree for a value of a type this module does not know (the executor's
    tensors, a calls.Earlier marker), or None. `budget` (a dict, kept across calls) shares the caps between
    several values of one answer; `noun` is what the messages call the value. Raises ValueNotCarried, naming
    where in the value the problem is."""
    budget = budget if budget is not None else {}
    budget.setdefault("nodes", 0)
    budget.setdefault("chars", 0)
    packer = _Packer(arrays, prefix, limits, special, budget, noun)
    try:
        return packer.pack(value, "", 0, set())
    finally:  # refused or not, the budget keeps what was spent (a shared one goes on to the next value)
        budget["nodes"], budget["chars"] = packer.nodes, packer.chars


# A value's big parts are lists, tuples and dicts of leaves (a tokenizer's merges and vocabulary: thousands of
# ints and bytes), so the packer takes a leaf of an exact built-in type inline, in `_Packer.leaf`, and leaves
# `_Packer.pack` the rest: containers, subclasses, numpy values, anything to refuse. Where a node is in the value
# is kept as a chain of tuples and written out only for a message: "" for the value itself, else
# (parent, "[i]", index), (parent, "[key]", key) for the value of a key, or (parent, "key of", None).
_SLOW = object()  # what a leaf() (the packer's, the reader's) answers for an item it leaves to the general path


class _Packer:
    def __init__(self, arrays, prefix, limits, special, budget, noun):
        self.arrays, self.prefix, self.limits, self.special = arrays, prefix, limits, special
        self.noun = noun
        # The budget is counted here, in attributes, and written back by pack(): a dict per node costs more.
        self.nodes, self.chars = budget["nodes"], budget["chars"]
        self.max_depth, self.max_nodes, self.max_chars = limits.max_depth, limits.max_nodes, limits.max_chars
        self.max_int_bits = limits.max_int_bits

    def spend(self, nodes: int, chars: int, where) -> None:
        self.nodes += nodes
        self.chars += chars
        if self.nodes > self.max_nodes:
            raise ValueNotCarried(f"{self.noun}{_at(where)} holds more than {self.max_nodes:,} items, "
                                  "far more than this call needs")
        if self.chars > self.max_chars:
            raise ValueNotCarried(f"{self.noun}{_at(where)} is larger than {self.max_chars:,} characters, "
                                  "far more than this call needs")

    def leaf(self, item):
        """pack(item) for a None, bool, int, float, str or bytes of exactly that type, spending the same budget;
        _SLOW for any other item and for one pack() refuses (it then raises, in the same order and words)."""
        kind = type(item)
        if kind is str:
            tree, chars = item, len(item)
        elif kind is int:
            if item.bit_length() > self.max_int_bits:
                return _SLOW
            tree, chars = item, len(str(item))
        elif kind is bytes:
            tree, chars = None, 4 * len(item) // 3 + 4  # encoded below, once the budget allows it
        elif kind is bool or item is None:
            tree, chars = item, 0
        elif kind is float:
            tree, chars = _float(item), 0
        else:
            return _SLOW
        # pack() spends the node's 4 characters, then its contents, checking after each: within the caps
        # after both is within them after each, and past them pack() finds which and says so.
        nodes, chars = self.nodes + 1, self.chars + 4 + chars
        if nodes > self.max_nodes or chars > self.max_chars:
            return _SLOW
        self.nodes, self.chars = nodes, chars
        return {"bytes": _b64(item)} if kind is bytes else tree

    def pack(self, value, where, depth: int, path: set):
        if depth > self.max_depth:
            raise ValueNotCarried(f"{self.noun} is nested more than {self.max_depth} levels deep{_at(where)}")
        self.spend(1, 4, where)
        kind = type(value)  # never isinstance: an object's own __class__ may claim any type
        if kind is not tuple and kind is not list and kind is not dict:  # (which scalar() would only test in vain)
            tree = self.scalar(value, kind, where)
            if tree is not _SLOW:
                return tree
        if self.special is not None:
            tree = self.special(value)
            if tree is not None:
                return tree
        if issubclass(kind, np.ndarray):
            return self.array(value, where)
        if issubclass(kind, (list, tuple, dict)):
            return self.container(value, kind, where, depth, path)
        name = _type_name(value)
        advice = _ADVICE.get(name, "return plain values: str, bytes, int, float, bool, None, lists, tuples, dicts, tensors")
        raise ValueNotCarried(f"{self.noun}{_at(where)} is a {name}, which the grader cannot read: {advice}")

    def scalar(self, value, kind, where):
        """The tree of a value of a type that stands for itself or a tagged scalar, its contents spent; _SLOW for
        a value of any other type."""
        if value is None or value is True or value is False:
            return value
        if issubclass(kind, int) and kind is not bool:
            number = int.__int__(value)  # an int subclass's own __int__/__repr__ never run
            if number.bit_length() > self.max_int_bits:
                raise ValueNotCarried(f"an integer{_at(where)} has more than {self.max_int_bits} bits")
            self.spend(0, len(str(number)), where)
            return number
        if issubclass(kind, float):
            return _float(float.__float__(value))
        if kind in _NUMPY_INTS:
            return int(value)
        if kind in _NUMPY_FLOATS:
            return _float(float(value))
        if kind is np.bool_:
            return bool(value)
        if issubclass(kind, str):
            text = str.__str__(value)
            self.spend(0, len(text), where)
            return text
        if issubclass(kind, (bytes, bytearray)):
            # The stored bytes themselves: neither a subclass's __bytes__ nor (Python 3.12+) its __buffer__ runs.
            data = bytes.__bytes__(value) if issubclass(kind, bytes) else bytes(bytearray.copy(value))
            self.spend(0, 4 * len(data) // 3 + 4, where)
            return {"bytes": _b64(data)}
        return _SLOW

    def container(self, value, kind, where, depth, path):
        if id(value) in path:
            raise ValueNotCarried(f"{self.noun} contains itself{_at(where)}: return a value, not a loop of references")
        form = list if issubclass(kind, list) else tuple if issubclass(kind, tuple) else dict
        size = form.__len__(value)  # the built-in's own, as below: a subclass's overrides never run
        if self.nodes + size > self.max_nodes:
            raise ValueNotCarried(f"{self.noun}{_at(where)} holds {size:,} items, more than the "
                                  f"{self.max_nodes:,} a result may hold")
        path.add(id(value))
        try:
            if form is dict:
                return self.dict(value, where, depth, path)
            items = self.items(form.__iter__(value), where, depth, path)
        finally:
            path.discard(id(value))
        return items if form is list else {"tuple": items}

    def items(self, values, where, depth, path) -> list:
        leaf, pack = self._leaf_at(depth), self.pack
        return [tree if (tree := leaf(item)) is not _SLOW else pack(item, (where, "[i]", i), depth + 1, path)
                for i, item in enumerate(values)]

    def dict(self, value, where, depth, path):
        leaf, pack = self._leaf_at(depth), self.pack
        pairs, seen = [], set()
        for key, item in dict.items(value):
            packed_key = leaf(key)
            if packed_key is _SLOW:  # (a key leaf() took is no array)
                packed_key = pack(key, (where, "key of", None), depth + 1, path)
                if _is_array_tree(packed_key):
                    raise ValueNotCarried(f"a key{_at(where)} is an array: use ints, strings, bytes or tuples as keys")
            shown = _key_json(packed_key)
            if shown in seen:  # two keys whose own __eq__/__hash__ kept them apart, with the same contents
                raise ValueNotCarried(f"the dict{_at(where)} has two keys equal to {shown[:60]}")
            seen.add(shown)
            tree = leaf(item)
            if tree is _SLOW:
                tree = pack(item, (where, "[key]", key), depth + 1, path)
            pairs.append([packed_key, tree])
        return {"dict": pairs}

    def _leaf_at(self, depth: int):
        """leaf() for the items of a container at `depth`: none inline when they are past the depth limit."""
        return self.leaf if depth < self.max_depth else _none_inline

    def array(self, value: np.ndarray, where):
        if len(self.arrays) >= self.limits.max_arrays:
            raise ValueNotCarried(f"{self.noun} holds more than {self.limits.max_arrays} arrays")
        size = np.ndarray.size.__get__(value)  # not a subclass's own `size`
        if size > self.limits.max_array_elements:
            raise ValueNotCarried(f"an array{_at(where)} has {size:,} elements, far more than this call needs")
        data = np.array(value, copy=True, subok=False)
        if data.dtype.kind not in "biuf":
            raise ValueNotCarried(f"an array{_at(where)} has dtype {data.dtype}: return numbers")
        data = np.ascontiguousarray(data.astype(_wire_dtype_for(data.dtype), copy=False))
        name = f"{self.prefix}{len(self.arrays)}"
        while name in self.arrays:
            name += "_"
        self.arrays[name] = data
        return {"array": name}


def _none_inline(item):
    """A leaf() that takes nothing inline: for the items of a container at the depth limit, which the general
    path refuses, at the first item's place."""
    return _SLOW


_KEY_JSON = json.JSONEncoder(sort_keys=True)  # json.dumps(tree, sort_keys=True), without a new encoder each key


def _key_json(tree) -> str:
    """The JSON of a packed dict key, the form duplicate keys are compared in; an int's or a str's (most keys)
    written directly, as the encoder would write them."""
    kind = type(tree)
    if kind is int:
        return int.__repr__(tree)
    if kind is str:
        return json.encoder.encode_basestring_ascii(tree)
    return _KEY_JSON.encode(tree)


# base64.b64encode(data).decode("ascii") and base64.b64decode(text.encode("ascii"), validate=True) as Python
# 3.11-3.13 do them, without their argument checks and copies: a vocabulary is thousands of small bytes values.
def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _unb64(text: str) -> bytes:
    """Raises ValueError (binascii.Error) for anything but strict base64, non-ASCII text included."""
    return binascii.a2b_base64(text, strict_mode=True)


def _float(x: float):
    return x if math.isfinite(x) else {"float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def _wire_dtype_for(dtype: np.dtype) -> np.dtype:
    if dtype.kind == "b":
        return DTYPES["bool"]
    if dtype.kind in "iu":
        return DTYPES["int64"]
    return DTYPES["float64"] if dtype.itemsize > 4 else DTYPES["float32"]


def _is_array_tree(tree) -> bool:
    return isinstance(tree, dict) and "array" in tree


def _type_name(value) -> str:
    try:
        return str(type.__dict__["__name__"].__get__(type(value)))[:60]
    except Exception:  # noqa: BLE001 - a type whose name cannot be read
        return "value of an unnamed type"


def _key_shown(key) -> str:
    kind = type(key)
    if issubclass(kind, (int, float)) and kind is not bool:
        return str(int.__int__(key) if issubclass(kind, int) else float.__float__(key))
    if issubclass(kind, str):
        return repr(str.__str__(key)[:40])
    if issubclass(kind, bytes):
        return repr(bytes.__bytes__(key)[:40])
    return "…"


def _at(where) -> str:
    """" at <where>" for a message, from pack()'s chain of tuples ("" for the value itself)."""
    text = _where_text(where)
    return f" at {text}" if text else ""


def _where_text(where) -> str:
    if not where:
        return ""
    parent, how, what = where
    text = _where_text(parent)
    if how == "key of":
        return f"a key of {text or 'the dict'}"
    return f"{text}[{what if how == '[i]' else _key_shown(what)}]"


def unpack(tree, arrays: dict, *, limits: ValueLimits = VALUE_LIMITS, earlier=None):
    """The Python value of a value tree: built-ins and the arrays of `arrays` it names. `earlier(i)` gives
    the value of a {"step": i} (None: such a reference is refused). Raises ProtocolError for anything that
    is not a tree `pack` could have written within `limits`."""
    return _Reader(arrays, limits, earlier).read(tree, 0, False)


class _Reader:
    """unpack() of one tree. As in the packer, a leaf of an exact JSON type (all json.loads builds) is taken
    inline, in `leaf`, and `read` does the rest. `in_key` is true inside a dict's key, which names no array
    and no earlier step."""

    def __init__(self, arrays, limits, earlier):
        self.arrays, self.limits, self.earlier = arrays, limits, earlier
        self.nodes = 0
        # A tree may go one level deeper and hold one node more than the limits say (the root is counted).
        self.max_depth, self.max_nodes = limits.max_depth + 1, limits.max_nodes + 1
        self.max_int_bits = limits.max_int_bits

    def leaf(self, item):
        """read(item) for a None, bool, int, float, str or {"bytes": str} of exactly those types, counted the
        same; _SLOW for any other item and for one read() refuses (it then raises, in the same words)."""
        kind = type(item)
        if kind is dict:
            if len(item) != 1 or type(body := item.get("bytes")) is not str or self.nodes >= self.max_nodes:
                return _SLOW
            try:
                value = _unb64(body)
            except ValueError:
                return _SLOW
        elif (kind is str or kind is int and item.bit_length() <= self.max_int_bits or kind is bool
              or kind is float or item is None) and self.nodes < self.max_nodes:
            value = item
        else:
            return _SLOW
        self.nodes += 1
        return value

    def read(self, tree, depth: int, in_key: bool):
        if depth > self.max_depth:
            raise ProtocolError(f"a value is nested more than {self.limits.max_depth} levels deep")
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise ProtocolError(f"a value holds more than {self.limits.max_nodes} items")
        if type(tree) is dict:  # the commonest node read() gets (bytes, tuples); it would fail each test below
            return self.tagged(tree, depth, in_key)
        if tree is None or isinstance(tree, (bool, str)):
            return tree
        if isinstance(tree, int):
            if tree.bit_length() > self.max_int_bits:
                raise ProtocolError(f"an integer has more than {self.max_int_bits} bits")
            return tree
        if isinstance(tree, float):
            return tree
        if isinstance(tree, list):
            return self.items(tree, depth, in_key)
        return self.tagged(tree, depth, in_key)

    def tagged(self, tree, depth: int, in_key: bool):
        if not isinstance(tree, dict) or len(tree) != 1 or next(iter(tree)) not in _TAGS:
            raise ProtocolError(f"not a value tree: {str(tree)[:60]}")
        (tag, body), = tree.items()
        if tag == "tuple" and isinstance(body, list):
            return tuple(self.items(body, depth, in_key))
        if tag == "bytes" and isinstance(body, str):
            try:
                return _unb64(body)
            except ValueError:
                raise ProtocolError("a bytes value is not base64") from None
        if tag == "dict" and isinstance(body, list):
            return self.dict(body, depth, in_key)
        if tag == "float" and body in _NONFINITE:
            return _NONFINITE[body]
        if tag == "array" and not in_key and isinstance(body, str) and body in self.arrays:
            return self.arrays[body]
        if tag == "step" and not in_key and self.earlier is not None and type(body) is int:
            return self.earlier(body)
        raise ProtocolError(f"a {tag!r} value is malformed: {str(body)[:60]}")

    def items(self, body: list, depth: int, in_key: bool) -> list:
        leaf, read = self._leaf_at(depth), self.read
        return [value if (value := leaf(item)) is not _SLOW else read(item, depth + 1, in_key) for item in body]

    def dict(self, body: list, depth: int, in_key: bool) -> dict:
        leaf, read = self._leaf_at(depth), self.read
        result = {}
        for pair in body:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ProtocolError("a dict's items must be [key, value] pairs")
            key = leaf(pair[0])
            if key is _SLOW:  # (a key leaf() took is hashable)
                key = read(pair[0], depth + 1, True)
                if not _hashable(key):
                    raise ProtocolError("a dict key must be None, a bool, number, str, bytes or a tuple of them")
            if key in result:
                raise ProtocolError(f"a dict has the key {str(key)[:40]} twice")
            value = leaf(pair[1])
            result[key] = value if value is not _SLOW else read(pair[1], depth + 1, in_key)
        return result

    def _leaf_at(self, depth: int):
        """leaf() for the items of a container at `depth`: none inline when they are past the depth limit."""
        return self.leaf if depth < self.max_depth else _none_inline


def _hashable(key) -> bool:
    if key is None or isinstance(key, (bool, int, float, str, bytes)):
        return True
    return isinstance(key, tuple) and all(map(_hashable, key))


def value_problem(tree, arrays: dict, *, limits: ValueLimits = VALUE_LIMITS) -> str | None:
    """What is wrong with a value tree an answer carries (None if nothing): for a caller that must refuse a
    forged answer before anything reads it."""
    try:
        unpack(tree, arrays, limits=limits)
    except ProtocolError as exc:
        return str(exc)
    except RecursionError:
        return "a value is nested too deeply"
    return None

"""The messages between the server and a Python model's process (``trt_pb_wire``): any message of
the values a model may send comes out as it went in (tuples as lists); and any bytes at all, a
model's ring being shared memory it can write, come out as a message or a ``WireError``, never as
another exception, and without building much more than the bytes hold.
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.server.backends.python.wire_values import same
from trt.server.backends.python.stub.trt_pb_wire import Codec, WireError

TAG = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
CODEC = Codec(TAG)

_DTYPES = ["<f4", "<f8", "<f2", "<i8", "<i4", "|i1", "|u1", "<u2", "|b1", "<U3", "|S2", ml_dtypes.bfloat16]
_SHAPES = st.lists(st.integers(0, 3), max_size=3)


@st.composite
def _arrays(draw: st.DrawFn) -> np.ndarray:
    shape = tuple(draw(_SHAPES))
    count = int(np.prod(shape))
    kind = draw(st.sampled_from(["numeric", "bytes", "objects"]))
    if kind == "bytes":
        items = draw(st.lists(st.binary(max_size=5), min_size=count, max_size=count))
    elif kind == "objects":
        items = draw(
            st.lists(st.one_of(st.binary(max_size=3), st.text(max_size=3)), min_size=count, max_size=count)
        )
    else:
        dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
        raw = draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
        if dtype.kind in "bUS":  # only some bytes are values of these types
            return np.zeros(shape, dtype)
        return np.frombuffer(raw, dtype).reshape(shape).copy()
    array = np.empty(count, dtype=np.object_)
    for index, item in enumerate(items):
        array[index] = item
    return array.reshape(shape)


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    _arrays(),
)
MESSAGES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
    ),
    max_leaves=20,
)


@given(MESSAGES)
def test_any_message_comes_out_as_it_went_in(message: Any) -> None:
    assert same(CODEC.decode(CODEC.encode(message)), message)


def _mutated(data: st.DataObject, message: bytes) -> bytes:
    """A message with some bytes changed, cut or added, and sometimes its head rewritten."""
    changed = bytearray(message)
    for _ in range(data.draw(st.integers(0, 4))):
        if changed:
            changed[data.draw(st.integers(0, len(changed) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        changed = changed[: data.draw(st.integers(0, len(changed)))]
    if data.draw(st.booleans()) and len(changed) >= 8:
        length = data.draw(st.sampled_from([0, 1, len(changed) - 8, 2**31, 2**32 - 1]))
        marks = data.draw(st.sampled_from([0, 1, 2**32 - 1]))
        changed[:8] = struct.pack("<II", length % 2**32, marks)
    return bytes(changed) + data.draw(st.binary(max_size=4))


_MARKS = st.sampled_from(
    [
        ["a", "<f8", [2**40], 0],
        ["a", "<f4", [3], 2**62],
        ["a", "bfloat16", [2**40], 0],
        ["a", "bfloat16", [3], 0],
        ["a", "|O8", [1], 0],
        ["B", [2**30], 0],
        ["B", [2], 0],
        ["b", 0, 2**63],
        ["o", [2**40], []],
        ["o", [1], [{}]],
        "b",
        [],
    ]
)


@st.composite
def _hostile(draw: st.DrawFn, data: st.DataObject) -> bytes:
    kind = draw(st.sampled_from(["random", "mutated", "marks"]))
    if kind == "random":
        return draw(st.binary(max_size=64))
    if kind == "mutated":
        return _mutated(data, CODEC.encode(draw(MESSAGES)))
    spec = draw(_MARKS)
    text = json.dumps(["result", {TAG: spec}]).encode()
    blobs = draw(
        st.sampled_from([b"", bytes(8), struct.pack("<2q", 1, -1) + b"ab", struct.pack("<q", 2**62)])
    )
    return struct.pack("<II", len(text), 1) + text + blobs


@given(st.data())
def test_any_bytes_come_out_as_a_message_or_a_wire_error_and_build_little(data: st.DataObject) -> None:
    hostile = data.draw(_hostile(data))
    tracemalloc.start()
    try:
        try:
            CODEC.decode(hostile)
        except WireError:
            pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # JSON builds objects bigger than their text ("[]" is a 56-byte list), but never more than a
    # bounded multiple of it: no size in the bytes is taken on trust.
    assert peak <= 200 * len(hostile) + 256 * 1024, (peak, len(hostile))

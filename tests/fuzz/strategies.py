"""Hypothesis strategies for what clients send: tensor descriptions that are mostly plausible and
sometimes wrong in every way a hostile client could make them wrong."""

from __future__ import annotations

import json
import struct
from typing import Any

from hypothesis import strategies as st

from trt.server.core.datatypes import FIXED_SIZE_DTYPES

DATATYPES = [*FIXED_SIZE_DTYPES, "BYTES", "INT33", "", "fp32"]
# Sizes that are ordinary, zero, or at the edges of int64 and numpy's limits.
DIMENSIONS = st.one_of(
    st.integers(0, 6),
    st.sampled_from([-1, -(2**63), 2**31, 2**40, 2**62, 2**63 - 1, 200_000_000, 20_000_000_000]),
)
SHAPES = st.lists(DIMENSIONS, max_size=4)
NAMES = st.one_of(st.sampled_from(["INPUT0", "INPUT1", "IN"]), st.text(max_size=8))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=True), st.text(max_size=8)
)
PARAMETER_VALUES = st.one_of(
    SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=4), SCALARS, max_size=2)
)
RESERVED_KEYS = [
    "binary_data_size", "shared_memory_region", "shared_memory_byte_size", "shared_memory_offset",
    "classification", "binary_data", "sequence_id", "sequence_start", "priority", "timeout",
]  # fmt: skip
PARAMETERS = st.dictionaries(
    st.one_of(st.sampled_from(RESERVED_KEYS), st.text(max_size=6)), PARAMETER_VALUES, max_size=3
)


def bytes_elements(data: st.DataObject, count: int) -> bytes:
    """Length-prefixed BYTES elements, sometimes with a lying length."""
    parts = []
    for _ in range(min(count, 8)):
        value = data.draw(st.binary(max_size=6))
        length = data.draw(st.sampled_from([len(value), len(value), len(value) + 3, 2**32 - 1]))
        parts.append(struct.pack("<I", length) + value)
    return b"".join(parts)


def tensor_bytes(data: st.DataObject, datatype: str, shape: list[int]) -> bytes:
    """Bytes for a tensor: usually the right amount, sometimes a few more or fewer."""
    count = 1
    for dim in shape:
        count *= max(dim, 0)
    if datatype == "BYTES":
        return bytes_elements(data, count)
    itemsize = FIXED_SIZE_DTYPES[datatype].itemsize if datatype in FIXED_SIZE_DTYPES else 2
    size = count * itemsize if count * itemsize <= 256 else data.draw(st.integers(0, 64))
    size = max(0, size + data.draw(st.sampled_from([0, 0, 0, -1, 1])))
    return data.draw(st.binary(min_size=size, max_size=size))


def json_values(datatype: str, count: int) -> st.SearchStrategy[Any]:
    """'data' for a JSON input: the right kind and count, or not."""
    count = min(max(count, 0), 8)
    if datatype == "BYTES":
        right: st.SearchStrategy[Any] = st.lists(st.text(max_size=4), min_size=count, max_size=count)
    elif datatype == "BOOL":
        right = st.lists(st.booleans(), min_size=count, max_size=count)
    elif datatype in ("FP16", "FP32", "FP64"):
        right = st.lists(st.floats(width=16, allow_nan=False), min_size=count, max_size=count)
    else:
        right = st.lists(st.integers(-(2**70), 2**70), min_size=count, max_size=count)
    # Nested lists two deep, built without st.recursive (whose leaf limit made replays flaky).
    nested = st.lists(st.one_of(SCALARS, st.lists(SCALARS, max_size=3)), max_size=3)
    return st.one_of(right, right, nested)


# Real inference requests to the ONNX ``simple`` model (two INT32 [1, 16] inputs): JSON, and binary
# (a JSON header of BINARY_HEADER's length, then the tensors' bytes).
_SIMPLE_INPUTS = [{"name": n, "datatype": "INT32", "shape": [1, 16]} for n in ("INPUT0", "INPUT1")]
JSON_INFER = json.dumps({"inputs": [{**t, "data": list(range(16))} for t in _SIMPLE_INPUTS]}).encode()
BINARY_HEADER = json.dumps(
    {"inputs": [{**t, "parameters": {"binary_data_size": 64}} for t in _SIMPLE_INPUTS],
     "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}
).encode()  # fmt: skip
BINARY_INFER = BINARY_HEADER + struct.pack("<16i", *range(16)) * 2

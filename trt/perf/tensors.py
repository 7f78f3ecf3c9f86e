"""Tensors on the wire: Triton datatypes as numpy dtypes, BYTES serialization, JSON ``data`` lists."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from trt.perf.errors import InputDataError

NUMPY_TYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": np.uint16,  # no numpy bfloat16: the two bytes per element are what matters on the wire
    "BYTES": np.object_,
}


def numpy_type(datatype: str, input_name: str) -> Any:
    try:
        return NUMPY_TYPES[datatype]
    except KeyError:
        raise InputDataError(f"input '{input_name}': datatype {datatype} is not supported") from None


def serialize_bytes(array: np.ndarray) -> bytes:
    """BYTES elements as Triton sends them: a 4-byte little-endian length, then the bytes, row-major."""
    parts = []
    for item in array.reshape(-1):
        raw = item if isinstance(item, bytes) else str(item).encode()
        parts.append(struct.pack("<I", len(raw)))
        parts.append(raw)
    return b"".join(parts)


def deserialize_bytes(raw: bytes) -> list[bytes]:
    items, offset = [], 0
    while offset + 4 <= len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        items.append(raw[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return items


def to_wire(array: np.ndarray, datatype: str) -> bytes:
    if datatype == "BYTES":
        return serialize_bytes(array)
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def to_json_data(array: np.ndarray, datatype: str) -> list[Any]:
    """Flat row-major values for the JSON ``data`` field (FP16/BF16 have no JSON form in Triton)."""
    if datatype in ("FP16", "BF16"):
        raise InputDataError(f"{datatype} tensors cannot travel as JSON; use --input-tensor-format binary")
    flat = array.reshape(-1)
    if datatype == "BYTES":
        return [x.decode(errors="replace") if isinstance(x, bytes) else str(x) for x in flat]
    return flat.tolist()

"""Tensor data written as JSON: an input's nested ``data`` array read into an array of its datatype,
and an output's array written as the flat list JSON answers carry, each refused in Triton's words where
Triton refuses it (BF16, data nested too deep, strings for numbers)."""

from __future__ import annotations

from typing import Any

import numpy as np

from trt.server.core.datatypes import check_bytes_elements, element_count, wire_to_numpy
from trt.server.core.errors import InvalidArgument, InvalidInput

MAX_JSON_DATA_DEPTH = 100  # Triton's HTTP_MAX_JSON_NESTING_DEPTH


def json_input_data(name: str, datatype: str, shape: tuple[int, ...], data: Any) -> np.ndarray:
    count = element_count(shape)
    _check_depth(data)
    if datatype == "BYTES":
        check_bytes_elements(name, count)
        flat = _flatten(data)
        array = np.empty(len(flat), dtype=np.object_)
        for index, item in enumerate(flat):
            if not isinstance(item, str):
                raise InvalidInput(f"input '{name}': BYTES data must be JSON strings")
            array[index] = item.encode("utf-8")
    else:
        if datatype == "BF16":
            raise InvalidInput(  # Triton's words; FP16, which Triton refuses too, is taken here
                "receiving BF16 data via JSON is not supported. Please use the binary data format for "
                f"input {name}"
            )
        dtype = wire_to_numpy(datatype)
        try:
            array = np.asarray(data, dtype=dtype).reshape(-1)
        except (ValueError, TypeError, OverflowError):
            raise InvalidInput(
                f"input '{name}': Unable to parse 'data' as {datatype} (expected numbers"
                + (" or true/false" if datatype == "BOOL" else "")
                + ")"
            ) from None
        if datatype == "BOOL" and not _all_bools(data):
            raise InvalidInput(f"input '{name}': BOOL data must be JSON true/false")
    if array.size != count:
        raise InvalidInput(
            f"input '{name}': shape {list(shape)} needs {count} elements but 'data' has {array.size}"
        )
    return array.reshape(shape)


def _check_depth(data: Any) -> None:
    """Refuse ``data`` nested as deep as Triton refuses it, in its words. Measured along the first
    items: a list nested deeper elsewhere is ragged, which the decoding refuses anyway."""
    depth = 0
    while isinstance(data, list) and data:
        depth += 1
        if depth >= MAX_JSON_DATA_DEPTH:
            raise InvalidInput(f"JSON nesting depth exceeds maximum allowed limit ({MAX_JSON_DATA_DEPTH})")
        data = data[0]


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def _all_bools(data: Any) -> bool:
    return all(isinstance(item, bool) for item in _flatten(data))


def json_output_data(data: np.ndarray, datatype: str) -> Any:
    flat = data.reshape(-1)
    if datatype == "BYTES":
        return [
            item.decode("utf-8", "replace") if isinstance(item, bytes | bytearray) else str(item)
            for item in flat
        ]
    if datatype == "FP16":
        return flat.astype(np.float32)
    if datatype == "BF16":
        raise InvalidArgument(  # Triton's words
            "sending BF16 data via JSON is not supported. Please use the binary data format for output"
        )
    if not flat.flags.c_contiguous:
        flat = np.ascontiguousarray(flat)
    return flat

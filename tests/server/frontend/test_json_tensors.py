"""A JSON inference body re-encoded by a worker as header and binary tensors decodes, at the core, to
the request the JSON decodes to; what the worker cannot re-encode faithfully goes whole."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from trt.server.frontend.json_tensors import binary_parts
from trt.server.http.codec import decode_request

MAX = 64 * 1024 * 1024
IN_SHM = {"shared_memory_region": "r", "shared_memory_byte_size": 4}


def _decoded(body: bytes, header_length: int | None) -> tuple[Any, ...]:
    request, binary_choice, default_binary = decode_request("m", "", body, header_length)
    inputs = [
        (
            t.name,
            t.datatype,
            t.shape,
            None if t.data is None else (t.data.dtype, t.data.tolist()),
            t.parameters,
        )
        for t in request.inputs
    ]
    outputs = (
        None if request.outputs is None else [(o.name, o.class_count, o.parameters) for o in request.outputs]
    )
    return request.id, request.parameters, inputs, outputs, binary_choice, default_binary


def _without_sizes(decoded: tuple[Any, ...]) -> tuple[Any, ...]:
    """The decoded request with each input's binary_data_size left out (the re-encoding adds it)."""
    request_id, parameters, inputs, *rest = decoded
    inputs = [
        (*tensor[:4], {k: v for k, v in tensor[4].items() if k != "binary_data_size"}) for tensor in inputs
    ]
    return (request_id, parameters, inputs, *rest)


BODIES = {
    "FP32 with outputs as JSON": {
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [2, 3], "data": [[1.5, -2, 3e-7], [4, 5, 6]]}],
        "outputs": [{"name": "Y"}],
    },
    "every fixed-size type, flat and nested": {
        "inputs": [
            {"name": "I8", "datatype": "INT8", "shape": [3], "data": [-128, 0, 127]},
            {"name": "U16", "datatype": "UINT16", "shape": [2], "data": [0, 65535]},
            {"name": "I64", "datatype": "INT64", "shape": [1, 2], "data": [[-(2**63), 2**63 - 1]]},
            {"name": "U64", "datatype": "UINT64", "shape": [1], "data": [2**64 - 1]},
            {"name": "F16", "datatype": "FP16", "shape": [2], "data": [0.5, 65504]},
            {"name": "F64", "datatype": "FP64", "shape": [2], "data": [1e300, -0.1]},
            {"name": "B", "datatype": "BOOL", "shape": [2, 1], "data": [[True], [False]]},
        ]
    },
    "BYTES, unicode and empty strings": {
        "inputs": [{"name": "S", "datatype": "BYTES", "shape": [3], "data": ["héllo", "", "日本"]}]
    },
    "an empty tensor": {"inputs": [{"name": "E", "datatype": "INT32", "shape": [0, 4], "data": []}]},
    "id, sequence parameters, classification and binary outputs": {
        "id": "req-7",
        "parameters": {"sequence_id": 42, "sequence_start": True, "binary_data_output": True, "x": 1.25},
        "inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [3], "parameters": {"tag": "a"}}],
        "outputs": [
            {"name": "Y", "parameters": {"classification": 2}},
            {"name": "Z", "parameters": {"binary_data": False}},
        ],
    },
    "no outputs asked for": {
        "inputs": [{"name": "X", "datatype": "UINT8", "shape": [1], "data": [7]}],
        "outputs": [],
    },
    "one input in shared memory beside one as data": {
        "inputs": [
            {
                "name": "A",
                "datatype": "FP32",
                "shape": [1],
                "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 4},
            },
            {"name": "B", "datatype": "FP32", "shape": [1], "data": [2.0]},
        ]
    },
}


@pytest.mark.parametrize("document", BODIES.values(), ids=BODIES.keys())
def test_the_binary_body_decodes_to_the_request_the_json_body_decodes_to(document: dict[str, Any]) -> None:
    body = orjson.dumps(document)
    parts = binary_parts("m", "", body, 4096, MAX)
    assert parts is not None
    header, tensors = parts
    assert b'"data"' not in header
    assert _without_sizes(_decoded(header + tensors, len(header))) == _without_sizes(_decoded(body, None))


def test_requests_alike_but_for_their_numbers_share_one_header() -> None:
    def body(values: list[float]) -> bytes:
        return orjson.dumps({"inputs": [{"name": "X", "datatype": "FP32", "shape": [3], "data": values}]})

    first, second = (
        binary_parts("m", "", body([1, 2, 3]), 4096, MAX),
        binary_parts("m", "", body([4, 5, 6]), 4096, MAX),
    )
    assert first is not None and second is not None
    assert first[0] == second[0] and first[1] != second[1]
    assert np.frombuffer(second[1], np.float32).tolist() == [4, 5, 6]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{not json",
        b'{"inputs": [{"name": "X", "datatype": "BF16", "shape": [1], "data": [1.0]}]}',  # Triton refuses it
        b'{"inputs": [{"name": "X", "datatype": "INT32", "shape": [3], "data": [1, 2]}]}',  # too few
        b'{"inputs": [{"name": "X", "datatype": "INT8", "shape": [1], "data": [300]}]}',  # out of range
        b'{"inputs": [{"name": "X", "datatype": "BOOL", "shape": [1], "data": [1]}]}',
        b'{"inputs": [{"name": "X", "datatype": "NOPE", "shape": [1], "data": [1]}]}',
        orjson.dumps({"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "parameters": IN_SHM}]}),
        b'{"inputs": []}',  # nothing to re-encode
    ],
)
def test_what_does_not_decode_or_carries_no_data_goes_whole(body: bytes) -> None:
    assert binary_parts("m", "", body, 4096, MAX) is None


def test_a_body_whose_header_or_tensors_would_be_too_big_goes_whole() -> None:
    names = orjson.dumps({"inputs": [{"name": f"X{i:04}", "datatype": "INT32", "shape": [1], "data": [i]}
                                     for i in range(200)]})  # fmt: skip
    assert binary_parts("m", "", names, 4096, MAX) is None  # a header past a layout's 4,096 bytes
    zeros = orjson.dumps(
        {"inputs": [{"name": "X", "datatype": "INT64", "shape": [1000], "data": [0] * 1000}]}
    )
    assert len(zeros) < 8000
    assert binary_parts("m", "", zeros, 4096, 8000) is None  # 2 bytes a zero as text, 8 in binary
    assert binary_parts("m", "", zeros, 4096, 9000) is not None

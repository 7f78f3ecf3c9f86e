"""Property-based fuzzing of the HTTP request decoder (JSON and binary framing).

Whatever the body, decoding either gives a request whose tensors have the shapes and types they
declare, or raises a ServerError (which the transport answers with its status): never another
exception (a 500) and never an allocation the body does not pay for. A header the decoder has seen
before decodes exactly as it did the first time.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.strategies import DATATYPES, NAMES, PARAMETERS, SHAPES, json_values, tensor_bytes
from trt.server.core.datatypes import FIXED_SIZE_DTYPES
from trt.server.core.errors import ServerError
from trt.server.core.types import InferenceRequest
from trt.server.http.codec import RequestDecoder, decode_request

Outcome = tuple[Any, ...]


def _outcome(decode: Any, *arguments: Any) -> Outcome:
    try:
        request, binary_choice, default_binary = decode(*arguments)
    except ServerError as exc:
        return ("refused", type(exc).__name__, exc.message)
    _check_tensors(request)
    return ("decoded", _fields(request), binary_choice, default_binary)


def _fields(request: InferenceRequest) -> tuple[Any, ...]:
    inputs = tuple(
        (t.name, t.datatype, t.shape, None if t.data is None else t.data.tobytes() if t.data.dtype != object
         else tuple(t.data.reshape(-1)), repr(t.parameters))
        for t in request.inputs
    )  # fmt: skip
    outputs = (
        None
        if request.outputs is None
        else tuple((o.name, o.class_count, repr(o.parameters)) for o in request.outputs)
    )
    return (request.model_name, request.model_version, request.id, inputs, outputs, repr(request.parameters))


def _check_tensors(request: InferenceRequest) -> None:
    for tensor in request.inputs:
        if tensor.data is None:  # to be read from a shared memory region
            assert "shared_memory_region" in tensor.parameters
            continue
        assert tensor.data.shape == tensor.shape
        if tensor.datatype == "BYTES":
            assert tensor.data.dtype == np.object_
            assert all(isinstance(item, bytes) for item in tensor.data.reshape(-1))
        else:
            assert tensor.data.dtype == FIXED_SIZE_DTYPES[tensor.datatype]


@given(st.binary(max_size=512), st.one_of(st.none(), st.integers(-8, 600)))
def test_any_bytes_decode_or_are_refused(body: bytes, header_length: int | None) -> None:
    decoder = RequestDecoder()
    first = _outcome(decoder.decode, "m", "1", body, header_length)
    assert _outcome(decoder.decode, "m", "1", body, header_length) == first
    assert _outcome(decode_request, "m", "1", body, header_length) == first


@st.composite
def _input(draw: st.DrawFn, data: st.DataObject) -> tuple[dict[str, Any], bytes]:
    datatype = draw(st.sampled_from(DATATYPES))
    shape = draw(SHAPES)
    described: dict[str, Any] = {"name": draw(NAMES), "datatype": datatype, "shape": shape}
    parameters = draw(PARAMETERS)
    how = draw(st.sampled_from(["binary", "binary", "json", "neither", "shm"]))
    raw = b""
    if how == "binary":
        raw = tensor_bytes(data, datatype, shape)
        parameters["binary_data_size"] = draw(st.sampled_from([len(raw), len(raw), len(raw) + 1, -1]))
    elif how == "json":
        count = 1
        for dim in shape:
            count *= max(dim, 0)
        described["data"] = draw(json_values(datatype, count))
    elif how == "shm":
        parameters.update(shared_memory_region="r", shared_memory_byte_size=draw(st.integers(-1, 64)))
    described["parameters"] = parameters
    mutation = draw(st.sampled_from(["none", "none", "none", "drop", "retype"]))
    if mutation != "none":
        key = draw(st.sampled_from(["name", "datatype", "shape", "parameters"]))
        if mutation == "drop":
            described.pop(key, None)
        else:
            described[key] = draw(
                st.one_of(st.integers(), st.text(max_size=3), st.lists(st.floats(), max_size=2))
            )
    return described, raw


@given(st.data())
def test_structured_requests_decode_or_are_refused(data: st.DataObject) -> None:
    inputs = data.draw(st.lists(_input(data), max_size=3))
    document: dict[str, Any] = {"inputs": [described for described, _ in inputs]}
    if data.draw(st.booleans()):
        document["outputs"] = data.draw(
            st.lists(st.fixed_dictionaries({"name": NAMES}, optional={"parameters": PARAMETERS}), max_size=2)
        )
    if data.draw(st.booleans()):
        document["parameters"] = data.draw(PARAMETERS)
    if data.draw(st.booleans()):
        document["id"] = data.draw(st.one_of(st.text(max_size=4), st.integers()))
    header = json.dumps(document).encode()
    binary = b"".join(raw for _, raw in inputs) + data.draw(st.sampled_from([b"", b"", b"\x00"]))
    body = header + binary
    length = data.draw(st.sampled_from([len(header), len(header), None, len(header) - 1]))
    decoder = RequestDecoder()
    first = _outcome(decoder.decode, "m", "", body, length)
    again = _outcome(decoder.decode, "m", "", body, length)  # a header seen before: looked up
    assert again == first
    assert _outcome(decode_request, "m", "", body, length) == first

"""Property-based fuzzing of the gRPC request codec (``decode_infer_request`` as it is today).

Any ModelInferRequest a client can build (raw or typed contents, any datatype string, shapes at the
edges of int64, parameters of every kind) decodes to tensors of the shapes and types it declares, or
is refused with a ServerError; nothing else escapes and nothing is allocated beyond what was sent.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.strategies import DATATYPES, NAMES, SHAPES, tensor_bytes
from trt.protos import grpc_service_pb2 as pb
from trt.server.core.datatypes import FIXED_SIZE_DTYPES, INVALID_DATATYPE, UNDECODED
from trt.server.core.errors import ServerError
from trt.server.grpc.codec import decode_infer_request

INT64 = st.integers(-(2**63), 2**63 - 1)
PARAMETER_KEYS = st.one_of(
    st.sampled_from(
        ["priority", "timeout", "sequence_id", "sequence_start", "classification", "shared_memory_region"]
    ),
    st.text(max_size=5),
)


def _set_parameter(target: Any, key: str, data: st.DataObject) -> None:
    parameter = target[key]
    choice = data.draw(st.sampled_from(["bool", "int64", "uint64", "string", "double", "unset"]))
    if choice == "bool":
        parameter.bool_param = data.draw(st.booleans())
    elif choice == "int64":
        parameter.int64_param = data.draw(INT64)
    elif choice == "uint64":
        parameter.uint64_param = data.draw(st.integers(0, 2**64 - 1))
    elif choice == "string":
        parameter.string_param = data.draw(st.text(max_size=5))
    elif choice == "double":
        parameter.double_param = data.draw(st.floats())


def _typed_contents(tensor: Any, datatype: str, data: st.DataObject) -> None:
    count = data.draw(st.integers(0, 6))
    contents = tensor.contents
    field = data.draw(
        st.sampled_from(["bool", "int", "int64", "uint", "uint64", "fp32", "fp64", "bytes"])
        if data.draw(st.booleans())
        else st.just(_field_for(datatype))
    )
    if field == "bool":
        contents.bool_contents.extend(data.draw(st.lists(st.booleans(), min_size=count, max_size=count)))
    elif field == "int":
        contents.int_contents.extend(
            data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=count, max_size=count))
        )
    elif field == "int64":
        contents.int64_contents.extend(data.draw(st.lists(INT64, min_size=count, max_size=count)))
    elif field == "uint":
        contents.uint_contents.extend(
            data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=count, max_size=count))
        )
    elif field == "uint64":
        contents.uint64_contents.extend(
            data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=count, max_size=count))
        )
    elif field == "fp32":
        contents.fp32_contents.extend(
            data.draw(st.lists(st.floats(width=32), min_size=count, max_size=count))
        )
    elif field == "fp64":
        contents.fp64_contents.extend(data.draw(st.lists(st.floats(), min_size=count, max_size=count)))
    else:
        contents.bytes_contents.extend(
            data.draw(st.lists(st.binary(max_size=4), min_size=count, max_size=count))
        )


def _field_for(datatype: str) -> str:
    if datatype in ("INT8", "INT16", "INT32"):
        return "int"
    if datatype in ("UINT8", "UINT16", "UINT32"):
        return "uint"
    return {"BOOL": "bool", "INT64": "int64", "UINT64": "uint64", "FP32": "fp32", "FP64": "fp64"}.get(
        datatype, "bytes"
    )


# Drawing a whole request field by field costs ~20 ms an example on a loaded CI core: half the
# profile's examples here (200 in CI), all of them in the long run's profile, halved the same way.
@settings(max_examples=max(1, settings.default.max_examples // 2))
@given(st.data())
def test_any_model_infer_request_decodes_or_is_refused(data: st.DataObject) -> None:
    request = pb.ModelInferRequest(
        model_name=data.draw(NAMES),
        model_version=data.draw(st.text(max_size=3)),
        id=data.draw(st.text(max_size=3)),
    )
    raw = data.draw(st.sampled_from(["raw", "raw", "typed", "mixed"]))
    for _ in range(data.draw(st.integers(0, 3))):
        datatype = data.draw(st.sampled_from(DATATYPES))
        shape = data.draw(st.lists(st.one_of(SHAPES.map(lambda s: s[0] if s else 1), INT64), max_size=4))
        tensor = request.inputs.add(name=data.draw(NAMES), datatype=datatype, shape=shape)
        for _ in range(data.draw(st.integers(0, 2))):
            _set_parameter(tensor.parameters, data.draw(PARAMETER_KEYS), data)
        if raw == "raw" or (raw == "mixed" and data.draw(st.booleans())):
            request.raw_input_contents.append(tensor_bytes(data, datatype, [max(d, 0) for d in shape]))
        else:
            _typed_contents(tensor, datatype, data)
    for _ in range(data.draw(st.integers(0, 2))):
        output = request.outputs.add(name=data.draw(NAMES))
        if data.draw(st.booleans()):
            _set_parameter(output.parameters, data.draw(PARAMETER_KEYS), data)
    for _ in range(data.draw(st.integers(0, 2))):
        _set_parameter(request.parameters, data.draw(PARAMETER_KEYS), data)

    try:
        decoded = decode_infer_request(request)
    except ServerError:
        return
    for tensor in decoded.inputs:
        if tensor.data is None:
            assert "shared_memory_region" in tensor.parameters
            continue
        if tensor.datatype == INVALID_DATATYPE:  # the core refuses it before anything reads it
            assert tensor.data is UNDECODED and tensor.data.nbytes == 0
            continue
        assert tensor.data.shape == tensor.shape
        expected = np.object_ if tensor.datatype == "BYTES" else FIXED_SIZE_DTYPES[tensor.datatype]
        assert tensor.data.dtype == expected


@given(st.binary(max_size=256))
def test_any_wire_bytes_that_parse_decode_or_are_refused(wire: bytes) -> None:
    """What grpc hands over is whatever parsed as a ModelInferRequest."""
    request = pb.ModelInferRequest()
    try:
        request.ParseFromString(wire)
    except Exception:  # not a message at all: grpc's layer refuses it before us
        return
    try:
        decode_infer_request(request)
    except ServerError:
        pass

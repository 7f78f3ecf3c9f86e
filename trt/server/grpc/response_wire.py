"""A ``ModelInferResponse`` serialized from cached pieces, without building protobuf messages.

Protobuf writes a message's fields in field-number order: ``model_name`` (1), ``model_version`` (2),
``id`` (3), ``parameters`` (4), ``outputs`` (5), ``raw_output_contents`` (6). For a response without
parameters, the bytes before ``id`` and those of ``outputs`` depend only on the model, its version and
the outputs' names, datatypes and shapes, the same for every request of a model: they are serialized
once by protobuf and kept (a bounded cache), and each response joins them with its own id and raw
outputs. The result is byte for byte what ``encode_infer_response(...).SerializeToString()`` gives;
``stream_response`` wraps the same pieces, with the final flag, as a stream's answer.
"""

from __future__ import annotations

from trt.protos import grpc_service_pb2 as pb
from trt.server.core.datatypes import tensor_to_bytes
from trt.server.core.types import InferenceResponse
from trt.server.grpc.varints import varint

_ID_TAG = b"\x1a"  # field 3, length-delimited
_RAW_TAG = bytes([pb.ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number << 3 | 2])
_CACHED_HEADS = 256  # distinct (model, version, output signature) kept; a full cache starts over
_Key = tuple[str, str, tuple[tuple[str, str, tuple[int, ...]], ...]]
_heads: dict[_Key, tuple[bytes, bytes]] = {}


def _heads_for(response: InferenceResponse, key: _Key) -> tuple[bytes, bytes]:
    """(fields 1-2, field 5) as protobuf serializes them."""
    output_tensor = pb.ModelInferResponse.InferOutputTensor
    before_id = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version
    ).SerializeToString()
    outputs = pb.ModelInferResponse(
        outputs=[output_tensor(name=o.name, datatype=o.datatype, shape=o.shape) for o in response.outputs]
    ).SerializeToString()
    if len(_heads) >= _CACHED_HEADS:
        _heads.clear()
    _heads[key] = before_id, outputs
    return before_id, outputs


def plain_response_parts(
    response: InferenceResponse, parameters_field: bytes = b""
) -> tuple[list[bytes | memoryview], int] | None:
    """The serialized response in pieces (its raw outputs as views of the output arrays) and its
    size; None when it or an output carries parameters (then protobuf serializes it).
    ``parameters_field``: the serialized ``parameters`` field (4) to carry, the server's own."""
    if response.parameters:
        return None
    signature = []
    for output in response.outputs:
        if output.parameters:
            return None
        signature.append((output.name, output.datatype, tuple(output.shape)))
    key = (response.model_name, response.model_version, tuple(signature))
    heads = _heads.get(key)
    before_id, outputs = heads if heads is not None else _heads_for(response, key)
    parts: list[bytes | memoryview] = [before_id]
    if response.id:
        identifier = response.id.encode()
        parts.append(_ID_TAG + varint(len(identifier)) + identifier)
    if parameters_field:
        parts.append(parameters_field)
    parts.append(outputs)
    size = 0
    for output in response.outputs:
        data = b"" if output.data is None else tensor_to_bytes(output.data, output.datatype)
        length = len(data)
        parts.append(_RAW_TAG + varint(length))
        parts.append(data)
        size += length
    return parts, size


# ModelStreamInfer's answers: a ModelStreamInferResponse whose only field is infer_response (2),
# with the final flag in its parameters (4) as Triton sets it.
_STREAM_FIELD = pb.ModelStreamInferResponse.DESCRIPTOR.fields_by_name["infer_response"].number
_STREAM_RESPONSE_TAG = bytes([_STREAM_FIELD << 3 | 2])
_FINAL_FLAG_FIELD = {
    final: pb.ModelInferResponse(
        parameters={"triton_final_response": pb.InferParameter(bool_param=final)}
    ).SerializeToString()
    for final in (False, True)
}


def stream_response(response: InferenceResponse, final: bool) -> bytes | None:
    """A serialized ``ModelStreamInferResponse`` carrying ``response`` and its final flag, as protobuf
    writes it; None when the response carries parameters of its own (then protobuf serializes it)."""
    plain = plain_response_parts(response, _FINAL_FLAG_FIELD[final])
    if plain is None:
        return None
    body = b"".join(plain[0])
    return _STREAM_RESPONSE_TAG + varint(len(body)) + body

"""``ModelInferRequest`` / ``ModelInferResponse`` to and from the core's protocol-neutral types.

Raw inputs (``raw_input_contents``, what tritonclient always sends) become numpy views over the
received bytes; typed ``contents`` are accepted too, as Triton does. Outputs always go back in
``raw_output_contents``, in output order, as Triton sends them.

Large messages are not copied: ``decode_infer_message`` reads the raw inputs' places in the message
itself (protobuf would copy each into its arena, then into a ``bytes``), and ``encode_infer_parts``
writes the raw outputs as views of the output arrays after the rest of the message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from trt.protos import grpc_service_pb2 as pb
from trt.server.core.datatypes import (
    FIXED_SIZE_DTYPES,
    INVALID_DATATYPE,
    UNDECODED,
    WIRE_DATATYPES,
    byte_size_mismatch,
    check_bytes_elements,
    check_shape,
    element_count,
    tensor_from_bytes,
    tensor_to_bytes,
    wire_to_numpy,
)
from trt.server.core.errors import InvalidArgument, InvalidInput
from trt.server.core.types import (
    InferenceRequest,
    InferenceResponse,
    InputTensor,
    OutputTensor,
    RequestedOutput,
)
from trt.server.grpc import request_wire
from trt.server.grpc.packed_contents import packed_values
from trt.server.grpc.response_wire import plain_response_parts
from trt.server.grpc.varints import read_varint, varint

# The typed ``InferTensorContents`` field that carries each datatype (FP16/BF16 only travel raw).
_CONTENTS_FIELD: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
# The datatype Triton names a contents field by when it holds data for an input of another type: the
# widest that uses it, which ``_CONTENTS_FIELD`` lists last (int_contents: INT32).
_FIELD_DATATYPE: dict[str, str] = {field: datatype for datatype, field in _CONTENTS_FIELD.items()}
# Narrow integer types share a 32-bit field; values outside the type's range are an error.
_NARROW_INTEGERS = frozenset({"INT8", "INT16", "UINT8", "UINT16"})


# -- parameters ------------------------------------------------------------------------------------


def parameters_to_dict(parameters: Mapping[str, Any], what: str = "request") -> dict[str, Any]:
    """``map<string, InferParameter>`` (or ``ModelRepositoryParameter``) -> plain Python values."""
    out: dict[str, Any] = {}
    for key, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        if choice is None:
            raise InvalidArgument(f"{what} parameter '{key}' has no value set")
        out[key] = getattr(parameter, choice)
    return out


def set_parameters(target: Any, values: Mapping[str, Any]) -> None:
    """Write Python values into a ``map<string, InferParameter>`` field."""
    for key, value in values.items():
        parameter = target[key]
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int | np.integer):
            if value > 0x7FFF_FFFF_FFFF_FFFF:
                parameter.uint64_param = int(value)
            else:
                parameter.int64_param = int(value)
        elif isinstance(value, float | np.floating):
            parameter.double_param = float(value)
        else:
            parameter.string_param = value if isinstance(value, str) else str(value)


def _check_reserved(parameters: dict[str, Any]) -> None:
    """Type checks for the parameters Triton interprets itself (any integer kind is accepted)."""
    for key in ("priority", "timeout"):
        value = parameters.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise InvalidArgument(
                f"invalid value for '{key}' parameter: expected a non-negative integer "
                "(int64_param or uint64_param)"
            )
    sequence_id = parameters.get("sequence_id")
    if sequence_id is not None and (not isinstance(sequence_id, int | str) or isinstance(sequence_id, bool)):
        raise InvalidArgument(
            "invalid value for 'sequence_id' parameter: expected an integer or a string (int64_param, "
            "uint64_param or string_param)"
        )
    for key in ("sequence_start", "sequence_end"):
        value = parameters.get(key)
        if value is not None and not isinstance(value, bool):
            raise InvalidArgument(f"invalid value for '{key}' parameter: expected a bool_param")


# -- requests --------------------------------------------------------------------------------------


def decode_infer_request(
    request: pb.ModelInferRequest, raw_contents: Sequence[bytes | memoryview] | None = None
) -> InferenceRequest:
    """Build the core's ``InferenceRequest`` from a ``ModelInferRequest``; ``raw_contents``, when
    given, stands for its ``raw_input_contents`` (views into the message, see ``decode_infer_message``)."""
    if raw_contents is None:
        raw_contents = request.raw_input_contents
    tensors = request.inputs
    raw_count = len(raw_contents)
    # Inputs in shared memory take no raw_input_contents entry (tritonclient sends none for them).
    in_memory = [t for t in tensors if "shared_memory_region" not in t.parameters]
    model = request.model_name
    if raw_count and raw_count != len(in_memory):
        for tensor in tensors:
            if tensor.HasField("contents") and tensor.contents.ByteSize() > 0:
                raise InvalidArgument(_mixed_message(tensor.name, model))
        if raw_count < len(in_memory):  # the first input left without an entry, as Triton names it
            raise InvalidArgument(_no_data_message(in_memory[raw_count].name, model))
        raise InvalidArgument(  # Triton ignores the extra entries; they are a client's mistake
            f"the request has {len(in_memory)} inputs outside shared memory but {raw_count} entries in "
            "raw_input_contents; send one raw_input_contents entry per such input, in the order of 'inputs'"
        )
    inputs: list[InputTensor] = []
    index = 0
    for tensor in tensors:
        name = tensor.name
        datatype = tensor.datatype
        known = datatype in WIRE_DATATYPES
        if not known:  # refused by the core, after the checks that come first there (Triton's order)
            datatype = INVALID_DATATYPE
        shape = tuple(tensor.shape[:])  # slicing first halves the cost with upb
        check_shape(name, shape)
        parameters = parameters_to_dict(tensor.parameters, f"input '{name}'") if tensor.parameters else {}
        has_contents = tensor.HasField("contents") and tensor.contents.ByteSize() > 0
        data: np.ndarray | None
        if "shared_memory_region" in parameters:
            if has_contents:
                raise InvalidInput(  # Triton's words
                    f"unexpected 'content' provided when using shared memory for input tensor '{name}' for "
                    f"model '{model}'"
                )
            data = None  # the core reads the region
        elif raw_count:
            if has_contents:
                raise InvalidArgument(_mixed_message(name, model))
            data = tensor_from_bytes(raw_contents[index], datatype, shape, name, model, request.id)
            index += 1
        elif has_contents:
            data = _typed_contents(tensor.contents, name, datatype, shape, model, request.id)
        elif element_count(shape) == 0:
            data = np.empty(shape, dtype=wire_to_numpy(datatype)) if known else UNDECODED
        else:
            raise InvalidInput(_no_data_message(name, model))
        inputs.append(InputTensor(name, datatype, shape, data, parameters))

    outputs: list[RequestedOutput] | None = None
    if request.outputs:
        outputs = [_requested_output(output) for output in request.outputs]
    parameters = parameters_to_dict(request.parameters) if request.parameters else {}
    if parameters:
        _check_reserved(parameters)
    return InferenceRequest(
        request.model_name, request.model_version, request.id, inputs, outputs, parameters
    )


# Triton's words for the inputs a request carries no data for, or carries twice.


def _mixed_message(name: str, model: str) -> str:
    return (
        f"contents field must not be specified when using raw_input_contents for '{name}' for model '{model}'"
    )


def _no_data_message(name: str, model: str) -> str:
    return f"unable to find data for input tensor '{name}' for model '{model}' in request."


def _requested_output(output: Any) -> RequestedOutput:
    name = output.name
    if not output.parameters:
        return RequestedOutput(name)
    parameters = parameters_to_dict(output.parameters, f"output '{name}'")
    class_count = parameters.get("classification", 0)
    if not isinstance(class_count, int) or isinstance(class_count, bool) or class_count < 0:
        raise InvalidArgument(
            f"output '{name}': 'classification' must be a non-negative integer (int64_param)"
        )
    return RequestedOutput(name, class_count, parameters)


def _typed_contents(
    contents: Any, name: str, datatype: str, shape: tuple[int, ...], model: str, request_id: str
) -> np.ndarray:
    field = _CONTENTS_FIELD.get(datatype)
    values = getattr(contents, field) if field is not None else ()
    count = element_count(shape)
    # FP16, BF16 and an unknown datatype have no field of their own: their contents, never empty
    # here, are in the field of another type, as when a client sends FP32 contents for an INT32 input.
    populated = [] if values else contents.ListFields()
    if populated:
        other = _FIELD_DATATYPE[populated[0][0].name]
        raise InvalidInput(
            f"unexpected explicit tensor data for input tensor '{name}' for model '{model}' of type "
            f"'{other}', expected datatype '{datatype}'"
        )
    if len(values) != count:
        fixed = FIXED_SIZE_DTYPES.get(datatype)
        if fixed is not None:  # Triton counts them in bytes (its core checks the size)
            got = len(values) * fixed.itemsize
            raise byte_size_mismatch(name, model, request_id, count * fixed.itemsize, got)
        raise InvalidInput(
            f"input '{name}': shape {list(shape)} needs {count} {datatype} elements in "
            f"contents.{field}, got {len(values)}"
        )
    if datatype == "BYTES":
        check_bytes_elements(name, count)
        array = np.empty(count, dtype=np.object_)
        for index, item in enumerate(values):
            array[index] = item
        return array.reshape(shape)
    dtype = wire_to_numpy(datatype)
    if datatype in _NARROW_INTEGERS:
        wide = np.fromiter(values, dtype=np.int64, count=count)
        info = np.iinfo(dtype)
        if count and (wide.min() < info.min or wide.max() > info.max):
            raise InvalidInput(
                f"input '{name}': a value in contents.{field} is outside the range of {datatype} "
                f"[{info.min}, {info.max}]"
            )
        return wide.astype(dtype).reshape(shape)
    packed = packed_values(contents, field, count) if field is not None else None  # FP32 and FP64
    if packed is not None:
        return packed.reshape(shape)
    return np.fromiter(values, dtype=dtype, count=count).reshape(shape)


# -- responses -------------------------------------------------------------------------------------


def encode_infer_response(
    response: InferenceResponse, message: pb.ModelInferResponse | None = None
) -> pb.ModelInferResponse:
    """``ModelInferResponse`` with every output in ``raw_output_contents``, in output order.

    ``message`` is an empty ``ModelInferResponse`` to fill in place (the one inside a stream
    response), so the tensor bytes are not copied a second time into an enclosing message.
    """
    tensors = []
    raw: list[bytes] = []
    output_tensor = pb.ModelInferResponse.InferOutputTensor
    for output in response.outputs:
        tensor = output_tensor(name=output.name, datatype=output.datatype, shape=output.shape)
        if output.parameters:
            set_parameters(tensor.parameters, output.parameters)
        tensors.append(tensor)
        if output.data is None:  # written into the client's shared memory region
            raw.append(b"")  # an empty entry keeps raw_output_contents aligned with outputs
            continue
        data = tensor_to_bytes(output.data, output.datatype)
        # protobuf takes only bytes; this is the one copy on the way out.
        raw.append(data if isinstance(data, bytes) else data.tobytes())
    if message is None:
        message = pb.ModelInferResponse(
            model_name=response.model_name,
            model_version=response.model_version,
            id=response.id,
            outputs=tensors,
            raw_output_contents=raw,
        )
    else:
        message.model_name = response.model_name
        message.model_version = response.model_version
        message.id = response.id
        message.outputs.extend(tensors)
        message.raw_output_contents.extend(raw)
    if response.parameters:
        set_parameters(message.parameters, response.parameters)
    return message


# -- large messages, without copies ------------------------------------------------------------------

LARGE_MESSAGE = 1 << 20  # below this, protobuf's own parsing and serializing cost less
_RAW_INPUTS = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
_RAW_OUTPUTS_TAG = bytes(
    [pb.ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number << 3 | 2]
)


# Top-level fields scanned in Python before leaving a message to protobuf's parser. A real request
# has a few per input; a hostile one can pack a large message with 2-byte fields, each costing this
# loop far more than protobuf's C parser (2 MiB of them: 4 s of the event loop against 15 ms), and
# messages may reach 2 GiB.
MAX_SCANNED_FIELDS = 4096


def split_raw_inputs(data: memoryview) -> tuple[bytes, list[memoryview]] | None:
    """The message without its ``raw_input_contents`` (to parse) and those fields as views of ``data``;
    None when it has more than ``MAX_SCANNED_FIELDS`` fields (protobuf parses it whole instead)."""
    kept: list[memoryview] = []
    raw: list[memoryview] = []
    at, end = 0, len(data)
    fields = 0
    while at < end:
        fields += 1
        if fields > MAX_SCANNED_FIELDS:
            return None
        start = at
        key, at = read_varint(data, at)
        wire = key & 7
        if wire == 2:
            length, at = read_varint(data, at)
            if at + length > end:
                raise InvalidArgument("malformed ModelInferRequest: a field runs past the message")
            if key >> 3 == _RAW_INPUTS:
                raw.append(data[at : at + length])
                at += length
                continue
            at += length
        elif wire == 0:
            _, at = read_varint(data, at)
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise InvalidArgument(f"malformed ModelInferRequest: wire type {wire}")
        if at > end:
            raise InvalidArgument("malformed ModelInferRequest: a field runs past the message")
        kept.append(data[start:at])
    return b"".join(kept), raw


def parse_infer_message(data: bytes | memoryview) -> tuple[pb.ModelInferRequest, list[memoryview] | None]:
    """A serialized ``ModelInferRequest``, parsed; for a large one, its raw inputs apart as views of
    ``data`` (the message parsed lacks them)."""
    try:
        if len(data) < LARGE_MESSAGE:
            return pb.ModelInferRequest.FromString(data), None
        split = split_raw_inputs(data if isinstance(data, memoryview) else memoryview(data))
        if split is None:
            return pb.ModelInferRequest.FromString(data), None
        rest, raw = split
        return pb.ModelInferRequest.FromString(rest), raw
    except DecodeError:
        raise InvalidArgument("malformed ModelInferRequest") from None


def decode_infer_message(data: bytes | memoryview) -> InferenceRequest:
    """``decode_infer_request`` of a serialized ``ModelInferRequest``; the raw inputs of a large one are
    read in place, so its tensors are views of ``data``; a small one seen before (its tensors' bytes
    aside) is built from what it decoded to then (``request_wire``)."""
    if len(data) >= LARGE_MESSAGE:
        return decode_infer_request(*parse_infer_message(data))
    known = request_wire.lookup(data)
    if known is not None:
        return known
    try:
        message = pb.ModelInferRequest.FromString(data)
    except DecodeError:
        raise InvalidArgument("malformed ModelInferRequest") from None
    raw = list(message.raw_input_contents)
    prefix = request_wire.prefix_of(data, raw) if raw else None
    if prefix is not None:
        template = request_wire.cached(prefix)
        if template is not None and len(template.inputs) == len(raw):
            return template.request(raw)
    decoded = decode_infer_request(message, raw)
    if prefix is not None:
        request_wire.remember(prefix, len(raw), decoded)
    return decoded


def encode_infer_parts(response: InferenceResponse) -> list[bytes | memoryview]:
    """A serialized ``ModelInferResponse`` in pieces whose concatenation is the message; the raw
    outputs of a large response are views of the output arrays (no copy on the way out)."""
    plain = plain_response_parts(response)
    if plain is not None:
        pieces, raw_size = plain
        return [b"".join(pieces)] if raw_size < LARGE_MESSAGE else pieces
    if sum(output.data.nbytes for output in response.outputs if output.data is not None) < LARGE_MESSAGE:
        return [encode_infer_response(response).SerializeToString()]
    raw: list[bytes | memoryview] = []
    for output in response.outputs:
        raw.append(b"" if output.data is None else tensor_to_bytes(output.data, output.datatype))
    bare = InferenceResponse(
        response.model_name,
        response.model_version,
        response.id,
        [OutputTensor(o.name, o.datatype, o.shape, None, o.parameters) for o in response.outputs],
        response.parameters,
    )
    head = encode_infer_response(bare)
    del head.raw_output_contents[:]
    parts = [head.SerializeToString()]
    for data in raw:
        parts.append(_RAW_OUTPUTS_TAG + varint(len(data)))
        parts.append(data)
    return parts

"""KServe v2 inference bodies: JSON, and JSON followed by binary tensors (Triton's extension).

Binary inputs become numpy views over the received body, so a large tensor is never copied on
the way in. Outputs are sent as binary when the request asks for it (per output ``binary_data`` or
request-level ``binary_data_output``), otherwise as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from trt.server.core.datatypes import (
    FIXED_SIZE_DTYPES,
    WIRE_DATATYPES,
    check_shape,
    tensor_from_bytes,
    tensor_to_bytes,
)
from trt.server.core.errors import InvalidArgument, InvalidInput
from trt.server.core.types import InferenceRequest, InferenceResponse, InputTensor, RequestedOutput
from trt.server.http.json_data import json_input_data, json_output_data
from trt.server.http.messages import SPLIT_BODY_BYTES, SplitBody

HEADER_LENGTH = "inference-header-content-length"
DEFAULT_HEADER_CACHE_BYTES = 4 * 1024 * 1024  # --http-infer-header-cache-size


def decode_request(
    model_name: str, model_version: str, body: bytes, header_length: int | None
) -> tuple[InferenceRequest, dict[str, bool], bool]:
    """Parse an infer body; returns the request, the per-output binary choice and the default one."""
    json_part: bytes | memoryview
    if header_length is None:
        json_part, binary = body, memoryview(b"")
    else:
        if header_length < 0 or header_length > len(body):
            raise InvalidArgument(
                f"inference header size should be in range (0, {len(body)}), got: {header_length}"
            )
        if header_length == 0:  # a raw binary request: the body is the one input's bytes, all outputs binary
            return InferenceRequest(model_name, model_version, raw_input=body), {}, True
        view = memoryview(body)
        json_part, binary = view[:header_length], view[header_length:]
    if not json_part:
        raise InvalidArgument("the request body is empty; expected a JSON inference request")
    document = parse_json_object(json_part)

    parameters = _object(document.get("parameters"), "parameters")
    raw_inputs = document.get("inputs")
    if not isinstance(raw_inputs, list):
        raise InvalidArgument("the request JSON needs an 'inputs' array")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument("'id' must be a string")
    inputs: list[InputTensor] = []
    offset = 0
    for raw in raw_inputs:
        tensor, offset = _decode_input(raw, binary, offset, model_name, request_id)
        inputs.append(tensor)
    if offset != len(binary):
        raise InvalidInput(  # Triton's words, then how many
            f"unexpected additional input data for model '{model_name}' ({len(binary) - offset} bytes of "
            "binary data that no input claims: check each input's binary_data_size)"
        )

    default_binary = bool(parameters.get("binary_data_output", False))
    outputs: list[RequestedOutput] | None = None
    binary_choice: dict[str, bool] = {}
    raw_outputs = document.get("outputs")
    if raw_outputs is not None:
        if not isinstance(raw_outputs, list):
            raise InvalidArgument("'outputs' must be an array")
        outputs = []
        for raw in raw_outputs:
            if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
                raise InvalidArgument("each requested output needs a 'name'")
            output_parameters = _object(raw.get("parameters"), f"output '{raw['name']}' parameters")
            class_count = output_parameters.get("classification", 0)
            if not isinstance(class_count, int) or isinstance(class_count, bool):
                raise InvalidArgument(f"output '{raw['name']}': 'classification' must be an integer")
            binary_choice[raw["name"]] = bool(output_parameters.get("binary_data", default_binary))
            if "shared_memory_region" in output_parameters and output_parameters.get("binary_data") is True:
                raise InvalidArgument(
                    f"output '{raw['name']}': Output can't set both 'shared_memory_region' and 'binary_data'"
                )
            outputs.append(RequestedOutput(raw["name"], class_count, output_parameters))

    request = InferenceRequest(model_name, model_version, request_id, inputs, outputs, parameters)
    return request, binary_choice, default_binary


@dataclass(frozen=True, slots=True)
class _InputPlan:
    name: str
    datatype: str
    shape: tuple[int, ...]
    # None where tensor_from_bytes reads it: BYTES, whose elements are checked one by one, and BF16
    dtype: np.dtype | None
    start: int  # where its bytes lie in the binary part of the body
    end: int
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True, eq=False)  # one object per layout: known by identity
class _DecodePlan:
    """What one JSON header decodes to, less the tensors: enough to read the binary part of any
    body that carries the same header."""

    inputs: tuple[_InputPlan, ...]
    binary_size: int
    outputs: tuple[tuple[str, int, dict[str, Any]], ...] | None
    parameters: dict[str, Any]
    binary_choice: dict[str, bool]
    default_binary: bool

    @classmethod
    def of(
        cls, request: InferenceRequest, binary_choice: dict[str, bool], default_binary: bool
    ) -> _DecodePlan:
        # Copies throughout: the request decoded first is the caller's, to change as it likes.
        inputs, offset = [], 0
        for tensor in request.inputs:
            assert tensor.data is not None
            size = tensor.parameters["binary_data_size"]
            dtype = FIXED_SIZE_DTYPES.get(tensor.datatype)
            end = offset + size
            parameters = dict(tensor.parameters)
            inputs.append(
                _InputPlan(tensor.name, tensor.datatype, tensor.shape, dtype, offset, end, parameters)
            )
            offset = end
        outputs = None
        if request.outputs is not None:
            outputs = tuple((o.name, o.class_count, dict(o.parameters)) for o in request.outputs)
        return cls(
            tuple(inputs), offset, outputs, dict(request.parameters), dict(binary_choice), default_binary
        )

    def request(self, model_name: str, model_version: str, binary: memoryview) -> InferenceRequest | None:
        """The request a body with this header and ``binary`` after it carries; None if the binary
        part is not the size the header announces (the full decoding says what is wrong)."""
        if len(binary) != self.binary_size:
            return None
        inputs = []
        for spec in self.inputs:
            chunk = binary[spec.start : spec.end]
            if spec.dtype is None:
                data = tensor_from_bytes(chunk, spec.datatype, spec.shape, spec.name, model_name)
            else:
                data = np.frombuffer(chunk, spec.dtype).reshape(spec.shape)
            inputs.append(InputTensor(spec.name, spec.datatype, spec.shape, data, dict(spec.parameters)))
        outputs = None
        if self.outputs is not None:
            outputs = [RequestedOutput(name, count, dict(p)) for name, count, p in self.outputs]
        return InferenceRequest(
            model_name, model_version, "", inputs, outputs, dict(self.parameters), layout=self
        )


class RequestDecoder:
    """``decode_request`` that remembers the JSON headers it has decoded.

    A client sends the same JSON header with every request (perf_analyzer; tritonclient in a loop):
    the same inputs, shapes and outputs, the tensors in binary after it. Parsing and checking that
    header is most of the work of decoding, so a header seen before is looked up instead, and only
    the tensors are read. Headers that carry something of their own request (an 'id', a sequence,
    tensors as JSON data or in shared memory) are not remembered: they rarely come twice.

    What it remembers is bounded in bytes (``--http-infer-header-cache-size``): each entry counts
    twice its header's length (the key, and the strings parsed out of it), the oldest go first, and a
    header over a sixteenth of the bound is never kept (a client sending large parameters would
    otherwise fill it with a few requests).
    """

    ENTRY_OVERHEAD = 512  # what an entry costs beyond its header's text, roughly

    def __init__(self, max_bytes: int = DEFAULT_HEADER_CACHE_BYTES) -> None:
        self.max_bytes = max(0, max_bytes)
        self._plans: dict[bytes, _DecodePlan] = {}
        self._held = 0

    @property
    def remembered(self) -> int:
        """How many headers it knows."""
        return len(self._plans)

    @property
    def held_bytes(self) -> int:
        """What the remembered headers count for against ``max_bytes``."""
        return self._held

    def decode(
        self, model_name: str, model_version: str, body: bytes, header_length: int | None
    ) -> tuple[InferenceRequest, dict[str, bool], bool]:
        """As ``decode_request``. The request is the caller's; the binary choice is shared by every
        request of its header, to be read only."""
        if header_length is None or not 0 < header_length <= len(body):
            return decode_request(model_name, model_version, body, header_length)
        header = body[:header_length]
        return self._decode_planned(model_name, model_version, header, memoryview(body)[header_length:], body)

    def decode_split(
        self, model_name: str, model_version: str, header: bytes, binary: bytes
    ) -> tuple[InferenceRequest, dict[str, bool], bool]:
        """As ``decode`` for the body ``header + binary`` whose JSON header is ``header``, without
        joining the two when the header is one it remembers."""
        if not header:
            return self.decode(model_name, model_version, binary, 0)
        return self._decode_planned(model_name, model_version, header, memoryview(binary), None)

    def _decode_planned(
        self, model_name: str, model_version: str, header: bytes, binary: memoryview, body: bytes | None
    ) -> tuple[InferenceRequest, dict[str, bool], bool]:
        """From the remembered plan of ``header`` when there is one and the binary part fits it; else
        decoded in full (``body``: header and binary whole, joined here if None) and remembered."""
        plan = self._plans.get(header)
        if plan is not None:
            request = plan.request(model_name, model_version, binary)
            if request is not None:
                return request, plan.binary_choice, plan.default_binary
        if body is None:
            body = header + binary
        request, binary_choice, default_binary = decode_request(model_name, model_version, body, len(header))
        if plan is None and _plannable(request):
            self._remember(header, _DecodePlan.of(request, binary_choice, default_binary))
        return request, binary_choice, default_binary

    def _remember(self, header: bytes, plan: _DecodePlan) -> None:
        cost = self._cost(header)
        if cost * 16 > self.max_bytes:
            return
        plans = self._plans
        while plans and self._held + cost > self.max_bytes:
            oldest = next(iter(plans))
            del plans[oldest]
            self._held -= self._cost(oldest)
        plans[header] = plan
        self._held += cost

    def _cost(self, header: bytes) -> int:
        return 2 * len(header) + self.ENTRY_OVERHEAD


def _plannable(request: InferenceRequest) -> bool:
    if request.id or "sequence_id" in request.parameters:
        return False
    return all(
        tensor.data is not None and "binary_data_size" in tensor.parameters for tensor in request.inputs
    )


def parse_json_object(body: bytes | memoryview) -> dict[str, Any]:
    """A request body that must be one JSON object; unparsable JSON is the client's mistake (400)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(f"failed to parse the request JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument("the request JSON must be an object")
    return value


def _object(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"'{what}' must be a JSON object")
    return value


def _decode_input(
    raw: Any, binary: memoryview, offset: int, model_name: str, request_id: str
) -> tuple[InputTensor, int]:
    if not isinstance(raw, dict):
        raise InvalidArgument("each input must be a JSON object")
    name = raw.get("name")
    if not isinstance(name, str):
        raise InvalidArgument("an input has no 'name'")
    parameters = _object(raw.get("parameters"), f"input '{name}' parameters")
    # Where its data is, said in exactly one way: checked first, before the datatype, as Triton does.
    if ("data" in raw) + ("binary_data_size" in parameters) + ("shared_memory_region" in parameters) != 1:
        raise InvalidInput(_carriers_message(raw, parameters))
    datatype = raw.get("datatype")
    if not isinstance(datatype, str):
        raise InvalidInput(f"input '{name}' has no 'datatype'")
    if datatype not in WIRE_DATATYPES:
        raise InvalidInput(f"invalid datatype for input {name}")  # Triton's words, over HTTP
    shape_value = raw.get("shape")
    if type(shape_value) is not list or not _all_sizes(shape_value):
        raise InvalidInput(f"input '{name}': 'shape' must be an array of non-negative integers")
    shape = tuple(shape_value)
    check_shape(name, shape)
    if "binary_data_size" in parameters:  # null included: it is not a size (was a 500 from the cache)
        size = parameters["binary_data_size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidInput(f"input '{name}': Unable to parse 'binary_data_size'")
        end = offset + size
        if end > len(binary):
            raise InvalidInput(  # Triton's words, then what was declared
                f"unexpected size for input '{name}', expecting {end - len(binary)} additional bytes for "
                f"model '{model_name}' (binary_data_size is {size} but only {len(binary) - offset} bytes of "
                "binary data remain in the body: a truncated request?)"
            )
        data = tensor_from_bytes(binary[offset:end], datatype, shape, name, model_name, request_id)
        return InputTensor(name, datatype, shape, data, parameters), end
    if "shared_memory_region" in parameters:
        return InputTensor(name, datatype, shape, None, parameters), offset  # the core reads the region
    return InputTensor(
        name, datatype, shape, json_input_data(name, datatype, shape, raw["data"]), parameters
    ), offset


def _carriers_message(raw: dict[str, Any], parameters: dict[str, Any]) -> str:
    """Triton's words for an input that does not say where its data is in exactly one way."""
    carriers = ["data"] if "data" in raw else []
    carriers += [key for key in ("binary_data_size", "shared_memory_region") if key in parameters]
    found = " set " + " ".join(f"'{key}'" for key in carriers) if carriers else " no field is set"
    return (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        f"'shared_memory_region' in 'parameters'. But{found}"
    )


def _all_sizes(values: list[Any]) -> bool:
    """Every item an int >= 0 (not a bool: ``type`` is exact)."""
    for value in values:  # noqa: SIM110 (a loop, not all() over a generator: it runs on every input)
        if type(value) is not int or value < 0:
            return False
    return True


def encode_response(
    response: InferenceResponse, binary_choice: dict[str, bool], default_binary: bool
) -> tuple[bytes | SplitBody, int | None]:
    """The response body and, when binary tensors follow the JSON, the JSON's length."""
    cached = _binary_response(response, binary_choice, default_binary)
    if cached is not None:
        return cached
    outputs_json: list[dict[str, Any]] = []
    chunks: list[bytes | memoryview] = []
    size = 0  # of the binary tensors
    for output in response.outputs:
        entry: dict[str, Any] = {
            "name": output.name,
            "datatype": output.datatype,
            "shape": list(output.shape),
        }
        if output.data is None:  # written into the client's shared memory region: no data here
            if output.parameters:
                entry["parameters"] = output.parameters
        elif binary_choice.get(output.name, default_binary):
            raw = tensor_to_bytes(output.data, output.datatype)
            entry["parameters"] = {**output.parameters, "binary_data_size": len(raw)}
            chunks.append(raw)
            size += len(raw)
        else:
            if output.parameters:
                entry["parameters"] = output.parameters
            entry["data"] = json_output_data(output.data, output.datatype)
        outputs_json.append(entry)
    document: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        document["id"] = response.id
    if response.parameters:
        document["parameters"] = response.parameters
    document["outputs"] = outputs_json
    header = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return header, None
    return _body(header, chunks, size), len(header)


# JSON headers of all-binary responses without id or parameters, by what they hold (model, version,
# each output's name, datatype, shape and byte count): the same bytes for every request of a model.
_binary_headers: dict[tuple[object, ...], bytes] = {}
_CACHED_HEADERS = 256  # a full cache starts over


def _binary_response(
    response: InferenceResponse, binary_choice: dict[str, bool], default_binary: bool
) -> tuple[bytes | SplitBody, int] | None:
    """``encode_response`` for the common case, its JSON header from ``_binary_headers``; None when
    the response is not of that case."""
    if response.id or response.parameters or not response.outputs:
        return None
    chunks: list[bytes | memoryview] = []
    key: list[object] = [response.model_name, response.model_version]
    size = 0
    for output in response.outputs:
        if output.data is None or output.parameters or not binary_choice.get(output.name, default_binary):
            return None
        raw = tensor_to_bytes(output.data, output.datatype)
        chunks.append(raw)
        length = len(raw)
        size += length
        key += (output.name, output.datatype, tuple(output.shape), length)
    frozen = tuple(key)
    header = _binary_headers.get(frozen)
    if header is None:
        document = {
            "model_name": response.model_name,
            "model_version": response.model_version,
            "outputs": [
                {
                    "name": output.name,
                    "datatype": output.datatype,
                    "shape": list(output.shape),
                    "parameters": {"binary_data_size": len(raw)},
                }
                for output, raw in zip(response.outputs, chunks, strict=True)
            ],
        }
        header = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
        if len(_binary_headers) >= _CACHED_HEADERS:
            _binary_headers.clear()
        _binary_headers[frozen] = header
    return _body(header, chunks, size), len(header)


def _body(header: bytes, chunks: list[bytes | memoryview], size: int) -> bytes | SplitBody:
    """The JSON header and the binary tensors (``size`` bytes) after it: one bytes object, or left in
    pieces when the tensors are large (the outputs' own buffers, written as they are)."""
    if size > SPLIT_BODY_BYTES:
        return SplitBody((header, *chunks), len(header) + size)
    return b"".join([header, *chunks])

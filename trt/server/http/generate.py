"""Triton's generate extension (HTTP only): ``/generate`` and ``/generate_stream`` for text models.

A request is one flat JSON object. Its keys that name an input of the model become that input
(the type from the model's config; a JSON scalar is shape [1], a list keeps its nesting; a model
that batches gets a batch of one), ``parameters`` and every other key become request parameters.
A response is one flat JSON object too: ``model_name``, ``model_version``, ``id`` when the request
had one, and each output by name (a single element as a scalar, more as a list).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import orjson

from trt.protos import model_config_pb2
from trt.server.core.datatypes import BF16_DTYPE, config_to_wire, wire_to_numpy
from trt.server.core.errors import InvalidArgument, InvalidInput, quoted
from trt.server.core.types import InferenceRequest, InferenceResponse, InputTensor
from trt.server.http.codec import parse_json_object

_PARAMETER_TYPES = (str, int, float, bool)


def decode_generate_request(
    model_name: str, model_version: str, body: bytes, config: model_config_pb2.ModelConfig
) -> InferenceRequest:
    if not body.strip():
        raise InvalidArgument("the generate request body is empty; expected a JSON object")
    document = parse_json_object(body)
    request_id = document.pop("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument("'id' must be a string")
    parameters = document.pop("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidArgument("'parameters' must be a JSON object")
    inputs = []
    for spec in config.input:
        if spec.name in document:
            inputs.append(_input(spec, document.pop(spec.name), config.max_batch_size > 0))
    for key, value in document.items():  # neither an input nor 'parameters': a parameter, as Triton
        parameters[key] = value
    for key, value in parameters.items():
        if not isinstance(value, _PARAMETER_TYPES):
            raise InvalidArgument(
                f"parameter '{key}' must be a string, number or boolean, not {type(value).__name__}"
            )
    return InferenceRequest(model_name, model_version, request_id, inputs, None, parameters)


@functools.cache
def _wire_type(data_type: int) -> str:
    return config_to_wire(model_config_pb2.DataType.Name(data_type))


def _input(spec: model_config_pb2.ModelInput, value: Any, batched: bool) -> InputTensor:
    datatype = _wire_type(spec.data_type)
    if datatype == "BF16":
        raise InvalidInput(f"input '{spec.name}': BF16 cannot be given in a generate request")
    try:
        if datatype == "BYTES":
            array = _bytes_array(spec.name, value)
        else:
            array = np.asarray(value, dtype=wire_to_numpy(datatype))
    except (ValueError, TypeError, OverflowError):
        raise InvalidInput(f"input '{spec.name}': {quoted(value)} is not {datatype} data") from None
    if array.ndim == 0:
        array = array.reshape(1)
    if batched:
        array = array.reshape(1, *array.shape)
    return InputTensor(spec.name, datatype, tuple(array.shape), array)


def _bytes_array(name: str, value: Any) -> np.ndarray:
    if isinstance(value, str):  # one text, the usual case: 1 us, where numpy's way took 5
        array = np.empty(1, dtype=np.object_)
        array[0] = value.encode("utf-8")
        return array
    nested = np.asarray(value, dtype=np.object_)
    flat = nested.reshape(-1)
    encoded = np.empty(flat.size, dtype=np.object_)
    for index, item in enumerate(flat):
        if not isinstance(item, str):
            raise InvalidInput(f"input '{name}': expected text, got {type(item).__name__}")
        encoded[index] = item.encode("utf-8")
    return encoded.reshape(nested.shape)


def encode_generate_response(response: InferenceResponse) -> bytes:
    document: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        document["id"] = response.id
    for output in response.outputs:
        if output.data is not None:
            document[output.name] = _json_value(output.data)
    return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)


def _json_value(data: np.ndarray) -> Any:
    if data.dtype == BF16_DTYPE:  # as Triton's generate endpoint, which writes outputs as /infer's JSON does
        raise InvalidArgument(
            "sending BF16 data via JSON is not supported. Please use the binary data format for output"
        )
    flat = data.reshape(-1)
    values = [
        item.decode("utf-8", "replace") if isinstance(item, bytes | bytearray) else item
        for item in flat.tolist()
    ]
    return values[0] if len(values) == 1 else values


def encode_generate_error(message: str) -> bytes:
    return orjson.dumps({"error": message})

"""A JSON inference body re-encoded in the worker as Triton's binary extension carries it.

Tensors sent as JSON ``data`` are the costliest part of such a request to read: every number is text
to parse and a Python object before it is an array (a 77 MB body of 4 M floats is 0.4 s of one core,
with the GIL held). Forwarded whole, that work falls on the core's one event loop whatever the number
of workers. So the worker decodes the body with the same decoder the core uses and, when it decodes
cleanly, sends the core a short JSON header (each such input given a ``binary_data_size``) and the
tensors' bytes: the core then reads numbers it can view in place, through the layouts the binary
requests of ``layouts`` take, and a client sending the same shapes each time sends one header the core
remembers.

Nothing the core sees changes meaning: the header keeps the request's id, its parameters, each input's
name, datatype, shape and parameters, and the outputs it asks for with theirs (the binary choice of the
answer, JSON unless asked, comes from those); a tensor's bytes decode to the array the JSON decoded to.
A body the decoder refuses goes whole, so the core answers it as before, in the same words; so does
one whose header would not fit a layout, or whose tensors in binary would pass the body limit (INT64
zeros, two bytes each as text, are eight in binary).
"""

from __future__ import annotations

from typing import Any

import orjson

from trt.server.core.datatypes import tensor_to_bytes
from trt.server.core.types import InferenceRequest
from trt.server.http.codec import decode_request


def binary_parts(
    model_name: str, model_version: str, body: bytes, max_header: int, max_size: int
) -> tuple[bytes, bytes] | None:
    """The JSON body ``body`` of an inference request as (JSON header, tensors' bytes), or None when it
    should go whole: it does not decode, carries no tensor as JSON data, or its parts would be too big."""
    try:
        request, _, _ = decode_request(model_name, model_version, body, None)
    except Exception:  # the core decodes it again and answers the error in its words
        return None
    inputs: list[dict[str, Any]] = []
    tensors: list[bytes | memoryview] = []
    size = 0
    for tensor in request.inputs:
        parameters = dict(tensor.parameters)
        if tensor.data is not None:  # JSON data (a body without a binary part has no other kind)
            raw = tensor_to_bytes(tensor.data, tensor.datatype)
            parameters["binary_data_size"] = len(raw)
            tensors.append(raw)
            size += len(raw)
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": tensor.shape}
        if parameters:
            entry["parameters"] = parameters
        inputs.append(entry)
    if not tensors or size > max_size:
        return None
    header = orjson.dumps(_document(request, inputs))
    if len(header) > max_header or len(header) + size > max_size:
        return None
    return header, b"".join(tensors)


def _document(request: InferenceRequest, inputs: list[dict[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    if request.id:
        document["id"] = request.id
    if request.parameters:
        document["parameters"] = request.parameters
    document["inputs"] = inputs
    if request.outputs is not None:  # an empty list is not the same as none given
        document["outputs"] = [
            {"name": output.name, "parameters": output.parameters}
            if output.parameters
            else {"name": output.name}
            for output in request.outputs
        ]
    return document

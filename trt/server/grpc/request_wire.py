"""Small ``ModelInferRequest``s decoded from a cached template of everything but their tensors' bytes.

A client sends the same request over and over, its tensors' values aside: same model, inputs (names,
datatypes, shapes), requested outputs and parameters. Protobuf writes ``raw_input_contents`` (field
7, the highest) last, so the message is a prefix holding every other field followed by the raw
inputs. When the bytes after the prefix are exactly the raw inputs protobuf parsed (checked byte for
byte), the prefix alone decides everything ``decode_infer_request`` derives from the message but the
tensors' data; what it derived the first time is kept under the prefix's bytes (a bounded cache) and
each later request only views its raw inputs as arrays. Requests with an id or a sequence id (which
change from one request to the next) are not kept, nor any request that is not all raw inputs; they,
and every request the first time, are decoded by ``decode_infer_request``.

A request whose first bytes are a kept prefix is not parsed by protobuf at all (``lookup``): protobuf
reads a message front to back, so bytes that equal a prefix read as that prefix read, and if what
follows is nothing but raw inputs (read here, tag, length and bytes, each checked against the
message's end), the message is that prefix's request with those inputs. Only the prefix lengths of the
last few kept prefixes are tried, so a client that sends many kinds of request costs at most that
many lookups before the ordinary path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trt.protos import grpc_service_pb2 as pb
from trt.server.core.datatypes import FIXED_SIZE_DTYPES, element_count, tensor_from_bytes
from trt.server.core.errors import InvalidArgument
from trt.server.core.types import InferenceRequest, InputTensor, RequestedOutput
from trt.server.grpc.varints import read_varint, varint

_RAW_TAG = bytes([pb.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number << 3 | 2])
_RAW_TAG_BYTE = _RAW_TAG[0]
_CACHED_TEMPLATES = 256  # distinct request prefixes kept; a full cache starts over
_LENGTHS_TRIED = 4  # prefix lengths ``lookup`` tries, the most recently seen first
_MAX_PREFIX = 4096  # bytes of a kept prefix (a real one is about a hundred): the cache stays under 1 MiB


@dataclass(frozen=True, slots=True)
class _Input:
    name: str
    datatype: str
    shape: tuple[int, ...]
    dtype: np.dtype | None  # None for BYTES (its elements are parsed)
    size: int  # bytes the raw input must have (fixed-size types)
    parameters: dict[str, object]


@dataclass(frozen=True, slots=True, eq=False)  # one object per layout: known by identity
class Template:
    """What a request's prefix decodes to, its tensors' data aside."""

    model_name: str
    model_version: str
    inputs: tuple[_Input, ...]
    outputs: tuple[RequestedOutput, ...] | None
    parameters: dict[str, object]

    def request(self, raw: list[bytes] | list[bytes | memoryview]) -> InferenceRequest:
        inputs = []
        for spec, data in zip(self.inputs, raw, strict=True):
            if spec.dtype is not None and len(data) == spec.size:
                array = np.frombuffer(data, spec.dtype).reshape(spec.shape)
            else:  # BYTES, or a size that is wrong: the general path (and its error)
                array = tensor_from_bytes(data, spec.datatype, spec.shape, spec.name, self.model_name)
            inputs.append(InputTensor(spec.name, spec.datatype, spec.shape, array, dict(spec.parameters)))
        outputs = None
        if self.outputs is not None:
            outputs = [RequestedOutput(o.name, o.class_count, dict(o.parameters)) for o in self.outputs]
        return InferenceRequest(
            self.model_name, self.model_version, "", inputs, outputs, dict(self.parameters), layout=self
        )


_templates: dict[bytes, Template] = {}
_lengths: list[int] = []  # the lengths of the prefixes last kept or found, most recent first


def lookup(data: bytes | memoryview) -> InferenceRequest | None:
    """The request a message whose first bytes are a kept prefix carries, its raw inputs viewed in
    ``data``; None when no kept prefix starts it or the rest is not just its raw inputs."""
    for length in _lengths:
        template = _templates.get(bytes(data[:length]))
        if template is not None:
            raw = _raw_inputs(data, length, len(template.inputs))
            if raw is not None:
                return template.request(raw)
    return None


def _raw_inputs(data: bytes | memoryview, at: int, count: int) -> list[bytes | memoryview] | None:
    """``count`` raw inputs (field 7, length-delimited) from ``at`` to the end of ``data``, else None."""
    view = memoryview(data)
    end = len(view)
    raw: list[bytes | memoryview] = []
    while at < end:
        if view[at] != _RAW_TAG_BYTE or len(raw) == count:
            return None
        try:
            size, at = read_varint(view, at + 1)
        except InvalidArgument:
            return None  # protobuf's parser says what is wrong
        if size > end - at:
            return None
        raw.append(view[at : at + size])
        at += size
    return raw if len(raw) == count else None


def _seen(length: int) -> None:
    if _lengths and _lengths[0] == length:
        return
    if length in _lengths:
        _lengths.remove(length)
    _lengths.insert(0, length)
    del _lengths[_LENGTHS_TRIED:]


def prefix_of(data: bytes | memoryview, raw: list[bytes]) -> bytes | None:
    """The message's bytes before its raw inputs, when it ends with exactly those (in order)."""
    suffix = b"".join([piece for item in raw for piece in (_RAW_TAG, varint(len(item)), item)])
    cut = len(data) - len(suffix)
    if cut < 0 or cut > _MAX_PREFIX or data[cut:] != suffix:
        return None
    return bytes(data[:cut])


def cached(prefix: bytes) -> Template | None:
    template = _templates.get(prefix)
    if template is not None:
        _seen(len(prefix))
    return template


def remember(prefix: bytes, raw_count: int, decoded: InferenceRequest) -> None:
    """Keep what ``decoded`` (a message with ``raw_count`` raw inputs, freshly decoded) holds but its
    data, if it is a request of the kind kept: no id, no sequence id, every input raw."""
    if decoded.id or "sequence_id" in decoded.parameters:
        return
    if raw_count != len(decoded.inputs):
        return  # an input in shared memory or in typed contents
    inputs = []
    for tensor in decoded.inputs:
        dtype = FIXED_SIZE_DTYPES.get(tensor.datatype)
        size = 0 if dtype is None else element_count(tensor.shape) * dtype.itemsize
        inputs.append(
            _Input(tensor.name, tensor.datatype, tensor.shape, dtype, size, dict(tensor.parameters))
        )
    outputs = None
    if decoded.outputs is not None:
        outputs = tuple(RequestedOutput(o.name, o.class_count, dict(o.parameters)) for o in decoded.outputs)
    if len(_templates) >= _CACHED_TEMPLATES:
        _templates.clear()
    _templates[prefix] = Template(
        decoded.model_name, decoded.model_version, tuple(inputs), outputs, dict(decoded.parameters)
    )
    _seen(len(prefix))

"""Protocol-neutral data that flows between transports and the core.

Tensors are numpy arrays; BYTES tensors are object arrays of ``bytes``. Transports build
``InferenceRequest`` from the wire and turn ``InferenceResponse`` back into it; the core never sees
JSON, protobuf or sockets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from trt.server.core.extensions.tracing import Trace

# Request parameters a client may set but that are not forwarded to the model as custom parameters.
RESERVED_PARAMETERS = frozenset(
    {
        "sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers",
        "binary_data_output", "triton_enable_empty_final_response",
    }
)  # fmt: skip
# Parameters in Triton's reserved "triton_" namespace that its own clients send (perf_analyzer sets the
# first on every gRPC request). Any other "triton_" key from a client is refused, as Triton does.
TRITON_CONTROL_PARAMETERS = frozenset({"triton_enable_empty_final_response"})


@dataclass(slots=True)
class InputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray | None  # None until resolved from a shared memory region (see parameters)
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RequestedOutput:
    name: str
    # Classification extension: return the top ``class_count`` entries as BYTES "value:index[:label]".
    class_count: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InferenceRequest:
    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: list[InputTensor] = field(default_factory=list)
    # None means "every output of the model".
    outputs: list[RequestedOutput] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    trace: Trace | None = None  # set by the transport when this request is one it traces
    # Stands for the request's layout (its inputs' names, datatypes and shapes, the outputs it asks
    # for and their classification counts): the same object for every request laid out alike, set by
    # a decoder that built the request from one it remembered. A model checks a layout once and
    # remembers the result (``ModelVersion``). None: the request is checked on its own.
    layout: object | None = None
    # HTTP's raw binary request: the bytes of the model's one input, sent without a header. The core
    # names and shapes that input from the config of the version it picks (``ModelSignature.raw_input``).
    raw_input: bytes | None = None
    # An ensemble's step names the namespace the ensemble came from: the model of that name there is
    # preferred (``server.core.models.table``). Clients name no namespace.
    model_namespace: str = ""


@dataclass(slots=True)
class OutputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray | None  # None once written into a client's shared memory region
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InferenceResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[OutputTensor] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TensorMetadata:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RepositoryIndexEntry:
    """One row of the repository index; version/state/reason are empty for never-loaded models."""

    name: str
    version: str = ""
    state: str = ""
    reason: str = ""
    # The repository it came from, with --model-namespacing ("" without). Not in Triton's index
    # messages, which have no such field; shown where trt prints the index itself.
    namespace: str = ""


@dataclass(slots=True)
class StreamItem:
    """One answer on a stream: a response, an error, or (both None) just the end of the request."""

    response: InferenceResponse | None
    error: Exception | None
    final: bool

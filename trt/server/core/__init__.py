"""The serving core: repository, model lifecycle, scheduling, backends' interface and the protocol
extensions, behind one face, ``InferenceServer``.

Nothing in here knows about HTTP, gRPC or any other transport. Transports translate bytes into the
types below, call ``InferenceServer`` and map its errors (each carries its HTTP status and gRPC code)
to their own status codes. Inside, ``models/`` loads and serves model versions, ``scheduling/`` takes
requests to instances, ``extensions/`` holds tracing, statistics, metrics, logging, shared memory and
classification, and ``backends/`` the interface backends implement and the registry that finds them.
"""

from __future__ import annotations

from trt.server.core.errors import (
    AlreadyExists,
    BackendUnavailable,
    DecoupledModelNeedsStream,
    InvalidArgument,
    InvalidInput,
    ModelConfigError,
    ModelLoadError,
    ModelNotFound,
    ModelNotReady,
    NotFound,
    ServerError,
    Unavailable,
    Unsupported,
)
from trt.server.core.options import CoreOptions, ModelControlMode
from trt.server.core.server import InferenceServer, StartupError
from trt.server.core.types import (
    InferenceRequest,
    InferenceResponse,
    InputTensor,
    ModelMetadata,
    OutputTensor,
    RepositoryIndexEntry,
    RequestedOutput,
    ServerMetadata,
    StreamItem,
    TensorMetadata,
)

__all__ = [
    "AlreadyExists",
    "BackendUnavailable",
    "CoreOptions",
    "DecoupledModelNeedsStream",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceServer",
    "InputTensor",
    "InvalidArgument",
    "InvalidInput",
    "ModelConfigError",
    "ModelControlMode",
    "ModelLoadError",
    "ModelMetadata",
    "ModelNotFound",
    "ModelNotReady",
    "NotFound",
    "OutputTensor",
    "RepositoryIndexEntry",
    "RequestedOutput",
    "ServerError",
    "ServerMetadata",
    "StartupError",
    "StreamItem",
    "TensorMetadata",
    "Unavailable",
    "Unsupported",
]

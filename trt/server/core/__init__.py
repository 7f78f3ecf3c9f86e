"""The serving core: repository, model lifecycle, scheduling, backends' interface and the protocol
extensions, behind one face, ``InferenceServer``.

Nothing in here knows about HTTP, gRPC or any other transport. Transports translate bytes into the
types below, call ``InferenceServer`` and map its errors (each carries its HTTP status and gRPC code)
to their own status codes. Inside, ``models/`` loads and serves model versions, ``scheduling/`` takes
requests to instances, ``extensions/`` holds tracing, statistics, metrics, logging, shared memory and
classification, and ``backends/`` the interface backends implement and the registry that finds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trt.lazy_exports import lazy_exports

if TYPE_CHECKING:
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

__getattr__ = lazy_exports(
    __name__,
    {
        "AlreadyExists": "trt.server.core.errors",
        "BackendUnavailable": "trt.server.core.errors",
        "CoreOptions": "trt.server.core.options",
        "DecoupledModelNeedsStream": "trt.server.core.errors",
        "InferenceRequest": "trt.server.core.types",
        "InferenceResponse": "trt.server.core.types",
        "InferenceServer": "trt.server.core.server",
        "InputTensor": "trt.server.core.types",
        "InvalidArgument": "trt.server.core.errors",
        "InvalidInput": "trt.server.core.errors",
        "ModelConfigError": "trt.server.core.errors",
        "ModelControlMode": "trt.server.core.options",
        "ModelLoadError": "trt.server.core.errors",
        "ModelMetadata": "trt.server.core.types",
        "ModelNotFound": "trt.server.core.errors",
        "ModelNotReady": "trt.server.core.errors",
        "NotFound": "trt.server.core.errors",
        "OutputTensor": "trt.server.core.types",
        "RepositoryIndexEntry": "trt.server.core.types",
        "RequestedOutput": "trt.server.core.types",
        "ServerError": "trt.server.core.errors",
        "ServerMetadata": "trt.server.core.types",
        "StartupError": "trt.server.core.server",
        "StreamItem": "trt.server.core.types",
        "TensorMetadata": "trt.server.core.types",
        "Unavailable": "trt.server.core.errors",
        "Unsupported": "trt.server.core.errors",
    },
)

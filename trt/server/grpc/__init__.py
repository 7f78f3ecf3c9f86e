"""The gRPC endpoint: Triton's ``inference.GRPCInferenceService`` and the gRPC health service, on trt's
own HTTP/2 server (``h2/``) on the event loop, beside the HTTP endpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trt.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from trt.server.grpc.errors import GrpcBindError
    from trt.server.grpc.server import start_grpc_server
    from trt.server.grpc.service import GrpcInferenceService, HealthService

__all__ = [
    "GrpcBindError",
    "GrpcInferenceService",
    "HealthService",
    "start_grpc_server",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "GrpcBindError": "trt.server.grpc.errors",
        "GrpcInferenceService": "trt.server.grpc.service",
        "HealthService": "trt.server.grpc.service",
        "start_grpc_server": "trt.server.grpc.server",
    },
)

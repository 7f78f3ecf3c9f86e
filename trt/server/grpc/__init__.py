"""The gRPC endpoint: Triton's ``inference.GRPCInferenceService`` and the gRPC health service, on trt's
own HTTP/2 server (``h2/``) on the event loop, beside the HTTP endpoint."""

from __future__ import annotations

from trt.server.grpc.errors import GrpcBindError
from trt.server.grpc.server import start_grpc_server
from trt.server.grpc.service import GrpcInferenceService, HealthService

__all__ = ["GrpcBindError", "GrpcInferenceService", "HealthService", "start_grpc_server"]

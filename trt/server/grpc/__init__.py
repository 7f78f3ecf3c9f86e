"""The gRPC endpoint: Triton's ``inference.GRPCInferenceService`` and the gRPC health service."""

from __future__ import annotations

from trt.server.grpc.errors import GrpcBindError
from trt.server.grpc.service import GrpcInferenceService, HealthService, start_grpc_server

__all__ = ["GrpcBindError", "GrpcInferenceService", "HealthService", "start_grpc_server"]

"""Control calls over gRPC (``inference.GRPCInferenceService``, the protos in ``protos/``)."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format

from trt.perf import model_info
from trt.perf.errors import ModelNotFound, ServerError
from trt.perf.model_info import ModelInfo
from trt.perf.server_stats import StatsSnapshot, snapshot_from_json
from trt.protos import grpc_service_pb2 as pb
from trt.protos import grpc_service_pb2_grpc as pb_grpc


def _as_dict(message: Any) -> dict[str, Any]:
    as_dict: dict[str, Any] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return as_dict


class GrpcControl:
    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.target = f"{host}:{port}"
        self.timeout = timeout
        self._channel = grpc.insecure_channel(self.target)
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)

    def _unreachable(self, error: grpc.RpcError) -> ServerError:
        return ServerError(
            f"cannot reach the server at {self.target} over gRPC ({error.code().name}: {error.details()}); "
            "check -u and that the server is up"
        )

    def server_extensions(self) -> list[str]:
        try:
            reply = self._stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            raise self._unreachable(error) from error
        return list(reply.extensions)

    def model_info(self, model: str, version: str) -> ModelInfo:
        try:
            metadata = self._stub.ModelMetadata(
                pb.ModelMetadataRequest(name=model, version=version), timeout=self.timeout
            )
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                raise self._unreachable(error) from error
            raise ModelNotFound(
                f"model '{model}' is not available on {self.target}: {error.details()}"
            ) from error
        try:
            reply = self._stub.ModelConfig(
                pb.ModelConfigRequest(name=model, version=version), timeout=self.timeout
            )
        except grpc.RpcError:
            return model_info.from_metadata(_as_dict(metadata), version)
        return model_info.from_config(_as_dict(reply.config), version)

    def statistics(self, model: str, version: str) -> StatsSnapshot | None:
        try:
            reply = self._stub.ModelStatistics(
                pb.ModelStatisticsRequest(name=model, version=version), timeout=self.timeout
            )
        except grpc.RpcError:
            return None
        total = StatsSnapshot()
        for entry in reply.model_stats:
            if entry.name == model:
                total = total + snapshot_from_json(_as_dict(entry))
        return total

    def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        request = pb.SystemSharedMemoryRegisterRequest(name=name, key=key, offset=0, byte_size=byte_size)
        try:
            self._stub.SystemSharedMemoryRegister(request, timeout=self.timeout)
        except grpc.RpcError as error:
            raise ServerError(
                f"the server refused shared-memory region '{name}': {error.details()}"
            ) from error

    def unregister_system_shm(self, name: str) -> None:
        try:
            self._stub.SystemSharedMemoryUnregister(
                pb.SystemSharedMemoryUnregisterRequest(name=name), timeout=self.timeout
            )
        except grpc.RpcError:
            pass

    def system_shm_regions(self) -> dict[str, str]:
        try:
            request = pb.SystemSharedMemoryStatusRequest()
            reply = self._stub.SystemSharedMemoryStatus(request, timeout=self.timeout)
        except grpc.RpcError:
            return {}
        return {name: region.key for name, region in reply.regions.items()}

    def register_cuda_shm(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        request = pb.CudaSharedMemoryRegisterRequest(
            name=name, raw_handle=raw_handle, device_id=device_id, byte_size=byte_size
        )
        try:
            self._stub.CudaSharedMemoryRegister(request, timeout=self.timeout)
        except grpc.RpcError as error:
            raise ServerError(
                f"the server refused CUDA shared-memory region '{name}': {error.details()}"
            ) from error

    def unregister_cuda_shm(self, name: str) -> None:
        try:
            self._stub.CudaSharedMemoryUnregister(
                pb.CudaSharedMemoryUnregisterRequest(name=name), timeout=self.timeout
            )
        except grpc.RpcError:
            pass

    def cuda_shm_regions(self) -> list[str]:
        try:
            request = pb.CudaSharedMemoryStatusRequest()
            reply = self._stub.CudaSharedMemoryStatus(request, timeout=self.timeout)
        except grpc.RpcError:
            return []
        return list(reply.regions)

    def close(self) -> None:
        self._channel.close()

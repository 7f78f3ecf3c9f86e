"""Control calls (not the measured load): server and model metadata, model config, statistics and
shared-memory registration, over whichever protocol the load uses."""

from __future__ import annotations

from typing import Protocol as TypingProtocol

from trt.perf.model_info import ModelInfo
from trt.perf.options import PerfOptions, Protocol
from trt.perf.server_stats import StatsSnapshot


class ControlClient(TypingProtocol):
    def server_extensions(self) -> list[str]: ...

    def model_info(self, model: str, version: str) -> ModelInfo: ...

    def statistics(self, model: str, version: str) -> StatsSnapshot | None: ...

    def register_system_shm(self, name: str, key: str, byte_size: int) -> None: ...

    def unregister_system_shm(self, name: str) -> None: ...

    def system_shm_regions(self) -> dict[str, str]:
        """The system shared-memory regions registered with the server: name -> key."""
        ...

    def register_cuda_shm(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None: ...

    def unregister_cuda_shm(self, name: str) -> None: ...

    def cuda_shm_regions(self) -> list[str]:
        """The names of the CUDA shared-memory regions registered with the server."""
        ...

    def close(self) -> None: ...


def open_control(options: PerfOptions) -> ControlClient:
    host, port = options.endpoint
    if options.protocol is Protocol.GRPC:
        from trt.perf.control.grpc import GrpcControl

        return GrpcControl(host, port, options.request_timeout_s)
    from trt.perf.control.http import HttpControl

    return HttpControl(host, port, options.request_timeout_s, dict(options.http_headers))

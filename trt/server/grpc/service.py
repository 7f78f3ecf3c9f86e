"""Triton's ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` on trt's HTTP/2 server.

Every RPC translates its message to a call on ``InferenceServer`` and the result back; the core
decides everything else. A handler raises the core's errors; ``GrpcCall`` answers them with the status
their ``ServerError`` names (``server.grpc.errors``). ``ModelStreamInfer`` is ``stream_infer``'s.
"""

from __future__ import annotations

import time
from typing import Any

from trt.protos import grpc_service_pb2 as pb
from trt.protos import health_pb2
from trt.server.core.errors import InvalidArgument, Unsupported
from trt.server.core.extensions.statistics import Duration, ModelStatistics
from trt.server.core.extensions.tracing import TransportPoints
from trt.server.core.server import InferenceServer
from trt.server.grpc import codec, compression
from trt.server.grpc.app import Method, Reply, unary
from trt.server.grpc.call import GrpcCall
from trt.server.grpc.restrictions import CATEGORY_OF_RPC
from trt.server.grpc.stream_infer import StreamInfer
from trt.server.header_forwarding import HeaderForwarding

GRPC_TRACE_POINTS = TransportPoints(
    "GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "GRPC_SEND_START", "GRPC_SEND_END"
)
SERVICE = "/inference.GRPCInferenceService/"
HEALTH = "/grpc.health.v1.Health/"

# The unary RPCs of Triton's service and their request messages.
_UNARY_REQUESTS: dict[str, type[Any]] = {
    "ServerLive": pb.ServerLiveRequest,
    "ServerReady": pb.ServerReadyRequest,
    "ModelReady": pb.ModelReadyRequest,
    "ServerMetadata": pb.ServerMetadataRequest,
    "ModelMetadata": pb.ModelMetadataRequest,
    "ModelConfig": pb.ModelConfigRequest,
    "ModelStatistics": pb.ModelStatisticsRequest,
    "RepositoryIndex": pb.RepositoryIndexRequest,
    "RepositoryModelLoad": pb.RepositoryModelLoadRequest,
    "RepositoryModelUnload": pb.RepositoryModelUnloadRequest,
    "SystemSharedMemoryStatus": pb.SystemSharedMemoryStatusRequest,
    "SystemSharedMemoryRegister": pb.SystemSharedMemoryRegisterRequest,
    "SystemSharedMemoryUnregister": pb.SystemSharedMemoryUnregisterRequest,
    "CudaSharedMemoryStatus": pb.CudaSharedMemoryStatusRequest,
    "CudaSharedMemoryRegister": pb.CudaSharedMemoryRegisterRequest,
    "CudaSharedMemoryUnregister": pb.CudaSharedMemoryUnregisterRequest,
    "TraceSetting": pb.TraceSettingRequest,
    "LogSettings": pb.LogSettingsRequest,
}


class GrpcInferenceService:
    """The KServe v2 / Triton gRPC API over one ``InferenceServer``."""

    def __init__(self, core: InferenceServer, header_forwarding: HeaderForwarding | None = None) -> None:
        self.core = core
        self.log_settings = core.log_settings
        self.header_forwarding = header_forwarding
        self.stream_infer = StreamInfer(core, header_forwarding)

    def methods(self) -> dict[str, Method]:
        """Every method of the service, by ``:path``."""
        table = {
            SERVICE + name: unary(name, CATEGORY_OF_RPC[name], request, getattr(self, name))
            for name, request in _UNARY_REQUESTS.items()
        }
        table[SERVICE + "ModelInfer"] = Method(
            "ModelInfer", CATEGORY_OF_RPC["ModelInfer"], self.ModelInfer, compressed=True
        )
        table[SERVICE + "ModelStreamInfer"] = Method(
            "ModelStreamInfer",
            CATEGORY_OF_RPC["ModelStreamInfer"],
            stream_handler=self.stream_infer.run,
            compressed=True,
        )
        return table

    # -- health and metadata ------------------------------------------------------------------

    async def ServerLive(self, request: pb.ServerLiveRequest, call: GrpcCall) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.core.is_live())

    async def ServerReady(self, request: pb.ServerReadyRequest, call: GrpcCall) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.core.is_ready())

    async def ModelReady(self, request: pb.ModelReadyRequest, call: GrpcCall) -> pb.ModelReadyResponse:
        # An unknown model is simply not ready: status OK, ready=false.
        return pb.ModelReadyResponse(ready=self.core.model_ready(request.name, request.version))

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, call: GrpcCall
    ) -> pb.ServerMetadataResponse:
        meta = self.core.metadata()
        return pb.ServerMetadataResponse(name=meta.name, version=meta.version, extensions=meta.extensions)

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, call: GrpcCall
    ) -> pb.ModelMetadataResponse:
        meta = self.core.model_metadata(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta.name,
            versions=meta.versions,
            platform=meta.platform,
            inputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.inputs],
            outputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.outputs],
        )

    async def ModelConfig(self, request: pb.ModelConfigRequest, call: GrpcCall) -> pb.ModelConfigResponse:
        return pb.ModelConfigResponse(config=self.core.model_config(request.name, request.version))

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, call: GrpcCall
    ) -> pb.ModelStatisticsResponse:
        stats = self.core.statistics(request.name, request.version)
        return pb.ModelStatisticsResponse(model_stats=[_statistics(s) for s in stats])

    # -- inference ----------------------------------------------------------------------------

    async def ModelInfer(self, data: bytes | memoryview, call: GrpcCall) -> Reply:
        """The hot path: the message's bytes in, the response's bytes (or pieces of them) out."""
        core = self.core
        if core.tracer.active:
            return await self._traced_infer(data, call)
        inference = codec.decode_infer_message(data)
        if self.header_forwarding is not None:
            self.header_forwarding.apply(inference, call.metadata)
        response = await core.infer(inference)
        parts = codec.encode_infer_parts(response)
        if len(parts) == 1:
            return parts[0]
        if call.response_encoding is not None:  # compressed whole (a large one on a thread, as it returns)
            return b"".join(parts)
        call.respond_parts(parts)
        return None

    async def _traced_infer(self, data: bytes | memoryview, call: GrpcCall) -> Reply:
        tracer = self.core.tracer
        decoding = time.perf_counter_ns()
        inference = codec.decode_infer_message(data)
        if self.header_forwarding is not None:
            self.header_forwarding.apply(inference, call.metadata)
        trace = tracer.start(inference.model_name, inference.model_version, inference.id)
        if trace is None:
            return codec.encode_infer_response(await self.core.infer(inference))
        # The read is seen from the request's headers (or, before tracing was on, its decoding) to its
        # decoding; the send, until the reply is handed to the connection.
        reply, sent = await self.core.infer_traced(
            inference,
            trace,
            GRPC_TRACE_POINTS,
            (call.opened_ns or decoding, time.perf_counter_ns()),
            codec.encode_infer_response,
        )
        # A large answer is deflated on a thread, as untraced ones are.
        call.respond(await compression.deflated_reply(reply, call.response_encoding))
        sent()
        return None

    # -- model repository ---------------------------------------------------------------------

    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, call: GrpcCall
    ) -> pb.RepositoryIndexResponse:
        row = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(
            models=[
                row(name=r.name, version=r.version, state=r.state, reason=r.reason)
                for r in self.core.repository_index(request.ready)
            ]
        )

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, call: GrpcCall
    ) -> pb.RepositoryModelLoadResponse:
        _refuse_repository_name(request.repository_name)
        config: str | None = None
        files: dict[str, bytes] = {}
        for key, value in codec.parameters_to_dict(request.parameters, "load").items():
            if key == "config":
                if not isinstance(value, str):
                    raise InvalidArgument("load parameter 'config' must be a string_param holding JSON")
                config = value
            elif key.startswith("file:"):
                if not isinstance(value, bytes):
                    raise InvalidArgument(f"load parameter '{key}' must be a bytes_param")
                files[key] = value
        await self.core.load_model(request.model_name, config, files or None)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, call: GrpcCall
    ) -> pb.RepositoryModelUnloadResponse:
        _refuse_repository_name(request.repository_name)
        parameters = codec.parameters_to_dict(request.parameters, "unload")
        unload_dependents = parameters.get("unload_dependents", False)
        if not isinstance(unload_dependents, bool):
            raise InvalidArgument("unload parameter 'unload_dependents' must be a bool_param")
        await self.core.unload_model(request.model_name, unload_dependents)
        return pb.RepositoryModelUnloadResponse()

    # -- shared memory ------------------------------------------------------------------------

    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, call: GrpcCall
    ) -> pb.SystemSharedMemoryStatusResponse:
        response = pb.SystemSharedMemoryStatusResponse()
        for region in self.core.shared_memory.status(request.name):
            status = response.regions[region.name]
            status.name, status.key = region.name, region.key
            status.offset, status.byte_size = region.offset, region.byte_size
        return response

    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, call: GrpcCall
    ) -> pb.SystemSharedMemoryRegisterResponse:
        self.core.shared_memory.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, call: GrpcCall
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        self.core.shared_memory.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, call: GrpcCall
    ) -> pb.CudaSharedMemoryStatusResponse:
        response = pb.CudaSharedMemoryStatusResponse()
        for region in self.core.shared_memory.cuda_status(request.name):
            status = response.regions[region.name]
            status.name, status.device_id, status.byte_size = region.name, region.device_id, region.byte_size
        return response

    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, call: GrpcCall
    ) -> pb.CudaSharedMemoryRegisterResponse:
        await self.core.shared_memory.register_cuda(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, call: GrpcCall
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        self.core.shared_memory.unregister_cuda(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- trace and logging --------------------------------------------------------------------

    async def TraceSetting(self, request: pb.TraceSettingRequest, call: GrpcCall) -> pb.TraceSettingResponse:
        model = request.model_name
        if model:
            self.core.check_trace_model(model)
        if request.settings:
            changes: dict[str, Any] = {}
            for key, value in request.settings.items():
                values = list(value.value)
                # No values clears a model's override; the level is a list, the rest single strings.
                changes[key] = (values or None) if key == "trace_level" else (values[0] if values else None)
            current = self.core.tracer.update(model, changes)
        else:
            current = self.core.tracer.settings(model)
        setting = pb.TraceSettingResponse.SettingValue
        return pb.TraceSettingResponse(
            settings={k: setting(value=v if isinstance(v, list) else [v]) for k, v in current.items()}
        )

    async def LogSettings(self, request: pb.LogSettingsRequest, call: GrpcCall) -> pb.LogSettingsResponse:
        if request.settings:
            changes: dict[str, Any] = {}
            for key, value in request.settings.items():
                choice = value.WhichOneof("parameter_choice")
                if choice is None:
                    raise InvalidArgument(f"log setting '{key}' has no value set")
                changes[key] = getattr(value, choice)
            current = self.log_settings.update(changes)
        else:
            current = self.log_settings.current()
        response = pb.LogSettingsResponse()
        for key, value in current.items():
            setting = response.settings[key]
            if isinstance(value, bool):
                setting.bool_param = value
            elif isinstance(value, int):
                setting.uint32_param = value
            else:
                setting.string_param = str(value)
        return response


class HealthService:
    """``grpc.health.v1.Health``: SERVING while the server is ready, as Triton answers."""

    def __init__(self, core: InferenceServer) -> None:
        self.core = core

    async def Check(
        self, request: health_pb2.HealthCheckRequest, call: GrpcCall
    ) -> health_pb2.HealthCheckResponse:
        status = health_pb2.HealthCheckResponse
        return status(status=status.SERVING if self.core.is_ready() else status.NOT_SERVING)

    def methods(self) -> dict[str, Method]:
        return {
            HEALTH + "Check": unary(
                "Check", CATEGORY_OF_RPC["Check"], health_pb2.HealthCheckRequest, self.Check
            )
        }


def _refuse_repository_name(repository_name: str) -> None:
    if repository_name:
        raise Unsupported("'repository_name' specification is not supported")


def _duration(value: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=value.count, ns=value.ns)


def _statistics(stats: ModelStatistics) -> pb.ModelStatistics:
    return pb.ModelStatistics(
        name=stats.name,
        version=stats.version,
        last_inference=stats.last_inference_ms,
        inference_count=stats.inference_count,
        execution_count=stats.execution_count,
        inference_stats=pb.InferStatistics(
            success=_duration(stats.success),
            fail=_duration(stats.fail),
            queue=_duration(stats.queue),
            compute_input=_duration(stats.compute_input),
            compute_infer=_duration(stats.compute_infer),
            compute_output=_duration(stats.compute_output),
            cache_hit=_duration(stats.cache_hit),
            cache_miss=_duration(stats.cache_miss),
        ),
        batch_stats=[
            pb.InferBatchStatistics(
                batch_size=size,
                compute_input=_duration(batch.compute_input),
                compute_infer=_duration(batch.compute_infer),
                compute_output=_duration(batch.compute_output),
            )
            for size, batch in sorted(stats.batch_stats.items())
        ],
    )

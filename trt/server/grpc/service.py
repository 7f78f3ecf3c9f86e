"""Triton's ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` on ``grpc.aio``.

Every RPC translates its message to a call on ``InferenceServer`` and the result back; the core
decides everything else. Errors are answered with the status their ``ServerError`` names (see
``server.grpc.errors``). ``ModelStreamInfer`` answers errors in-band and keeps the stream open.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc
from google.protobuf.message import Message

from trt.protos import grpc_service_pb2 as pb
from trt.protos import grpc_service_pb2_grpc, health_pb2, health_pb2_grpc
from trt.server.core.errors import InvalidArgument, Unsupported
from trt.server.core.extensions.statistics import Duration, ModelStatistics
from trt.server.core.extensions.tracing import TransportPoints
from trt.server.core.server import InferenceServer
from trt.server.grpc import codec
from trt.server.grpc.errors import GrpcBindError, status_of
from trt.server.grpc.restrictions import RestrictionInterceptor
from trt.server.restrictions import Restrictions

logger = logging.getLogger("trt.grpc")

GRPC_TRACE_POINTS = TransportPoints(
    "GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "GRPC_SEND_START", "GRPC_SEND_END"
)

# Triton's MAX_GRPC_MESSAGE_SIZE (INT32_MAX).
MAX_MESSAGE_LENGTH = 2**31 - 1


# Every handler gets grpc.aio's context; the messages are typed by the generated stubs (.pyi).
# grpc's classes are generic in its type stubs only: the alias is a string at run time.
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Service = TypeVar("Service")
Request = TypeVar("Request", bound=Message)
Response = TypeVar("Response", bound=Message)


def _unary(
    method: Callable[[Service, Request, Context], Awaitable[Response]],
) -> Callable[[Service, Request, Context], Awaitable[Response]]:
    """Answer a failed unary RPC with the status its error maps to; never let it escape."""

    name = method.__name__

    @functools.wraps(method)
    async def handler(self: Service, request: Request, context: Context) -> Response:
        try:
            return await method(self, request, context)
        except Exception as exc:
            code, message = status_of(exc, name)
            await context.abort(code, message)

    return handler


class GrpcInferenceService(grpc_service_pb2_grpc.GRPCInferenceServiceServicer):
    """The KServe v2 / Triton gRPC API over one ``InferenceServer``."""

    def __init__(self, core: InferenceServer) -> None:
        self.core = core
        self.log_settings = core.log_settings
        # Strong references to running stream requests (the event loop keeps only weak ones).
        self._stream_tasks: set[asyncio.Task[None]] = set()

    # -- health and metadata ------------------------------------------------------------------

    @_unary
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.core.is_live())

    @_unary
    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.core.is_ready())

    @_unary
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        # An unknown model is simply not ready: status OK, ready=false.
        return pb.ModelReadyResponse(ready=self.core.model_ready(request.name, request.version))

    @_unary
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        meta = self.core.metadata()
        return pb.ServerMetadataResponse(name=meta.name, version=meta.version, extensions=meta.extensions)

    @_unary
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
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

    @_unary
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context) -> pb.ModelConfigResponse:
        return pb.ModelConfigResponse(config=self.core.model_config(request.name, request.version))

    @_unary
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        stats = self.core.statistics(request.name, request.version)
        return pb.ModelStatisticsResponse(model_stats=[_statistics(s) for s in stats])

    # -- inference ----------------------------------------------------------------------------

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Context) -> pb.ModelInferResponse:
        # The hot path: the error mapping is inlined rather than wrapped.
        try:
            tracer = self.core.tracer
            decoding = time.perf_counter_ns() if tracer.active else 0
            inference = codec.decode_infer_request(request)
            if tracer.active and (
                trace := tracer.start(inference.model_name, inference.model_version, inference.id)
            ):
                # grpc.aio hands over a request already received and sends the reply after this
                # returns: this side sees the read from the decoding of the message on, and the send
                # until the call ends (Triton's trace_summary.py needs all four points).
                reply, sent = await self.core.infer_traced(
                    inference,
                    trace,
                    GRPC_TRACE_POINTS,
                    (decoding, time.perf_counter_ns()),
                    codec.encode_infer_response,
                )
                # types-grpcio types the callback as a class no function matches.
                context.add_done_callback(lambda _context: sent())  # type: ignore[arg-type]
                return reply
            response = await self.core.infer(inference)
            return codec.encode_infer_response(response)
        except Exception as exc:
            code, message = status_of(exc, "ModelInfer")
            await context.abort(code, message)

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Answer each request as it completes; requests run concurrently, errors stay in-band."""
        responses: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        reader = asyncio.create_task(self._read_stream(request_iterator, responses))
        try:
            while True:
                response = await responses.get()
                if response is None:
                    break
                yield response
        finally:
            reader.cancel()

    async def _read_stream(
        self,
        requests: AsyncIterator[pb.ModelInferRequest],
        responses: asyncio.Queue[pb.ModelStreamInferResponse | None],
    ) -> None:
        mine: set[asyncio.Task[None]] = set()
        try:
            async for request in requests:
                task = asyncio.create_task(self._stream_one(request, responses))
                mine.add(task)
                task.add_done_callback(mine.discard)
                self._stream_tasks.add(task)
                task.add_done_callback(self._stream_tasks.discard)
            # The client closed its side: send what is still running, then end the stream.
            # asyncio.wait, unlike gather, leaves the requests running if this reader is cancelled.
            if mine:
                await asyncio.wait(set(mine))
        except asyncio.CancelledError:
            # The stream was cancelled (the client went away): its requests are cancelled too, so
            # that a model asking request.is_cancelled() can stop.
            for task in mine:
                task.cancel()
            raise
        except Exception:
            # Reading failed (the client went away); requests already started finish on their own.
            logger.debug("stream closed while reading requests", exc_info=True)
        finally:
            responses.put_nowait(None)

    async def _stream_one(
        self, request: pb.ModelInferRequest, responses: asyncio.Queue[pb.ModelStreamInferResponse | None]
    ) -> None:
        """Every answer to one streamed request: one for ordinary models, any number for decoupled
        ones, each marked with ``triton_final_response``; errors travel in-band."""
        empty_final = False
        try:
            inference = codec.decode_infer_request(request)
            empty_final = bool(inference.parameters.pop("triton_enable_empty_final_response", False))
            async for item in self.core.infer_stream(inference):
                if item.response is None and item.error is None:
                    if empty_final:  # the model ended the request without a last response
                        responses.put_nowait(self._stream_reply(request, None, final=True))
                    continue
                if item.error is not None:
                    _, message = status_of(item.error, "ModelStreamInfer")
                    responses.put_nowait(self._stream_reply(request, message, item.final))
                    continue
                reply = pb.ModelStreamInferResponse()
                assert item.response is not None
                codec.encode_infer_response(item.response, reply.infer_response)
                reply.infer_response.parameters["triton_final_response"].bool_param = item.final
                responses.put_nowait(reply)
        except Exception as exc:
            _, message = status_of(exc, "ModelStreamInfer")
            responses.put_nowait(self._stream_reply(request, message, final=True))

    @staticmethod
    def _stream_reply(
        request: pb.ModelInferRequest, error_message: str | None, final: bool
    ) -> pb.ModelStreamInferResponse:
        """A stream response carrying only an error, or the empty final response."""
        reply = pb.ModelStreamInferResponse(error_message=error_message or "")
        reply.infer_response.model_name = request.model_name
        reply.infer_response.model_version = request.model_version
        reply.infer_response.id = request.id
        reply.infer_response.parameters["triton_final_response"].bool_param = final
        return reply

    # -- model repository ---------------------------------------------------------------------

    @_unary
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        row = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(
            models=[
                row(name=r.name, version=r.version, state=r.state, reason=r.reason)
                for r in self.core.repository_index(request.ready)
            ]
        )

    @_unary
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
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

    @_unary
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        _refuse_repository_name(request.repository_name)
        parameters = codec.parameters_to_dict(request.parameters, "unload")
        unload_dependents = parameters.get("unload_dependents", False)
        if not isinstance(unload_dependents, bool):
            raise InvalidArgument("unload parameter 'unload_dependents' must be a bool_param")
        await self.core.unload_model(request.model_name, unload_dependents)
        return pb.RepositoryModelUnloadResponse()

    # -- shared memory ------------------------------------------------------------------------

    @_unary
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> pb.SystemSharedMemoryStatusResponse:
        response = pb.SystemSharedMemoryStatusResponse()
        for region in self.core.shared_memory.status(request.name):
            status = response.regions[region.name]
            status.name, status.key = region.name, region.key
            status.offset, status.byte_size = region.offset, region.byte_size
        return response

    @_unary
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        self.core.shared_memory.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @_unary
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        self.core.shared_memory.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @_unary
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> pb.CudaSharedMemoryStatusResponse:
        self.core.shared_memory.cuda_status(request.name)  # nothing to list; unknown names are NOT_FOUND
        return pb.CudaSharedMemoryStatusResponse()

    @_unary
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> pb.CudaSharedMemoryRegisterResponse:
        self.core.shared_memory.register_cuda(request.name)
        return pb.CudaSharedMemoryRegisterResponse()

    @_unary
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        self.core.shared_memory.unregister_cuda(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- trace and logging --------------------------------------------------------------------

    @_unary
    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context: Context
    ) -> pb.TraceSettingResponse:
        model = request.model_name
        if model:
            self.core.model_config(model)  # an unknown model is refused with Triton's error
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

    @_unary
    async def LogSettings(self, request: pb.LogSettingsRequest, context: Context) -> pb.LogSettingsResponse:
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


class HealthService(health_pb2_grpc.HealthServicer):
    """``grpc.health.v1.Health``: SERVING while the server is ready, as Triton answers."""

    def __init__(self, core: InferenceServer) -> None:
        self.core = core

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: Context
    ) -> health_pb2.HealthCheckResponse:
        status = health_pb2.HealthCheckResponse
        return status(status=status.SERVING if self.core.is_ready() else status.NOT_SERVING)


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


def _target(address: str, port: int) -> str:
    if ":" in address and not address.startswith("["):
        return f"[{address}]:{port}"  # IPv6 literal
    return f"{address}:{port}"


async def start_grpc_server(
    core: InferenceServer, address: str, port: int, restrictions: Restrictions | None = None
) -> grpc.aio.Server:
    """Build, bind and start the gRPC endpoint; the caller stops it with ``await server.stop(grace)``.

    Raises ``GrpcBindError`` (an ``OSError``) when the address cannot be bound.
    """
    server = grpc.aio.server(
        interceptors=[RestrictionInterceptor(restrictions)] if restrictions else None,
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_LENGTH),
            ("grpc.max_receive_message_length", MAX_MESSAGE_LENGTH),
            # Without this a second server on the same port binds too and steals connections.
            ("grpc.so_reuseport", 0),
        ],
    )
    grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(GrpcInferenceService(core), server)
    health_pb2_grpc.add_HealthServicer_to_server(HealthService(core), server)
    target = _target(address, port)
    try:
        bound = server.add_insecure_port(target)
    except RuntimeError:  # recent grpcio raises instead of returning 0
        bound = 0
    if bound == 0:
        await server.stop(None)
        raise GrpcBindError(
            f"cannot start the GRPCInferenceService endpoint on {target}: the port is in use or the "
            "address is not available (choose another with --grpc-port / --grpc-address)"
        )
    await server.start()
    return server

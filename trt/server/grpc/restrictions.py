"""``--grpc-restricted-protocol``: a server interceptor that refuses rpcs of a restricted category
unless their metadata carries the header, with Triton's status (UNAVAILABLE) and words."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from trt.server.restrictions import Restrictions

_CATEGORY_OF_RPC = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "Check": "health",  # grpc.health.v1.Health
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}


# grpc's classes are generic in its type stubs only: the alias is a string at run time.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


class RestrictionInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, restrictions: Restrictions) -> None:
        self.restrictions = restrictions

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        rpc = handler_call_details.method.rsplit("/", 1)[-1]
        metadata = dict(handler_call_details.invocation_metadata or ())

        def header(name: str) -> str | None:
            value = metadata.get(name)
            return value if isinstance(value, str) else None

        unmet = self.restrictions.unmet(_CATEGORY_OF_RPC.get(rpc), header)
        if unmet is None or handler is None:
            return handler
        return _refusal(handler, f"This protocol is restricted, expecting header '{unmet.header}'")


def _refusal(handler: Handler, message: str) -> Handler:
    """A handler of the same kind as ``handler`` that answers UNAVAILABLE."""

    async def refuse(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    deserialize, serialize = handler.request_deserializer, handler.response_serializer
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(refuse, deserialize, serialize)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(refuse, deserialize, serialize)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(refuse, deserialize, serialize)
    return grpc.stream_stream_rpc_method_handler(refuse, deserialize, serialize)

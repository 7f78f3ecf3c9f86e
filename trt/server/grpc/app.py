"""The gRPC application over HTTP/2: the method table and what every call on the endpoint shares.

A ``Method`` is a unary handler (the request message's bytes in, a reply out) or a streaming one (the
call itself, whose ``requests()`` it reads and ``send_message`` it answers with). ``unary`` wraps a
handler that takes and returns generated protobuf messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from google.protobuf.message import DecodeError, Message

from trt.server.core.errors import InvalidArgument
from trt.server.grpc.call import GrpcCall, MessageBudget
from trt.server.grpc.errors import StatusCode
from trt.server.grpc.h2.outbound import Outbound
from trt.server.grpc.options import GrpcOptions

if TYPE_CHECKING:
    from trt.server.core.extensions.tracing import Tracer

# What a unary handler answers: a message, its serialized bytes, or None once it answered itself.
Reply: TypeAlias = Message | bytes | memoryview | None
Request = TypeVar("Request", bound=Message)
Response = TypeVar("Response", bound=Message)


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    category: str | None  # for --grpc-restricted-protocol
    handler: Callable[[bytes | memoryview, GrpcCall], Awaitable[Reply]] | None = None
    stream_handler: Callable[[GrpcCall], Awaitable[None]] | None = None
    compressed: bool = False  # an inference method: --grpc-infer-response-compression-level applies


def unary(
    name: str,
    category: str | None,
    request_type: type[Request],
    function: Callable[[Request, GrpcCall], Awaitable[Response]],
) -> Method:
    parse = request_type.FromString

    async def handler(data: bytes | memoryview, call: GrpcCall) -> Reply:
        try:
            request = parse(data)
        except DecodeError:
            raise InvalidArgument(f"malformed {request_type.__name__}") from None
        return await function(request, call)

    return Method(name, category, handler)


class GrpcApp:
    """Opens a ``GrpcCall`` for each request stream of every connection of one endpoint."""

    def __init__(self, options: GrpcOptions, methods: dict[str, Method], tracer: Tracer | None) -> None:
        self.loop = asyncio.get_running_loop()
        self.methods = methods
        self.restrictions = options.restrictions
        self.compression_level = options.infer_compression_level
        self.max_message_size = options.max_message_size
        self.max_response_pool_size = options.max_response_pool_size
        self.max_unsent_bytes = options.max_unsent_bytes
        self.budget = MessageBudget(max(options.max_receiving_bytes, options.max_message_size))
        # None in a front-end worker process: tracing happens in the core process, which has the tracer.
        self._tracer = tracer

    def tracing(self) -> bool:
        return self._tracer is not None and self._tracer.active

    def open_stream(self, outbound: Outbound, stream_id: int) -> GrpcCall:
        return GrpcCall(self, outbound, stream_id)

    def refuse_headers(self, outbound: Outbound, stream_id: int, message: str) -> None:
        GrpcCall(self, outbound, stream_id).finish(StatusCode.RESOURCE_EXHAUSTED, message)

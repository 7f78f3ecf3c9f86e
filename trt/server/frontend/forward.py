"""The worker's side: hand each parsed request to the core over the channel, give back its answer.

``HttpForwarder`` is an ``HttpServer`` handler and ``forwarding_methods`` a gRPC method table, so the
worker runs today's transports unchanged (limits, keep-alive, TLS, HTTP/2, keepalive, compression,
deadlines, restricted protocols); only the step that used to call the app crosses to the core. A
handler cancelled by its transport (client gone, RST_STREAM, deadline) tells the core, which cancels
the request there.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from trt.server.frontend import messages as m
from trt.server.frontend.channel import Channel
from trt.server.frontend.layouts import LayoutNumbers, answer_headers, split
from trt.server.grpc import compression
from trt.server.grpc.app import Method, Reply
from trt.server.grpc.call import GrpcCall
from trt.server.grpc.errors import GrpcError, StatusCode
from trt.server.http.limits import DEFAULT_MAX_BODY_SIZE
from trt.server.http.messages import HttpRequest, HttpResponse


class CoreGone(Exception):
    """The channel closed while a call waited on the core (the server is stopping or died)."""


class _Pending:
    """What the core sent for one call, in order, until the call takes it."""

    __slots__ = ("items", "waiter")

    def __init__(self) -> None:
        self.items: deque[m.Message | None] = deque()  # None: the channel closed
        self.waiter: asyncio.Future[None] | None = None

    def put(self, item: m.Message | None) -> None:
        self.items.append(item)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next(self) -> m.Message:
        while not self.items:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
            self.waiter = None
        item = self.items.popleft()
        if item is None:
            raise CoreGone
        return item


class CoreLink:
    """The worker's calls in flight at the core, by number."""

    def __init__(self) -> None:
        self.channel: Channel | None = None
        self._calls: dict[int, _Pending] = {}
        self._next_id = 0

    def open(self) -> tuple[int, _Pending]:
        self._next_id += 1
        pending = self._calls[self._next_id] = _Pending()
        return self._next_id, pending

    def forget(self, call: int) -> None:
        self._calls.pop(call, None)

    async def send(self, message: m.Message) -> None:
        await self.writable()
        self.send_now(message)

    async def writable(self) -> None:
        """Wait while the core leaves too much unread; CoreGone once the channel is closed."""
        channel = self.channel
        if channel is None or channel.closed:
            raise CoreGone
        await channel.writable()
        if channel.closed:
            raise CoreGone

    def send_now(self, message: m.Message) -> None:
        """A small control message (cancel, window): sent without waiting for room."""
        if self.channel is not None:
            self.channel.send(message)

    def deliver(self, message: m.Message) -> None:
        pending = self._calls.get(getattr(message, "call", 0))
        if pending is not None:  # else: a call that ended here first (cancelled): nothing waits
            pending.put(message)

    def closed(self) -> None:
        for pending in self._calls.values():
            pending.put(None)


class HttpForwarder:
    """An ``HttpServer`` handler that answers through the core's ``HttpApp``. With ``layouts``,
    binary inference requests go apart (``frontend.layouts``); the rest whole."""

    def __init__(
        self, link: CoreLink, layouts: LayoutNumbers | None = None, max_body_size: int = DEFAULT_MAX_BODY_SIZE
    ) -> None:
        self.link = link
        self.layouts = layouts
        self.max_body_size = max_body_size  # what a request sent apart may carry (the core's limit)

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        link = self.link
        call, pending = link.open()
        streamed = False
        try:
            layouts = self.layouts
            cut = split(request, self.max_body_size) if layouts is not None else None
            if layouts is not None and cut is not None:
                await link.writable()
                # Numbered and sent in one step: the core must read layouts in numbering order.
                for message in layouts.messages(cut, call, request.started_ns, request.received_ns):
                    link.send_now(message)
            else:
                await link.send(
                    m.HttpCall(
                        call,
                        request.method,
                        request.path,
                        request.query,
                        request.spelt_headers(),
                        request.body,
                        request.started_ns,
                        request.received_ns,
                    )
                )
            request.body = b""  # the core has it now; do not hold a second copy while it answers
            answer = await pending.next()
            if isinstance(answer, m.InferAnswer):
                return HttpResponse(
                    200, answer.body, answer_headers(answer.json_length, answer.content_encoding)
                )
            if not isinstance(answer, m.HttpAnswer):
                raise CoreGone
            if answer.streamed:
                streamed = True
                stream = _ChunkStream(link, call, pending)
                return HttpResponse(answer.status, headers=answer.headers, stream=stream)
            return HttpResponse(answer.status, answer.body, answer.headers)
        except asyncio.CancelledError:
            link.send_now(m.Cancel(call))
            raise
        except CoreGone:
            return HttpResponse(
                503, b'{"error":"the server is stopping"}', [(b"content-type", b"application/json")]
            )
        finally:
            if not streamed:
                link.forget(call)


class _ChunkStream:
    """A streamed HTTP body as it comes from the core. Not an async generator: one closed before its
    first chunk (the client left at once) must still tell the core, and a generator that never
    started runs no ``finally``."""

    def __init__(self, link: CoreLink, call: int, pending: _Pending) -> None:
        self.link, self.call, self.pending = link, call, pending
        self.ended = False
        self._written = False  # a chunk was handed out: the next request for one means it was written

    def __aiter__(self) -> _ChunkStream:
        return self

    async def __anext__(self) -> bytes:
        if self._written:
            self._written = False
            self.link.send_now(m.Written(self.call))  # the core may send one more
        if self.ended:
            raise StopAsyncIteration
        try:
            item = await self.pending.next()
        except CoreGone:
            self._end()
            raise StopAsyncIteration from None
        if isinstance(item, m.Chunk):
            self._written = True
            return item.data
        self._end()  # End (or anything else: the stream is over)
        raise StopAsyncIteration

    def _end(self) -> None:
        self.ended = True
        self.link.forget(self.call)

    async def aclose(self) -> None:
        """The client went away (or the body was written whole): stop the core's side if it runs."""
        if not self.ended:
            self._end()
            self.link.send_now(m.Cancel(self.call))


@dataclass(frozen=True, slots=True)
class MethodEntry:
    """A method of the core's table as a worker needs it: where, what to check, unary or streaming."""

    path: str
    name: str
    category: str | None
    compressed: bool
    streaming: bool


def forwarding_methods(
    link: CoreLink, entries: list[MethodEntry], forward_metadata: bool = False
) -> dict[str, Method]:
    """The core's gRPC method table, each method forwarding its call to the core (with its metadata
    where ``forward_metadata``)."""
    table = {}
    for entry in entries:
        if entry.streaming:
            streamed = _stream_forwarder(link, entry.path, forward_metadata)
            table[entry.path] = Method(
                entry.name, entry.category, stream_handler=streamed, compressed=entry.compressed
            )
        else:
            table[entry.path] = Method(
                entry.name, entry.category, _unary_forwarder(link, entry.path, forward_metadata),
                compressed=entry.compressed,
            )  # fmt: skip
    return table


def _metadata(call: GrpcCall, forward_metadata: bool) -> list[tuple[str, str]]:
    return list(call.metadata) if forward_metadata else []


def _ended(item: m.Message) -> None:
    """The end of a call: OK returns, an error status raises for ``GrpcCall`` to answer with."""
    if not isinstance(item, m.GrpcFinish):
        raise GrpcError(StatusCode.INTERNAL, f"unexpected {type(item).__name__} from the core")
    if item.code != StatusCode.OK:
        raise GrpcError(StatusCode(item.code), item.message)


def _unary_forwarder(
    link: CoreLink, path: str, forward_metadata: bool
) -> Callable[[bytes | memoryview, GrpcCall], Awaitable[Reply]]:
    async def forward(data: bytes | memoryview, call: GrpcCall) -> Reply:
        number, pending = link.open()
        try:
            await link.send(m.GrpcUnary(number, path, bytes(data), _metadata(call, forward_metadata)))
            item = await pending.next()
            if isinstance(item, m.GrpcReply):
                return item.data
            _ended(item)
            return None
        except asyncio.CancelledError:
            link.send_now(m.Cancel(number))
            raise
        except CoreGone:
            raise GrpcError(StatusCode.UNAVAILABLE, "the server is stopping") from None
        finally:
            link.forget(number)

    return forward


def _stream_forwarder(
    link: CoreLink, path: str, forward_metadata: bool
) -> Callable[[GrpcCall], Awaitable[None]]:
    async def forward(call: GrpcCall) -> None:
        number, pending = link.open()
        loop = asyncio.get_running_loop()
        pump: asyncio.Task[None] | None = None
        try:
            await link.send(m.GrpcOpen(number, path, _metadata(call, forward_metadata)))
            pump = loop.create_task(_pump_requests(link, number, call))
            while True:
                item = await pending.next()
                if isinstance(item, m.Chunk):
                    await call.writable()
                    data = item.data
                    if call.response_encoding is not None and len(data) > compression.OFF_LOOP_BYTES:
                        data = await compression.deflated(data, call.response_encoding)
                    call.send_message(data)
                    link.send_now(m.Written(number))
                    continue
                _ended(item)
                return
        except asyncio.CancelledError:
            link.send_now(m.Cancel(number))
            raise
        except CoreGone:
            raise GrpcError(StatusCode.UNAVAILABLE, "the server is stopping") from None
        finally:
            link.forget(number)
            if pump is not None:
                pump.cancel()

    return forward


async def _pump_requests(link: CoreLink, number: int, call: GrpcCall) -> None:
    """The client's messages to the core as they come, then its half-close."""
    try:
        async for message in call.requests():
            await link.send(m.GrpcMessage(number, bytes(message)))
        await link.send(m.GrpcHalfClose(number))
    except CoreGone:
        pass

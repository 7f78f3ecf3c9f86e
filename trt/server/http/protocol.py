"""A lean HTTP/1.1 server on asyncio and httptools.

It exists because every framework layer costs CPU per request: on these machines an empty ASGI app
under uvicorn spends 100-150 us of CPU per request, which is most of the budget for serving a small
model. Here a request is parsed by httptools into an ``HttpRequest`` and handed to one async
handler; the response is written as one buffer.

Supported: keep-alive and pipelining (answered in order), ``Expect: 100-continue``, chunked request
bodies, HEAD, write backpressure, an idle timeout, and a graceful stop that lets requests in progress
finish.

Every buffer is bounded (``HttpLimits``): the request line and headers together (431, counted on the
bytes as they arrive, since httptools itself keeps a header value it has not finished in one growing
buffer), the number of headers (431), the body (413), and, through the core's ``QueuedBytes``, the
bytes of all bodies being received or waiting to be answered on every connection together (503).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import httptools

from trt.server.core.scheduling.queued_bytes import QueuedBytes
from trt.server.http.limits import HttpLimits, over_budget, too_large

logger = logging.getLogger("trt.http")

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_MAX_PIPELINED = 32  # stop reading from a client that queues more than this
_HEAD_END = b"\r\n\r\n"


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a request whose head breaks a limit."""


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    body_too_large: bool = False  # over the limit: the body was dropped and the answer is 413
    over_budget: bool = False  # the server held too many bytes: the body was dropped, the answer is 503
    reserved: int = 0  # bytes of the body counted against the server's QueuedBytes until answered
    started_ns: int = 0  # perf_counter_ns when its first byte was parsed, and when its last was
    received_ns: int = 0


@dataclass(slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    # Sent after the head with chunked transfer encoding, chunk by chunk as it yields (server-sent
    # events); ``body`` is then ignored. Closed early if the client goes away.
    stream: AsyncIterator[bytes] | None = None
    sent: Callable[[], None] | None = None  # called once the response is written (tracing)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class HttpProtocol(asyncio.Protocol):
    def __init__(self, handler: Handler, server: HttpServer) -> None:
        self._handler = handler
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._pending: deque[tuple[HttpRequest, bool, bool]] = deque()
        self._busy = False
        self._closing = False
        # The connection's task answers its requests in order; between them it waits on ``_next``
        # (a future per request costs less than a task per request).
        self._serving: asyncio.Task[None] | None = None
        self._next: asyncio.Future[None] | None = None
        self._current: HttpRequest | None = None  # the request being answered
        self._write_ready = asyncio.Event()
        self._write_ready.set()
        self.last_active = self._loop.time()
        # Per-message parse state.
        self._started = 0
        self._url: list[bytes] = []
        self._url_size = 0
        self._headers: dict[str, str] = {}
        self._header_count = 0
        self._in_head = True  # the parser is reading a request line and headers (or waits for one)
        self._head_size = 0
        self._line_ended = False  # the request line is complete (a head over its limit before: 414)
        self._head_tail = b""  # the last bytes of the previous chunk, for an end of head across two
        self._body: list[bytes] = []
        self._body_size = 0
        self._too_large = False
        self._over_budget = False
        self._reserved = 0

    # -- connection ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._closing = True
        self._release(self._reserved)  # a body that never completed
        self._reserved = 0
        while self._pending:  # requests read but never to be answered
            self._release(self._pending.popleft()[0].reserved)
        current = self._current
        if current is not None and self._serving is not None and self._server.cancellable(current.path):
            self._serving.cancel()  # its client is gone: the model may stop (request.is_cancelled())
        self._wake_server()  # to end, if it waits for a next request
        self._write_ready.set()

    def pause_writing(self) -> None:
        self._write_ready.clear()

    def resume_writing(self) -> None:
        self._write_ready.set()

    @property
    def idle(self) -> bool:
        return not self._busy and not self._pending

    def close(self) -> None:
        self._closing = True
        if self._transport is not None and self.idle:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        self.last_active = self._loop.time()
        if self._in_head:
            if not self._line_ended and b"\n" in data:
                self._line_ended = True
            # Bytes of a head, whole chunks until its end is seen (which may straddle two chunks); a
            # few bytes of a next pipelined head in the same chunk go uncounted, so the bound is exact
            # to within one read.
            tail = self._head_tail
            across = (tail + data[:3]).find(_HEAD_END) if tail else -1
            if across >= 0:
                self._head_size += across + len(_HEAD_END) - len(tail)
            else:
                end = data.find(_HEAD_END)
                self._head_size += len(data) if end < 0 else end + len(_HEAD_END)
            self._head_tail = data[-3:]
            if self._head_size > self._server.limits.max_header_size:
                self._reject_head()
                return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reject(400, b"protocol upgrades are not supported")
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _HeadTooLarge):
                self._reject_head()
            else:
                raise
        except httptools.HttpParserError as exc:
            self._reject(400, f"malformed HTTP request: {exc}".encode())

    def _reject_head(self) -> None:
        limits = self._server.limits
        if not self._line_ended or self._url_size > limits.max_header_size:
            self._reject(414, b"the URL is longer than the request head may be (--http-max-header-size)")
        elif self._header_count > limits.max_header_count:
            message = f"the request has more than {limits.max_header_count} headers (--http-max-header-count)"
            self._reject(431, message.encode())
        else:
            message = (
                f"the request line and headers exceed {limits.max_header_size} bytes (--http-max-header-size)"
            )
            self._reject(431, message.encode())

    def _reject(self, status: int, message: bytes) -> None:
        """Answer a request that cannot be parsed, then close: the stream cannot be trusted."""
        assert self._transport is not None
        if self._transport.is_closing():
            return
        body = b'{"error":"' + message.replace(b'"', b"'") + b'"}'
        self._transport.write(
            _head(status, len(body), [(b"content-type", b"application/json")], False) + body
        )
        self._transport.close()

    # -- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._started = time.perf_counter_ns()
        self._url = []
        self._url_size = 0
        self._headers = {}
        self._header_count = 0
        self._body = []
        self._body_size = 0
        self._too_large = False
        self._over_budget = False
        self._reserved = 0

    def on_url(self, url: bytes) -> None:
        # A URL may come in many pieces: kept as a list, joined once (+= on bytes is quadratic).
        self._url.append(url)
        self._url_size += len(url)
        if self._url_size > self._server.limits.max_header_size:
            raise _HeadTooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self._server.limits.max_header_count:
            raise _HeadTooLarge
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = self._headers.get(key)
        self._headers[key] = text if previous is None else f"{previous}, {text}"

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_size = 0
        self._head_tail = b""
        self._line_ended = False  # for the next request on this connection
        if self._headers.get("expect", "").lower() == "100-continue" and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        size = len(body)
        self._body_size += size
        if self._too_large or self._over_budget:
            return
        if self._body_size > self._server.limits.max_body_size:
            self._too_large = True
        elif self._server.queued_bytes is not None and not self._server.queued_bytes.reserve(size):
            self._over_budget = True
        else:
            self._reserved += size
            self._body.append(body)
            return
        self._body = []  # dropped: the answer is an error
        self._release(self._reserved)
        self._reserved = 0

    def _release(self, size: int) -> None:
        if size and self._server.queued_bytes is not None:
            self._server.queued_bytes.release(size)

    def on_message_complete(self) -> None:
        self._in_head = True
        url = httptools.parse_url(b"".join(self._url))
        path = url.path.decode("latin-1")
        if "%" in path:
            from urllib.parse import unquote

            path = unquote(path)
        request = HttpRequest(
            method=self._parser.get_method().decode("latin-1"),
            path=path,
            query=url.query.decode("latin-1") if url.query else "",
            headers=self._headers,
            body=self._body[0] if len(self._body) == 1 else b"".join(self._body),
        )
        self._body = []  # the pieces, once joined, must not live on beside the request until the next
        request.body_too_large, request.over_budget = self._too_large, self._over_budget
        request.reserved, self._reserved = self._reserved, 0
        request.started_ns, request.received_ns = self._started, time.perf_counter_ns()
        keep_alive = self._parser.should_keep_alive()
        # An HTTP/1.0 client keeps the connection only when the answer says so.
        self._pending.append((request, keep_alive, keep_alive and self._parser.get_http_version() == "1.0"))
        if len(self._pending) > _MAX_PIPELINED and self._transport is not None:
            self._transport.pause_reading()
        if not self._busy:
            self._busy = True
            if self._serving is None:
                self._serving = self._loop.create_task(self._serve())
            else:
                self._wake_server()

    # -- answering ----------------------------------------------------------------------------

    def _wake_server(self) -> None:
        waiting = self._next
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    async def _serve(self) -> None:
        """Answer requests as they come, until the connection closes."""
        try:
            while True:
                await self._serve_pending()
                if self._closing or self._transport is None or self._transport.is_closing():
                    return
                self._next = self._loop.create_future()
                await self._next
                self._next = None
                if not self._pending:  # woken to end: the connection closed
                    return
        finally:
            self._serving = None

    async def _serve_pending(self) -> None:
        try:
            transport = self._transport
            assert transport is not None
            while self._pending:
                request, keep_alive, say_keep_alive = self._pending.popleft()
                if len(self._pending) == _MAX_PIPELINED:
                    transport.resume_reading()
                self._current = request
                # The body's bytes leave the server's count here: an inference request is counted
                # again by the core, as tensors, for as long as it is queued or running.
                self._release(request.reserved)
                request.reserved = 0
                try:
                    if request.body_too_large:
                        response = self._server.too_large(self._server.limits.max_body_size)
                    elif request.over_budget:
                        response = HttpResponse(*over_budget(self._server.queued_bytes))
                    else:
                        response = await self._handler(request)
                except Exception:
                    logger.exception("unhandled error answering %s %s", request.method, request.path)
                    response = HttpResponse(
                        500, b'{"error":"internal error"}', [(b"content-type", b"application/json")]
                    )
                keep_alive = keep_alive and not self._closing
                if transport.is_closing():
                    if response.stream is not None:
                        await close_stream(response.stream)
                    break
                headers = response.headers
                if say_keep_alive and keep_alive:
                    headers = [*headers, (b"connection", b"keep-alive")]
                if response.stream is not None:
                    await self._write_stream(transport, response, headers, keep_alive)
                else:
                    body = b"" if request.method == "HEAD" else response.body
                    transport.write(_head(response.status, len(response.body), headers, keep_alive) + body)
                    if response.sent is not None:
                        response.sent()
                self.last_active = self._loop.time()
                if not keep_alive:
                    transport.close()
                    break
                if not self._write_ready.is_set():
                    await self._write_ready.wait()
            self._busy = False
            if self._closing and not transport.is_closing():
                transport.close()
        except asyncio.CancelledError:
            if not self._closing:
                raise
            self._busy = False  # cancelled because the client left: there is no one to answer
        finally:
            self._current = None

    async def _write_stream(
        self,
        transport: asyncio.Transport,
        response: HttpResponse,
        headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
    ) -> None:
        """A streamed body: the head, a chunk per item, the last chunk. A client that goes away ends the
        stream (its source is closed, so the model behind it is told it was cancelled)."""
        assert response.stream is not None
        transport.write(_head(response.status, None, headers, keep_alive))
        try:
            async for chunk in response.stream:
                if transport.is_closing():
                    return
                if chunk:
                    transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.last_active = self._loop.time()
                if not self._write_ready.is_set():
                    await self._write_ready.wait()
            if not transport.is_closing():
                transport.write(b"0\r\n\r\n")
        finally:
            await close_stream(response.stream)


def _too_large(limit: int) -> HttpResponse:
    return HttpResponse(*too_large(limit))


async def close_stream(stream: AsyncIterator[Any]) -> None:
    """Close an async generator early (a consumer that stops reading); other iterators need nothing."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


def _head(status: int, length: int | None, headers: list[tuple[bytes, bytes]], keep_alive: bool) -> bytes:
    """The status line and headers; ``length`` None announces a chunked body."""
    framing = b"transfer-encoding: chunked" if length is None else b"content-length: %d" % length
    lines = [b"HTTP/1.1 %d %s\r\n%s\r\n" % (status, _REASONS.get(status, b"Unknown"), framing)]
    for name, value in headers:
        lines.append(name + b": " + value + b"\r\n")
    if not keep_alive:
        lines.append(b"connection: close\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


class HttpServer:
    """Owns the listening socket and the open connections."""

    def __init__(
        self,
        handler: Handler,
        limits: HttpLimits | None = None,
        idle_timeout: float = 75.0,
        cancellable: Callable[[str], bool] = lambda path: False,
        queued_bytes: QueuedBytes | None = None,
        ssl_context: ssl.SSLContext | None = None,
        too_large: Callable[[int], HttpResponse] | None = None,
    ) -> None:
        self.handler = handler
        self.limits = limits or HttpLimits()
        # The answer to a body over ``limits.max_body_size``, given the limit: each API words it its own way.
        self.too_large = too_large or _too_large
        self.idle_timeout = idle_timeout
        # Paths whose handling stops when the client disconnects (inference); others run to the end.
        self.cancellable = cancellable
        # Bodies being received or waiting to be answered count against the core's bound.
        self.queued_bytes = queued_bytes
        self.ssl_context = ssl_context  # HTTPS when set
        self.connections: set[HttpProtocol] = set()
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: HttpProtocol(self.handler, self), sock=sock, ssl=self.ssl_context
        )
        self._sweeper = loop.create_task(self._close_idle())

    async def _close_idle(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(10.0, self.idle_timeout))
            now = loop.time()
            for connection in list(self.connections):
                if connection.idle and now - connection.last_active > self.idle_timeout:
                    connection.close()

    async def stop(self, timeout: float) -> None:
        """Stop accepting, finish requests in progress (up to ``timeout``), close everything."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            if connection._transport is not None:
                connection._transport.abort()

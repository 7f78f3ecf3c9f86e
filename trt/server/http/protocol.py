"""A lean HTTP/1.1 server on asyncio and httptools.

It exists because every framework layer costs CPU per request: on these machines an empty ASGI app
under uvicorn spends 100-150 us of CPU per request, which is most of the budget for serving a small
model. Here a request is parsed by httptools into an ``HttpRequest`` and handed to one async
handler; the response is written as one buffer.

Supported: keep-alive and pipelining (answered in order), ``Expect: 100-continue``, chunked request
bodies, HEAD, write backpressure, an idle timeout, a deadline for a request head to arrive whole (408),
and a graceful stop that lets requests in progress finish.

A head seen before is not parsed again: ``heads.HeadCache`` remembers what httptools made of each
head's bytes, and a request whose head is one of them has its body read by its ``Content-Length``
through the same limits and accounting (``_planned``); a large one straight into its bytes object
by the transport (``body_reader``).

Every buffer is bounded (``HttpLimits``): the request line and headers together (431, counted on the
bytes as they arrive, since httptools itself keeps a header value it has not finished in one growing
buffer), the number of headers (431), the body (413), and, through the core's ``QueuedBytes``, the
bytes of all bodies being received or waiting to be answered on every connection together (503).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

import httptools

from trt.server.http import limits
from trt.server.http.body_reader import BodyReader
from trt.server.http.heads import HEAD_END, HeadPlan, plannable
from trt.server.http.lingering import refuse
from trt.server.http.messages import (
    Handler,
    HttpRequest,
    HttpResponse,
    close_stream,
    path_and_query,
    response_head,
)
from trt.server.http.streamed_body import write_chunks, write_whole

if TYPE_CHECKING:
    from trt.server.http.server import HttpServer

logger = logging.getLogger("trt.http")

_MAX_PIPELINED = 32  # stop reading from a client that queues more than this


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
        # Names as the client spelt them, where not in lower case: kept only for header forwarding
        # (Triton hands a model the client's spelling); None when nothing reads them.
        self._keep_spelling = server.keep_header_spelling
        self._spellings: dict[str, str] | None = None
        self._header_count = 0
        self._in_head = True  # the parser is reading a request line and headers (or waits for one)
        self._head = limits.HeadBytes()
        self._body: list[bytes] = []
        self._body_size = 0
        self._body_chunks = -1  # a chunked body's non-empty chunks so far (-1: not chunked)
        self._body_began = 0  # perf_counter_ns when the head ended, for the body's deadline
        self._too_large = False
        self._over_budget = False
        self._reserved = 0
        # Heads seen before: the parser holds nothing of a next message (it is between two), the
        # head of the message the parser reads (its bytes, when they came at once: to remember),
        # and the head whose body is arriving without the parser.
        self._heads = server.heads if server.heads.max_heads else None
        self._parser_idle = True
        self._head_bytes: bytes | None = None
        self._head_chunk = 0  # the length of the chunk that ``_head_bytes`` began
        self._planned_head: HeadPlan | None = None
        self._planned_left = 0
        self._reader: BodyReader | None = None  # reading a large body for the connection (``body_reader``)

    # -- connection ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._closing = True
        self._reader = None
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

    @property
    def settled(self) -> bool:
        """Idle, and every answer written out of the transport's buffer."""
        transport = self._transport
        return self.idle and (transport is None or not transport.get_write_buffer_size())

    def time_out(self, now_ns: int) -> None:
        """408 and close, if the request being read has taken longer than ``HttpLimits`` allows."""
        allowed = self._server.limits
        if self._in_head:
            overdue = None if self._parser_idle else allowed.head_overdue(self._started, now_ns)
        elif len(self._pending) > _MAX_PIPELINED:
            overdue = None  # not reading, for our own backlog: the body waits on us, not the client
        else:
            overdue = allowed.body_overdue(self._body_began, self._body_size, now_ns)
        if overdue is not None:
            self._reject(408, overdue.encode())

    def close(self) -> None:
        self._closing = True
        if self._transport is not None and self.idle:
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection at once (the server is stopping)."""
        if self._transport is not None:
            self._transport.abort()

    def data_received(self, data: bytes) -> None:
        self._touch()
        if self._planned_head is not None:
            data = self._planned_body(data)
            if not data:
                return
        if self._parser_idle and self._heads is not None:
            data = self._planned(data)
            if not data:
                return
        if self._in_head and self._head.count(data) > self._server.limits.max_header_size:
            self._reject_head()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reject(400, b"protocol upgrades are not supported")
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, limits.HeadTooLarge):
                self._reject_head()
            elif isinstance(exc.__context__, limits.TooManyChunks):
                self._reject(400, limits.TOO_MANY_CHUNKS.encode())
            else:
                raise
        except httptools.HttpParserError as exc:
            self._reject(400, f"malformed HTTP request: {exc}".encode())

    def _planned(self, data: bytes) -> bytes:
        """Take the messages at the front of ``data`` whose heads were seen before; the rest, from
        the first head that was not (the parser's, which holds nothing of it yet)."""
        heads = self._heads
        assert heads is not None
        while data:
            end = data.find(HEAD_END, 0, heads.max_head_bytes)
            if end < 0:
                self._head_bytes = None
                return data
            head = data[: end + 4]
            plan = heads.get(head)
            if plan is None:
                # Remembered once the parser has read it, if the message was this chunk alone: then
                # the parser's head was exactly these bytes (see on_message_complete).
                self._head_bytes, self._head_chunk = head, len(data)
                return data
            self._begin()
            self._in_head = False
            self._body_began = self._started
            size = plan.content_length
            start = end + 4
            available = len(data) - start
            if available < size:  # the rest of the body comes later
                self._planned_head, self._planned_left = plan, size
                if not self._read_into_one(memoryview(data)[start:], size):
                    self.on_body(data[start:])
                    self._planned_left = size - available
                return b""
            if size:
                self.on_body(data[start : start + size])
            self._complete_planned(plan)
            data = data[start + size :]
        return data

    def _planned_body(self, data: bytes) -> bytes:
        """More of the body of a message whose head was seen before; what follows it."""
        plan = self._planned_head
        assert plan is not None
        left = self._planned_left
        if len(data) < left:
            self.on_body(data)
            self._planned_left = left - len(data)
            return b""
        self.on_body(data[:left] if len(data) > left else data)
        self._planned_head = None
        self._complete_planned(plan)
        return data[left:]

    def _read_into_one(self, first: memoryview, size: int) -> bool:
        """Have the rest of a large body read straight into its bytes object (``body_reader``)."""
        transport, max_size = self._transport, self._server.limits.max_body_size
        assert transport is not None
        reader = BodyReader.start(self, transport, size, first, max_size, self._body_arrived, self._body_read)
        self._reader = reader
        if reader is not None and not self._body_arrived(len(first)):
            reader.give_back()
        return reader is not None

    def _body_arrived(self, size: int) -> bool:
        """``size`` more bytes of a body read into one; False once it is dropped (the rest: in pieces)."""
        self._planned_left -= size
        self._touch()
        if self._counted(size):
            return True
        self._reader = None
        if not self._planned_left:  # dropped with its last bytes: no more come to end the request
            self._body_read(b"")
        return False

    def _body_read(self, body: bytes) -> None:
        plan, self._planned_head, self._reader = self._planned_head, None, None
        assert plan is not None
        self._body = [body]
        self._complete_planned(plan)

    def _complete_planned(self, plan: HeadPlan) -> None:
        self._complete(
            plan.method, plan.path, plan.query, plan.headers, plan.keep_alive, plan.say_keep_alive, plan
        )

    def _reject_head(self) -> None:
        status, message = limits.head_rejection(
            self._server.limits, self._head.line_ended, self._url_size, self._header_count
        )
        self._reject(status, message.encode())

    def _reject(self, status: int, message: bytes) -> None:
        """Answer a request that cannot be parsed, then close: the stream cannot be trusted."""
        assert self._transport is not None
        if self._reader is not None:  # reading a body into one buffer: drop it, the connection answers
            self._reader.give_back()
            self._reader = None
        if self._transport.is_closing() or self._transport.get_protocol() is not self:
            return  # closed, or already handed over to linger after an earlier refusal
        linger = self.idle  # nothing else is to be written on it
        refuse(self._transport, status, message, linger)
        if linger:  # the transport is handed over: this connection is done
            self.connection_lost(None)

    # -- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._parser_idle = False
        self._begin()

    def _begin(self) -> None:
        """A new message: its state starts empty."""
        self._started = time.perf_counter_ns()
        self._url = []
        self._url_size = 0
        self._headers = {}
        self._spellings = {} if self._keep_spelling else None
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
            raise limits.HeadTooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self._server.limits.max_header_count:
            raise limits.HeadTooLarge
        spelt = name.decode("latin-1")
        key = spelt.lower()
        if self._spellings is not None and key != spelt:
            self._spellings.setdefault(key, spelt)
        text = value.decode("latin-1")
        previous = self._headers.get(key)
        self._headers[key] = text if previous is None else f"{previous}, {text}"

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._body_began = time.perf_counter_ns()
        self._head = limits.HeadBytes()  # for the next request on this connection
        self._body_chunks = 0 if "chunked" in self._headers.get("transfer-encoding", "").lower() else -1
        if self._headers.get("expect", "").lower() == "100-continue" and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._body_chunks >= 0 and body:  # httptools hands each chunk's bytes over on their own
            self._body_chunks += 1
            if self._body_chunks > limits.MAX_BODY_CHUNKS:
                raise limits.TooManyChunks
        if self._counted(len(body)):
            self._body.append(body)

    def _counted(self, size: int) -> bool:
        """Count ``size`` more bytes of the body; False once it is dropped (413 or 503 at its end)."""
        self._body_size += size
        if self._too_large or self._over_budget:
            return False
        if self._body_size > self._server.limits.max_body_size:
            self._too_large = True
        elif self._server.queued_bytes is not None and not self._server.queued_bytes.reserve(size):
            self._over_budget = True
        else:
            self._reserved += size
            return True
        self._body = []
        self._release(self._reserved)
        self._reserved = 0
        return False

    def _release(self, size: int) -> None:
        if size and self._server.queued_bytes is not None:
            self._server.queued_bytes.release(size)

    def on_message_complete(self) -> None:
        path, query = path_and_query(b"".join(self._url))
        method = self._parser.get_method().decode("latin-1")
        headers = self._headers
        keep_alive = self._parser.should_keep_alive()
        # An HTTP/1.0 client keeps the connection only when the answer says so.
        say_keep_alive = keep_alive and self._parser.get_http_version() == "1.0"
        plan = None
        head, heads = self._head_bytes, self._heads
        if head is not None and heads is not None:  # a head that came whole in one read: remember it?
            self._head_bytes = None
            size = plannable(headers, self._body_size)
            # Only if the read that began with this head held nothing past this message (the rest of a
            # large body may have come in later reads): then the parser read exactly these bytes.
            if (
                size is not None
                and len(head) + size >= self._head_chunk
                and not (self._too_large or self._over_budget)
            ):
                plan = HeadPlan(
                    method, path, query, headers, size, keep_alive, say_keep_alive, self._spellings or None
                )
                heads.remember(head, plan)
        self._complete(method, path, query, headers, keep_alive, say_keep_alive, plan)
        self._parser_idle = True

    def _complete(
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        keep_alive: bool,
        say_keep_alive: bool,
        plan: HeadPlan | None,
    ) -> None:
        """A whole request has arrived: queue it to be answered."""
        self._in_head = True
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = HttpRequest(method, path, query, headers, body, plan=plan)
        request.header_spellings = (self._spellings or None) if plan is None else plan.header_spellings
        self._body = []  # the pieces, once joined, must not live on beside the request until the next
        request.body_too_large, request.over_budget = self._too_large, self._over_budget
        request.reserved, self._reserved = self._reserved, 0
        request.started_ns, request.received_ns = self._started, time.perf_counter_ns()
        self._pending.append((request, keep_alive, say_keep_alive))
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
                    self._body_began = time.perf_counter_ns()  # a body we stopped reading: time anew
                self._current = request
                # The body's bytes leave the server's count here: an inference request is counted
                # again by the core, as tensors, for as long as it is queued or running.
                if request.reserved:
                    self._release(request.reserved)
                    request.reserved = 0
                try:
                    if request.body_too_large:
                        response = self._server.too_large(self._server.limits.max_body_size)
                    elif request.over_budget:
                        response = HttpResponse(*limits.over_budget(self._server.queued_bytes))
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
                status, headers = response.status, response.headers
                if response.stream is not None:
                    head = response_head(status, None, headers, keep_alive, say_keep_alive)
                    await write_chunks(transport, head, response.stream, self._write_ready, self._touch)
                else:
                    head = response_head(status, len(response.body), headers, keep_alive, say_keep_alive)
                    write_whole(transport, head, b"" if request.method == "HEAD" else response.body)
                    if response.sent is not None:
                        response.sent()
                self._touch()
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

    def _touch(self) -> None:
        """The connection did something now (the idle timeout counts from its last)."""
        self.last_active = self._loop.time()

"""One gRPC call on its HTTP/2 stream: the request's headers and messages in, the response out.

In: ``:method`` POST and ``content-type`` application/grpc (else HTTP 405 / 415, as the gRPC spec
asks), the method by ``:path`` (else UNIMPLEMENTED), restricted protocols (UNAVAILABLE),
``grpc-timeout`` (DEADLINE_EXCEEDED when it passes, and the handler is cancelled), ``grpc-encoding``.
Messages are length-prefixed; each length is checked against the message size limit and the bytes
the server may hold in messages being received (``MessageBudget``) before any of it is kept, and a
compressed one is inflated within the limit. A message that arrives in one piece is handed on as a
view of the bytes read from the socket; a longer one is gathered into one buffer, viewed in place.

Out: a unary answer goes as headers, one message and trailers in one write; streamed answers as
messages, then trailers. Errors go as ``grpc-status`` / ``grpc-message`` (percent-encoded), in a
trailers-only response when nothing was sent yet. A reset from the client, or the connection going
away, cancels the handler's task: the core cancels the request, and a Python model sees
``request.is_cancelled()``.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trt.http2.hpack import encode_header, encode_literal
from trt.server.grpc import compression
from trt.server.grpc.errors import GrpcError, StatusCode, status_block, status_of
from trt.server.grpc.h2.outbound import Outbound
from trt.server.grpc.h2.request_head import RequestHead
from trt.server.grpc.h2.stream import H2Stream

if TYPE_CHECKING:
    from trt.server.grpc.app import GrpcApp, Method, Reply

_HEAD = encode_header(":status", "200") + encode_header("content-type", "application/grpc")
_HEADS = {None: _HEAD} | {name: _HEAD + encode_literal("grpc-encoding", name) for name in ("gzip", "deflate")}
_TRAILERS_OK = encode_literal("grpc-status", "0")
_PREFIX = struct.Struct(">BI")
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_QUEUE_HIGH, _QUEUE_LOW = 16, 4  # streamed requests waiting for the handler: hold credit between


def parse_timeout(value: str) -> float | None:
    """``grpc-timeout`` in seconds: at most 8 digits and a unit; anything else is ignored."""
    digits, unit = value[:-1], value[-1:]
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 8 or unit not in _TIMEOUT_UNITS:
        return None
    return int(digits) * _TIMEOUT_UNITS[unit]


@dataclass(frozen=True, slots=True)
class _Refusal:
    """A head the call is refused for: an HTTP status (not a gRPC request) or a gRPC status."""

    http_status: str
    code: StatusCode
    message: str


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a request head decides for its call (the same for every call with that head)."""

    method: Method
    timeout_s: float | None
    request_encoding: str | None
    response_encoding: str | None


_PLANS = (_Plan, _Refusal)


def _plan(app: GrpcApp, head: RequestHead) -> _Plan | _Refusal:
    """The checks on a call's head, in the order the gRPC spec and Triton make them."""
    if head.method != "POST":
        return _Refusal("405", StatusCode.INTERNAL, "gRPC calls are POST requests")
    content_type = head.get("content-type")
    if content_type is None or not content_type.startswith("application/grpc"):
        return _Refusal("415", StatusCode.INTERNAL, "gRPC calls have content-type application/grpc")
    method = app.methods.get(head.path)
    if method is None:
        return _Refusal("", StatusCode.UNIMPLEMENTED, f"Method not found: {head.path}")
    request_encoding = head.get("grpc-encoding")
    if request_encoding == "identity":
        request_encoding = None
    if request_encoding is not None and request_encoding not in compression.KNOWN:
        message = f"Compression algorithm '{request_encoding}' is not supported"
        return _Refusal("", StatusCode.UNIMPLEMENTED, message)
    response_encoding = None
    if method.compressed:
        response_encoding = compression.response_encoding(
            app.compression_level, head.get("grpc-accept-encoding")
        )
    if app.restrictions:
        unmet = app.restrictions.unmet(method.category, head.get)
        if unmet is not None:
            message = f"This protocol is restricted, expecting header '{unmet.header}'"
            return _Refusal("", StatusCode.UNAVAILABLE, message)
    timeout = head.get("grpc-timeout")
    return _Plan(
        method, parse_timeout(timeout) if timeout is not None else None, request_encoding, response_encoding
    )


class MessageBudget:
    """Bytes of messages being received over all connections, reserved by their length prefix."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size


class GrpcCall(H2Stream):
    __slots__ = (
        "_buffer",
        "_done_reading",
        "_drained",
        "_flag",
        "_prefix",
        "_queue",
        "_request",
        "_reserved",
        "_waiter",
        "_want",
        "app",
        "finished",
        "head",
        "headers_sent",
        "method",
        "opened_ns",
        "request_encoding",
        "response_encoding",
        "task",
        "timer",
    )

    def __init__(self, app: GrpcApp, outbound: Outbound, stream_id: int) -> None:
        super().__init__(outbound, stream_id)
        self.app = app
        self.method: Method | None = None
        self.head: RequestHead | None = None
        self.request_encoding: str | None = None
        self.response_encoding: str | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        self.headers_sent = False
        self.finished = False
        self.opened_ns = 0
        self._prefix = b""
        self._want = -1  # bytes of the current message still to come; -1: reading a prefix
        self._flag = 0
        self._buffer: bytearray | None = None
        self._reserved = 0
        self._request: bytes | memoryview | None = None
        self._queue: deque[bytes | memoryview] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._done_reading = False
        self._drained: asyncio.Event | None = None  # made when a writer first waits for room

    # -- the request --------------------------------------------------------------------------------

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call's metadata: its head's regular fields, names in lower case."""
        return self.head.fields if self.head is not None else ()

    def on_open(self, head: RequestHead, end_stream: bool) -> None:
        app = self.app
        self.head = head
        plan = head.derived.get(app)
        if not isinstance(plan, _PLANS):
            plan = head.derived[app] = _plan(app, head)
        if isinstance(plan, _Refusal):
            if plan.http_status:
                self._http_error(plan.http_status, plan.message)
            else:
                self.finish(plan.code, plan.message)
            return
        if app.tracing():
            self.opened_ns = time.perf_counter_ns()
        if plan.timeout_s is not None:
            self.timer = app.loop.call_later(plan.timeout_s, self._deadline_passed)
        method = self.method = plan.method
        self.request_encoding = plan.request_encoding
        self.response_encoding = plan.response_encoding
        if method.stream_handler is not None:
            self.task = app.loop.create_task(self._run_stream(method))
        if end_stream:
            self._client_done()

    def on_data(self, data: memoryview, end_stream: bool) -> None:
        if not self.finished:
            try:
                self._take(data)
            except GrpcError as error:
                self.finish(error.code, error.message)
        if end_stream and not self.finished:
            self._client_done()

    def on_trailers(self, headers: list[tuple[str, str]]) -> None:
        if not self.finished:
            self._client_done()

    def _take(self, data: memoryview) -> None:
        at, end = 0, len(data)
        while at < end:
            if self._want < 0:
                prefix = self._prefix
                if not prefix and end - at >= 5:
                    self._flag, length = _PREFIX.unpack_from(data, at)
                    at += 5
                else:
                    chunk = bytes(data[at : at + 5 - len(prefix)])
                    at += len(chunk)
                    prefix = self._prefix = prefix + chunk
                    if len(prefix) < 5:
                        return
                    self._flag, length = _PREFIX.unpack(prefix)
                    self._prefix = b""
                self._start_message(length)
                if length == 0:
                    self._message(b"")
                continue
            take = min(self._want, end - at)
            piece = data[at : at + take]
            at += take
            self._want -= take
            if self._want == 0 and self._buffer is None:
                self._message(piece)  # the whole message came in one piece: no copy
            else:
                if self._buffer is None:
                    self._buffer = bytearray()
                self._buffer += piece
                if self._want == 0:
                    self._message(memoryview(self._buffer).toreadonly())

    def _start_message(self, length: int) -> None:
        if self._flag > 1:
            raise GrpcError(StatusCode.INTERNAL, f"invalid gRPC message flag {self._flag}")
        if self._flag and self.request_encoding is None:
            raise GrpcError(StatusCode.INTERNAL, "a compressed message, but the call has no grpc-encoding")
        app = self.app
        if length > app.max_message_size:
            raise GrpcError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"grpc: received message larger than max ({length} vs. {app.max_message_size})",
            )
        if length > 65536:  # small messages are not worth the bookkeeping
            if not app.budget.take(length):
                raise GrpcError(
                    StatusCode.RESOURCE_EXHAUSTED,
                    f"the server holds too many bytes of messages being received to take {length} more "
                    "now; retry later",
                )
            self._reserved = length
        self._want = length

    def _message(self, message: bytes | memoryview) -> None:
        self._want = -1
        self._buffer = None
        if self._reserved:
            self.app.budget.give(self._reserved)
            self._reserved = 0
        if self._flag:  # a large message is inflated on a thread, when its handler takes it
            assert self.request_encoding is not None
            if len(message) > compression.OFF_LOOP_BYTES:
                message = compression.Deflated(message)
            else:
                message = compression.decompress(message, self.request_encoding, self.app.max_message_size)
        method = self.method
        if method is None:
            return
        if method.stream_handler is None:
            if self._request is not None:
                raise GrpcError(StatusCode.UNIMPLEMENTED, "a unary call with more than one request message")
            self._request = message
            return
        self._queue.append(message)
        if len(self._queue) >= _QUEUE_HIGH:
            self.credit_held = True
        self._wake()

    def _client_done(self) -> None:
        if self._want >= 0 or self._prefix:
            self.finish(StatusCode.INTERNAL, "the request ended in the middle of a message")
            return
        method = self.method
        if method is None:
            return
        if method.stream_handler is not None:
            self._done_reading = True
            self._wake()
            return
        request, self._request = self._request, None
        if request is None:
            self.finish(StatusCode.UNIMPLEMENTED, "a unary call without a request message")
            return
        self.task = self.app.loop.create_task(self._run_unary(method, request))

    # -- streamed requests -------------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def requests(self) -> AsyncIterator[bytes | memoryview]:
        """The messages of a streaming call, as they come, until the client ends its side."""
        queue = self._queue
        while True:
            while queue:
                message = queue.popleft()
                if self.credit_held and len(queue) <= _QUEUE_LOW:
                    self.release_credit()
                if type(message) is compression.Deflated:
                    message = await compression.inflated(
                        message, self.request_encoding, self.app.max_message_size
                    )
                yield message
            if self._done_reading or self.finished:
                return
            self._waiter = self.app.loop.create_future()
            await self._waiter
            self._waiter = None

    # -- the response ------------------------------------------------------------------------------

    def _frame(self, payload: bytes | memoryview) -> list[bytes | memoryview]:
        if self.response_encoding is not None:
            payload = compression.compress(payload, self.response_encoding)
            return [_PREFIX.pack(1, len(payload)), payload]
        return [_PREFIX.pack(0, len(payload)), payload]

    def respond(self, reply: Reply) -> None:
        """The one message of a unary call, then OK (None: the handler answered already)."""
        if reply is None or self.finished or self.closed:
            return
        self.finished = True
        self._stop_timer()
        payload = reply if isinstance(reply, bytes | memoryview) else reply.SerializeToString()
        prefix, body = self._frame(payload)
        head = _HEADS[self.response_encoding]
        self.headers_sent = True
        if len(body) <= 65536:
            self.send_response(head, b"".join((prefix, body)), _TRAILERS_OK)
            return
        self.send_headers(head)
        self.send_data(prefix)
        self.send_data(body)
        self.send_trailers(_TRAILERS_OK)

    def respond_parts(self, parts: list[bytes | memoryview]) -> None:
        """The one message of a unary call, given in pieces (large tensors stay views), then OK."""
        total = sum(len(part) for part in parts)
        if self.response_encoding is not None or total <= 65536:
            self.respond(b"".join(parts))
            return
        if self.finished or self.closed:
            return
        self.finished = True
        self._stop_timer()
        self.headers_sent = True
        self.send_headers(_HEADS[None])
        self.send_data(_PREFIX.pack(0, total))
        for part in parts:
            self.send_data(part)
        self.send_trailers(_TRAILERS_OK)

    def send_message(self, payload: bytes | memoryview) -> None:
        """One message of a streamed response."""
        if self.finished or self.closed:
            return
        if not self.headers_sent:
            self.headers_sent = True
            self.send_headers(_HEADS[self.response_encoding])
        prefix, body = self._frame(payload)
        if len(body) <= 65536:
            self.send_data(b"".join((prefix, body)))
        else:
            self.send_data(prefix)
            self.send_data(body)

    async def writable(self) -> None:
        """Wait while the client leaves too much of the response unread (responses or bytes).

        The requests of one ``ModelStreamInfer`` stream wait here together, on one event: a drain
        wakes them all, and one of them cancelled leaves the others waiting. (A future kept for each
        waiter in one attribute left all but the last waiting for good; one future shared by all
        would be cancelled with the first waiter cancelled, failing the others.)"""
        app = self.app
        while (
            len(self.outbox) >= app.max_response_pool_size or self.outbox_bytes >= app.max_unsent_bytes
        ) and not self.closed:
            if self._drained is None:
                self._drained = asyncio.Event()
            self._drained.clear()  # nothing awaits between the check above and the wait
            await self._drained.wait()

    def on_drained(self) -> None:
        if self._drained is not None:
            self._drained.set()

    def finish(self, code: StatusCode, message: str = "") -> None:
        """End the call with a status (OK after a streamed response, or an error at any time)."""
        if self.finished or self.closed:
            return
        self.finished = True
        self._stop_timer()
        self._release()
        if self.headers_sent:
            self.send_trailers(_TRAILERS_OK if code == StatusCode.OK else status_block(code, message))
        else:
            self.headers_sent = True
            self.send_headers(_HEAD + status_block(code, message), end_stream=True)
        self._wake()

    def _http_error(self, status: str, message: str) -> None:
        self.finished = True
        self.headers_sent = True
        block = encode_header(":status", status) + status_block(StatusCode.INTERNAL, message)
        self.send_headers(block, end_stream=True)

    # -- ending ------------------------------------------------------------------------------------

    def _deadline_passed(self) -> None:
        self.timer = None
        task = self.task
        self.finish(StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        if task is not None:
            task.cancel()

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _release(self) -> None:
        if self._reserved:
            self.app.budget.give(self._reserved)
            self._reserved = 0
        self._buffer = None
        self._queue.clear()

    def on_reset(self, code: int) -> None:
        self.finished = True
        self._stop_timer()
        self._release()
        self._wake()
        self.on_drained()
        if self.task is not None:
            self.task.cancel()

    async def _run_unary(self, method: Method, request: bytes | memoryview) -> None:
        assert method.handler is not None
        try:
            if type(request) is compression.Deflated:
                request = await compression.inflated(
                    request, self.request_encoding, self.app.max_message_size
                )
            reply = await method.handler(request, self)
            if self.response_encoding is not None:
                reply = await compression.deflated_reply(reply, self.response_encoding)
        except asyncio.CancelledError:
            return  # reset, deadline or shutdown: already answered, or no one is listening
        except Exception as exc:
            code, message = status_of(exc, method.name)
            exc.__traceback__ = None  # drop the frames (and what they hold) now, not at a GC pass
            self.finish(code, message)
        else:
            self.respond(reply)
        finally:
            self.task = None

    async def _run_stream(self, method: Method) -> None:
        assert method.stream_handler is not None
        try:
            await method.stream_handler(self)
        except asyncio.CancelledError:
            return
        except Exception as exc:
            code, message = status_of(exc, method.name)
            exc.__traceback__ = None
            self.finish(code, message)
        else:
            self.finish(StatusCode.OK)
        finally:
            self.task = None

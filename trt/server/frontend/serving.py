"""The core's side of one worker's channel: run each forwarded request on the real apps, answer it.

HTTP requests go to the same ``HttpApp`` a single-process server runs, gRPC calls to the same method
table (``GrpcInferenceService``, ``HealthService``) through ``RemoteCall``, which stands in for the
worker's ``GrpcCall``. Every model, scheduler, statistic and registry therefore stays in this process.
Streamed answers (server-sent events, ``ModelStreamInfer``) travel a piece at a time with a window of
``STREAM_WINDOW`` pieces the worker has not yet written: a client that stops reading holds up the
request that produces them, not the core's memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Coroutine
from typing import Any, cast

from trt.server.frontend import messages as m
from trt.server.frontend.channel import Channel
from trt.server.frontend.layouts import Layout, LayoutError, LayoutTable, answer_message
from trt.server.grpc.app import Method, Reply
from trt.server.grpc.call import GrpcCall
from trt.server.grpc.errors import StatusCode, status_of
from trt.server.http.app import HttpApp
from trt.server.http.messages import Handler, HttpRequest, HttpResponse, close_stream, unspelt_headers

logger = logging.getLogger("trt.frontend")

STREAM_WINDOW = 16
_INTERNAL = HttpResponse(500, b'{"error":"internal error"}', [(b"content-type", b"application/json")])


class _Window:
    """Streamed pieces sent and not yet written by the worker. The requests of one
    ``ModelStreamInfer`` stream wait for room together, on one event, as in ``GrpcCall.writable``:
    a written piece wakes them all, and one of them cancelled leaves the others waiting."""

    def __init__(self) -> None:
        self.unwritten = 0
        self._room: asyncio.Event | None = None  # made when a piece first waits for room

    async def wait(self) -> None:
        while self.unwritten >= STREAM_WINDOW:
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()
        self.unwritten += 1

    def written(self) -> None:
        self.unwritten -= 1
        if self._room is not None:
            self._room.set()


class RemoteCall:
    """What gRPC handlers use of a ``GrpcCall``, for a call whose stream lives in a worker."""

    response_encoding: str | None = None  # the worker, which holds the client's stream, compresses

    def __init__(self, session: WorkerSession, number: int, metadata: list[tuple[str, str]]) -> None:
        self.session = session
        self.number = number
        self.metadata = metadata  # what the worker sent of the call's (see GrpcUnary)
        self.opened_ns = 0  # tracing measures from decoding: the worker's read time is not here
        self.reply: bytes | None = None
        self.window = _Window()
        self._queue: deque[bytes] = deque()
        self._done_reading = False
        self._waiter: asyncio.Future[None] | None = None

    # -- unary --------------------------------------------------------------------------------------

    def respond(self, reply: Reply) -> None:
        if reply is not None and self.reply is None:
            self.reply = bytes(reply) if isinstance(reply, bytes | memoryview) else reply.SerializeToString()

    def respond_parts(self, parts: list[bytes | memoryview]) -> None:
        self.respond(b"".join(parts))

    # -- streaming ----------------------------------------------------------------------------------

    def push(self, data: bytes | None) -> None:
        """A message from the client, or None: it ended its side."""
        if data is None:
            self._done_reading = True
        else:
            self._queue.append(data)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def requests(self) -> AsyncIterator[bytes | memoryview]:
        while True:
            while self._queue:
                yield self._queue.popleft()
            if self._done_reading:
                return
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            self._waiter = None

    async def writable(self) -> None:
        await self.window.wait()

    def send_message(self, payload: bytes | memoryview) -> None:
        self.session.channel_send(m.Chunk(self.number, bytes(payload)))


class WorkerSession:
    """One worker's calls at the core, each a task; all of them cancelled when the worker goes."""

    def __init__(self, index: int, http_app: Handler | None, methods: dict[str, Method]) -> None:
        self.index = index
        self.http_app = http_app
        self.methods = methods
        self.channel: Channel | None = None
        self.ready = asyncio.get_running_loop().create_future()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._calls: dict[int, RemoteCall] = {}
        self._http_windows: dict[int, _Window] = {}
        # Binary inference requests sent apart (``layouts``), where the HttpApp takes them.
        self.layouts: LayoutTable | None = None
        if isinstance(http_app, HttpApp) and http_app.answers_split:
            self.layouts = LayoutTable(http_app.infer_route)

    def channel_send(self, message: m.Message) -> None:
        if self.channel is not None:
            self.channel.send(message)

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def on_message(self, message: m.Message) -> None:
        if isinstance(message, m.InferCall):
            try:
                layout = self._layout_table().get(message.layout)
            except LayoutError as exc:
                self._broken(str(exc))
                return
            self._start(message.call, self._infer(message, layout))
        elif isinstance(message, m.InferLayout):
            try:
                self._layout_table().define(message)
            except LayoutError as exc:
                self._broken(str(exc))
                return
            logger.debug(
                "frontend worker %d: layout %d for model '%s', a JSON header of %d bytes",
                self.index, message.layout, message.model_name, len(message.header),
            )  # fmt: skip
        elif isinstance(message, m.HttpCall):
            self._start(message.call, self._http(message))
        elif isinstance(message, m.GrpcUnary):
            self._start(message.call, self._unary(message))
        elif isinstance(message, m.GrpcMessage):
            if (call := self._calls.get(message.call)) is not None:
                call.push(message.data)
        elif isinstance(message, m.GrpcOpen):
            self._calls[message.call] = RemoteCall(self, message.call, message.metadata)
            self._start(message.call, self._stream(message))
        elif isinstance(message, m.GrpcHalfClose):
            if (call := self._calls.get(message.call)) is not None:
                call.push(None)
        elif isinstance(message, m.Written):
            window = self._http_windows.get(message.call)
            if window is None and (call := self._calls.get(message.call)) is not None:
                window = call.window
            if window is not None:
                window.written()
        elif isinstance(message, m.Cancel):
            if (task := self._tasks.get(message.call)) is not None:
                task.cancel()
        elif isinstance(message, m.Ready):
            if not self.ready.done():
                self.ready.set_result(message.pid)
        else:  # a core -> worker message from a worker: it is broken, drop it
            self._broken(f"it sent a {type(message).__name__}")

    def _broken(self, why: str) -> None:
        logger.error("frontend worker %d is broken (%s); closing its channel", self.index, why)
        if self.channel is not None:
            self.channel.close()

    def _layout_table(self) -> LayoutTable:
        if self.layouts is None:
            raise LayoutError("a layout sent where none is taken (no HTTP, or inference is restricted)")
        return self.layouts

    def on_closed(self) -> None:
        """The worker is gone: nothing it forwarded can be answered, so all of it stops here."""
        for task in list(self._tasks.values()):
            task.cancel()
        if not self.ready.done():
            self.ready.set_result(0)

    def _start(self, number: int, work: Coroutine[Any, Any, None]) -> None:
        if number in self._tasks:  # a worker reusing a live number is broken
            self._broken(f"it reused call {number}")
            work.close()
            return
        task = asyncio.get_running_loop().create_task(work)
        self._tasks[number] = task
        task.add_done_callback(lambda _: self._ended(number))

    def _ended(self, number: int) -> None:
        self._tasks.pop(number, None)
        self._calls.pop(number, None)
        self._http_windows.pop(number, None)

    # -- HTTP ---------------------------------------------------------------------------------------

    async def _infer(self, message: m.InferCall, layout: Layout) -> None:
        app = cast(HttpApp, self.http_app)  # there is a layout table only for an HttpApp
        response = await app.answer_split(
            layout.route, layout.header, message.binary, message.started_ns, message.received_ns
        )
        self.channel_send(answer_message(message.call, response))
        if response.sent is not None:
            response.sent()

    async def _http(self, message: m.HttpCall) -> None:
        if self.http_app is None:
            return
        headers, spellings = unspelt_headers(message.headers)
        request = HttpRequest(
            message.method, message.path, message.query, headers, message.body,
            started_ns=message.started_ns, received_ns=message.received_ns, header_spellings=spellings,
        )  # fmt: skip
        try:
            response = await self.http_app(request)
        except Exception:
            logger.exception("unhandled error answering %s %s", request.method, request.path)
            response = _INTERNAL
        if response.stream is None:
            self.channel_send(
                m.HttpAnswer(message.call, response.status, response.headers, response.body, False)
            )
            if response.sent is not None:
                response.sent()
            return
        window = self._http_windows[message.call] = _Window()
        self.channel_send(m.HttpAnswer(message.call, response.status, response.headers, b"", True))
        try:
            async for chunk in response.stream:
                if chunk:
                    await window.wait()
                    self.channel_send(m.Chunk(message.call, chunk))
        except Exception:  # the head went out already: the client gets the stream cut short
            logger.exception("unhandled error streaming %s %s", request.method, request.path)
        finally:
            await close_stream(response.stream)
        self.channel_send(m.End(message.call))  # not after a cancellation: no one waits for it

    # -- gRPC ---------------------------------------------------------------------------------------

    async def _unary(self, message: m.GrpcUnary) -> None:
        method = self.methods.get(message.path)
        if method is None or method.handler is None:
            self.channel_send(
                m.GrpcFinish(message.call, StatusCode.UNIMPLEMENTED, f"Method not found: {message.path}")
            )
            return
        call = RemoteCall(self, message.call, message.metadata)
        try:
            # RemoteCall has every part of GrpcCall the handlers use (respond, respond_parts, opened_ns)
            reply = await method.handler(message.data, cast(GrpcCall, call))
        except Exception as exc:
            code, text = status_of(exc, method.name)
            exc.__traceback__ = None
            self.channel_send(m.GrpcFinish(message.call, code, text))
            return
        call.respond(reply)
        if call.reply is None:
            self.channel_send(m.GrpcFinish(message.call, StatusCode.INTERNAL, "the handler sent no reply"))
        else:
            self.channel_send(m.GrpcReply(message.call, call.reply))

    async def _stream(self, message: m.GrpcOpen) -> None:
        method = self.methods.get(message.path)
        call = self._calls[message.call]
        if method is None or method.stream_handler is None:
            self.channel_send(
                m.GrpcFinish(message.call, StatusCode.UNIMPLEMENTED, f"Method not found: {message.path}")
            )
            return
        try:
            # requests(), writable() and send_message() are what streaming handlers use of a call
            await method.stream_handler(cast(GrpcCall, call))
        except Exception as exc:
            code, text = status_of(exc, method.name)
            exc.__traceback__ = None
            self.channel_send(m.GrpcFinish(message.call, code, text))
            return
        self.channel_send(m.GrpcFinish(message.call, StatusCode.OK, ""))

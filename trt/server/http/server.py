"""The HTTP server: its listening socket, its connections (``protocol.HttpProtocol``), what they
share (limits, the byte bound, the heads seen before) and how it stops."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable

from trt.server.core.scheduling.queued_bytes import QueuedBytes
from trt.server.http.heads import HeadCache
from trt.server.http.limits import HttpLimits, too_large
from trt.server.http.messages import Handler, HttpResponse
from trt.server.http.protocol import HttpProtocol


def _too_large(limit: int) -> HttpResponse:
    return HttpResponse(*too_large(limit))


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
        heads: HeadCache | None = None,
        keep_header_spelling: bool = False,
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
        # Heads seen before, shared by every connection (``heads``); None: each is parsed.
        self.heads = heads if heads is not None else HeadCache()
        # Header names as the client spelt them go with each request (``HttpRequest.header_spellings``):
        # for forwarding headers to models, which Triton does in the client's spelling.
        self.keep_header_spelling = keep_header_spelling
        self.connections: set[HttpProtocol] = set()
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: HttpProtocol(self.handler, self), sock=sock, ssl=self.ssl_context
        )
        self._sweeper = loop.create_task(self._sweep())

    async def _sweep(self) -> None:
        """Now and then: 408 for requests arriving too slowly (``HttpLimits``' deadlines), and close
        connections idle too long."""
        loop = asyncio.get_running_loop()
        limits = self.limits
        while True:
            await asyncio.sleep(min(10.0, self.idle_timeout, limits.head_timeout, limits.body_timeout))
            now, now_ns = loop.time(), time.perf_counter_ns()
            for connection in list(self.connections):
                connection.time_out(now_ns)
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
        # Waited for: connections answering a request or still writing an answer out. An idle one is
        # closed already, but over TLS the close waits for the client's close_notify, which a
        # keep-alive client that is not reading never sends: those are cut once nothing else is left.
        while loop.time() < deadline and any(not connection.settled for connection in self.connections):
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            connection.abort()
        # A handler that holds resources of its own lets them go with its server (the OpenAI
        # front end's token counting process).
        closing = getattr(self.handler, "aclose", None)
        if closing is not None:
            await closing()

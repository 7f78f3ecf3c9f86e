"""A keep-alive HTTP/1.1 connection as an asyncio Protocol: one request in flight, no per-request parsing
beyond the status line and the body length."""

from __future__ import annotations

import asyncio
import time
from typing import cast

from trt.perf.transport import ConnectionLost, RequestFailed
from trt.perf.transport.http_wire import ResponseHead, chunked_body_end, error_message, parse_head


class _ResponseReader(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self.head: ResponseHead | None = None
        self.first_byte_ns = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionLost(f"connection closed by the server ({exc or 'EOF'})"))

    def data_received(self, data: bytes) -> None:
        if not self.buffer:
            self.first_byte_ns = time.perf_counter_ns()
        self.buffer += data
        self._complete()

    def _complete(self) -> None:
        if self.head is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head = parse_head(self.buffer, end)
        head = self.head
        if head.length >= 0:
            end = head.head_size + head.length
            if len(self.buffer) < end:
                return
            body = bytes(self.buffer[head.head_size : end]) if head.status != 200 else b""
        else:
            end, body = chunked_body_end(self.buffer, head.head_size)
            if end < 0:
                return
        del self.buffer[:end]
        self.head = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((head.status, body, head.keep_alive))


class AsyncHttpConnection:
    """``await infer(payload)`` sends pre-framed bytes and waits for the whole response."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: _ResponseReader | None = None
        self.last_send_ns = 0
        self.last_recv_ns = 0

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, reader = await loop.create_connection(_ResponseReader, self.host, self.port)
        except OSError as error:
            raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: {error}") from error
        self._reader = reader

    async def infer(self, payload: bytes) -> int:
        reader = self._reader
        if reader is None or reader.closed:
            await self.connect()
            reader = self._reader
        assert reader is not None and reader.transport is not None
        start = time.perf_counter_ns()
        waiter: asyncio.Future[tuple[int, bytes, bool]] = asyncio.get_running_loop().create_future()
        reader.waiter = waiter
        reader.transport.write(payload)
        self.last_send_ns = time.perf_counter_ns() - start
        try:
            status, body, keep_alive = await waiter
        finally:
            reader.waiter = None
        self.last_recv_ns = time.perf_counter_ns() - reader.first_byte_ns
        if not keep_alive:
            self.close()
        if status != 200:
            raise RequestFailed(error_message(status, body))
        return 1

    def close(self) -> None:
        if self._reader is not None and self._reader.transport is not None:
            self._reader.transport.close()
        self._reader = None

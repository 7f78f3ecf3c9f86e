"""One keep-alive HTTP/1.1 connection that POSTs a JSON body and reads the answer as it arrives, each
piece timestamped when it was read: the client side of streamed generation over HTTP.

Bounded on everything a server sends: the head (64 KiB), a chunk-size line, and the whole body."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from trt.perf.transport import ConnectionLost, RequestFailed

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 2**20
READ_BYTES = 64 * 1024

OnBytes = Callable[[bytes, int], None]  # (body bytes, perf_counter_ns when they were read)


class HttpStreamConnection:
    def __init__(self, host: str, port: int, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.host, self.port = host, port
        self.extra_headers = "".join(f"{name}: {value}\r\n" for name, value in headers)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.status = 0  # of the answer being read: known before its body is handed over

    async def _connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, limit=MAX_HEAD_BYTES
            )
        except OSError as error:
            raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: {error}") from error

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def post(self, path: str, body: bytes, on_bytes: OnBytes, accept: str) -> int:
        """Send the request; ``on_bytes`` gets the response body as it arrives. Returns the status;
        a body of a non-2xx answer is still given to ``on_bytes``. Retries once on a stale connection."""
        for attempt in (1, 2):
            fresh = self._writer is None
            if fresh:
                await self._connect()
            try:
                return await self._exchange(path, body, on_bytes, accept)
            except _Stale as error:
                self.close()
                if fresh or attempt == 2:
                    raise ConnectionLost(f"connection to {self.host}:{self.port} closed: {error}") from None
            except (ConnectionError, asyncio.IncompleteReadError) as error:
                self.close()
                raise ConnectionLost(f"connection to {self.host}:{self.port} lost: {error}") from None
            except RequestFailed:
                self.close()
                raise
            except (asyncio.LimitOverrunError, ValueError) as error:
                self.close()
                raise RequestFailed(f"malformed response from {self.host}:{self.port}: {error}") from None
        raise AssertionError("unreachable")

    async def _exchange(self, path: str, body: bytes, on_bytes: OnBytes, accept: str) -> int:
        assert self._reader is not None and self._writer is not None
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Accept: {accept}\r\nContent-Length: {len(body)}\r\n{self.extra_headers}\r\n"
        )
        try:
            self._writer.write(head.encode("latin-1") + body)
            await self._writer.drain()
            raw = await self._reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise RequestFailed(f"response head larger than {MAX_HEAD_BYTES} bytes") from None
        except asyncio.IncompleteReadError as error:
            if not error.partial:
                raise _Stale("closed before answering") from None  # a keep-alive the server had dropped
            raise
        except ConnectionError as error:
            raise _Stale(str(error)) from None
        status, headers = _parse_head(raw)
        self.status = status
        keep_alive = headers.get("connection", "").lower() != "close"
        reader = self._reader
        total = 0

        def deliver(data: bytes) -> None:
            nonlocal total
            total += len(data)
            if total > MAX_BODY_BYTES:
                raise RequestFailed(f"response body larger than {MAX_BODY_BYTES} bytes")
            on_bytes(data, time.perf_counter_ns())

        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readuntil(b"\r\n")
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise RequestFailed(f"bad chunk size line {size_line[:40]!r}") from None
                if size == 0:
                    await _trailers(reader)
                    break
                if size > MAX_BODY_BYTES:
                    raise RequestFailed(f"chunk of {size} bytes is too large")
                remaining = size
                while remaining:
                    data = await reader.read(min(remaining, READ_BYTES))
                    if not data:
                        raise ConnectionLost("connection closed inside a chunk")
                    remaining -= len(data)
                    deliver(data)
                await reader.readexactly(2)
        elif "content-length" in headers:
            remaining = int(headers["content-length"])
            if remaining > MAX_BODY_BYTES:
                raise RequestFailed(f"response body of {remaining} bytes is too large")
            while remaining:
                data = await reader.read(min(remaining, READ_BYTES))
                if not data:
                    raise ConnectionLost("connection closed inside the body")
                remaining -= len(data)
                deliver(data)
        else:
            keep_alive = False
            while data := await reader.read(READ_BYTES):
                deliver(data)
        if not keep_alive:
            self.close()
        return status


class _Stale(Exception):
    """The connection was gone before the server read the request: safe to send it again."""


async def _trailers(reader: asyncio.StreamReader) -> None:
    """Read the (usually empty) trailer section after the last chunk."""
    while (await reader.readuntil(b"\r\n")) != b"\r\n":
        pass


def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not (parts[1].isascii() and parts[1].isdigit()):
        raise RequestFailed(f"not an HTTP response: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers

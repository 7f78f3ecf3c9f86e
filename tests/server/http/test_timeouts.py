"""Connections are not held for ever: one the client leaves idle is closed after the idle timeout, and a
request head that trickles in (slowloris: a header line now and then, each resetting the idle timeout)
is answered 408 and closed once it has taken longer than the head timeout. A body has its own deadline,
which grows with the bytes it delivers: a byte now and then is cut off, a slow steady upload is not, and
neither is a body the server itself stopped reading while it worked through a backlog. A request whose
answer takes longer than any of them is not cut short, and a head that arrives in pieces within the
deadline is served.

A real loopback socket and asyncio's own transport; short timeouts so that each case takes about a
second. The bounds on when a connection closes are loose (a second after the deadline's sweep): the
suite runs beside other tests."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from trt.server.http.limits import HttpLimits
from trt.server.http.messages import HttpRequest, HttpResponse
from trt.server.http.server import HttpServer

TIMEOUT_S = 0.5  # the idle, head and body timeouts; the sweep runs this often
MIN_RATE = 1000  # bytes a second that extend a body's deadline by a second
_released = asyncio.Event()  # /held answers once it is set


async def _answer(request: HttpRequest) -> HttpResponse:
    if request.path == "/slow":
        await asyncio.sleep(3 * TIMEOUT_S)
    if request.path == "/held":
        await _released.wait()
    return HttpResponse(200, b"answered " + request.path.encode() + b" %d" % len(request.body))


@asynccontextmanager
async def _server() -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    limits = HttpLimits(head_timeout=TIMEOUT_S, body_timeout=TIMEOUT_S, body_min_rate=MIN_RATE)
    server = HttpServer(_answer, limits, idle_timeout=TIMEOUT_S)
    await server.start(sock)
    try:
        yield sock.getsockname()[1]
    finally:
        await server.stop(1.0)


async def _read_until_closed(reader: asyncio.StreamReader, within_s: float) -> bytes:
    """Everything the server writes until it closes the connection; fails if it has not by then."""
    received = bytearray()
    deadline = time.monotonic() + within_s
    while True:
        chunk = await asyncio.wait_for(reader.read(65536), max(deadline - time.monotonic(), 0.01))
        if not chunk:
            return bytes(received)
        received += chunk


def test_an_idle_connection_is_closed_after_the_idle_timeout() -> None:
    async def scenario() -> None:
        async with _server() as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /first HTTP/1.1\r\nHost: a\r\n\r\n")
            started = time.monotonic()
            received = await _read_until_closed(reader, within_s=TIMEOUT_S * 2 + 2)
            assert received.startswith(b"HTTP/1.1 200 ") and received.endswith(b"answered /first 0")
            assert time.monotonic() - started >= TIMEOUT_S  # kept open, idle, until the timeout
            writer.close()

    asyncio.run(scenario())


async def _trickled(port: int, first: bytes, piece: Callable[[int], bytes]) -> tuple[bytes, float]:
    """What the server writes until it closes the connection, while ``first`` is followed by a piece
    every fifth of the idle timeout (each resetting it), for ever; and the seconds that took."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(first)
    started = time.monotonic()

    async def trickle() -> None:
        for index in range(1000):
            await asyncio.sleep(TIMEOUT_S / 5)
            writer.write(piece(index))

    trickling = asyncio.create_task(trickle())
    try:
        received = await _read_until_closed(reader, within_s=TIMEOUT_S * 2 + 2)
    finally:
        trickling.cancel()
        writer.close()
    return received, time.monotonic() - started


def test_a_head_trickling_in_past_the_head_timeout_is_answered_408_and_closed() -> None:
    async def scenario() -> None:
        async with _server() as port:
            first = b"GET /trickled HTTP/1.1\r\nHost: a\r\n"
            received, took = await _trickled(port, first, lambda index: b"X-Slow-%d: 1\r\n" % index)
            assert received.startswith(b"HTTP/1.1 408 "), received
            assert (
                b"did not arrive whole within 0.5 s" in received and b"connection: close" in received.lower()
            )
            assert took >= TIMEOUT_S

    asyncio.run(scenario())


def test_a_head_in_pieces_within_the_deadline_and_a_slow_answer_are_served_whole() -> None:
    async def scenario() -> None:
        async with _server() as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for piece in (b"GET /slow HTTP/1.1\r\n", b"Host: a\r\n", b"X-Piece: 1\r\n", b"\r\n"):
                writer.write(piece)
                await asyncio.sleep(TIMEOUT_S / 10)
            # The answer takes three timeouts: a request being answered is neither idle nor in its head.
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT_S * 3 + 5)
            assert head.startswith(b"HTTP/1.1 200 "), head
            assert await reader.readexactly(len(b"answered /slow 0")) == b"answered /slow 0"
            writer.close()

    asyncio.run(scenario())


def test_a_body_trickling_in_slower_than_its_deadline_grows_is_answered_408_and_closed() -> None:
    async def scenario() -> None:
        async with _server() as port:
            first = b"POST /trickled HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n"
            # a byte every fifth of the idle timeout: 1 ms more of the body's deadline each
            received, took = await _trickled(port, first, lambda index: b"x")
            assert received.startswith(b"HTTP/1.1 408 "), received
            expected = (
                b"the request body did not arrive whole within 1 s (0.5 s, and 1 s more for every 1000 bytes"
            )
            assert expected in received and b"connection: close" in received.lower()
            assert took >= TIMEOUT_S

    asyncio.run(scenario())


def test_a_slow_steady_body_past_the_body_timeout_is_served_whole() -> None:
    async def scenario() -> None:
        async with _server() as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /steady HTTP/1.1\r\nHost: a\r\nContent-Length: 3000\r\n\r\n")
            for _ in range(15):  # 3,000 bytes over 1.5 s, three body timeouts: twice the minimum rate
                writer.write(b"x" * 200)
                await asyncio.sleep(TIMEOUT_S / 5)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200 "), head
            assert await reader.readexactly(len(b"answered /steady 3000")) == b"answered /steady 3000"
            writer.close()

    asyncio.run(scenario())


def test_a_body_the_server_stopped_reading_for_its_own_backlog_is_not_timed_out() -> None:
    async def scenario() -> None:
        _released.clear()
        async with _server() as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # One request the handler holds, 33 behind it (over the 32 pipelined that pause reading),
            # then a body cut short: the server stops reading, through no fault of the client's.
            backlog = (
                b"GET /held HTTP/1.1\r\nHost: a\r\n\r\n" + b"GET /queued HTTP/1.1\r\nHost: a\r\n\r\n" * 33
            )
            writer.write(backlog + b"POST /last HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n12345")
            await asyncio.sleep(TIMEOUT_S * 4)  # the body's deadline, twice over, with the sweep running
            _released.set()
            writer.write(b"67890")
            received = bytearray()
            while received.count(b"answered") < 35:
                chunk = await asyncio.wait_for(reader.read(65536), 5)
                assert chunk, bytes(received[-300:])
                received += chunk
            assert b" 408 " not in received
            assert received.endswith(b"answered /last 10")
            writer.close()

    asyncio.run(scenario())

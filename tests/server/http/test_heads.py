"""A request head seen before is looked up instead of parsed: each request still gets its own body,
framing, limits and byte accounting, and heads the parser must see every time are never remembered.

The protocol runs in-process over an in-memory transport (the bytes a socket would deliver, in the
pieces a socket might deliver them), with a handler that records what it was given."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from trt.server.core.scheduling.queued_bytes import QueuedBytes
from trt.server.http.heads import HeadCache
from trt.server.http.messages import HttpRequest, HttpResponse
from trt.server.http.protocol import HttpProtocol
from trt.server.http.server import HttpServer


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Connection:
    """One connection to an ``HttpServer`` whose handler echoes each request's body and records it."""

    def __init__(self, server: HttpServer, seen: list[HttpRequest]) -> None:
        self.protocol = HttpProtocol(server.handler, server)
        self.transport = _Transport()
        self.protocol.connection_made(self.transport)
        self.seen = seen

    async def send(self, *pieces: bytes) -> None:
        for piece in pieces:
            self.protocol.data_received(piece)
        for _ in range(20):  # let the connection's task answer
            await asyncio.sleep(0)

    def answers(self) -> list[tuple[int, bytes]]:
        """(status, body) of every answer written so far, in order; then forgotten."""
        data, found = bytes(self.transport.written), []
        while data:
            head, _, rest = data.partition(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if status == 100:  # "go on" to a client that expects it: no body, not an answer
                data = rest
                continue
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            found.append((status, rest[:length]))
            data = rest[length:]
        self.transport.written.clear()
        return found


def _in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test in an event loop of its own (the protocol needs a running loop)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def _post(body: bytes, path: bytes = b"/v2/models/m/infer", extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s" % (path, extra, len(body), body)


def _echo_server(**options: Any) -> tuple[HttpServer, list[HttpRequest]]:
    """A server whose handler echoes each request's body, and the requests it was handed."""
    seen: list[HttpRequest] = []

    async def echo(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse(200, request.body)

    return HttpServer(echo, **options), seen


@pytest.fixture
def served() -> Iterator[tuple[HttpServer, list[HttpRequest]]]:
    yield _echo_server(queued_bytes=QueuedBytes(1 << 20))


def _connect(served: tuple[HttpServer, list[HttpRequest]]) -> _Connection:
    return _Connection(*served)


@_in_loop
async def test_a_repeated_head_is_looked_up_and_each_request_keeps_its_own_body(
    served: tuple[HttpServer, list[HttpRequest]],
) -> None:
    server, seen = served
    connection = _connect(served)
    await connection.send(_post(b"first"))
    await connection.send(_post(b"secnd"))  # the same head: same path, headers and length
    await connection.send(_post(b"third"))
    assert connection.answers() == [(200, b"first"), (200, b"secnd"), (200, b"third")]
    assert [request.plan is not None for request in seen] == [True, True, True]  # the first made it
    assert len({id(request.plan) for request in seen}) == 1 and len(server.heads) == 1
    assert seen[1].method == "POST" and seen[1].path == "/v2/models/m/infer"
    assert seen[1].headers == {"host": "x", "content-length": "5"}


@_in_loop
async def test_a_remembered_head_whose_body_arrives_in_pieces(
    served: tuple[HttpServer, list[HttpRequest]],
) -> None:
    connection = _connect(served)
    await connection.send(_post(b"0123456789"))
    request = _post(b"abcdefghij")
    head_end = request.index(b"\r\n\r\n") + 4
    await connection.send(request[:head_end], request[head_end : head_end + 3], request[head_end + 3 :])
    await connection.send(request[: head_end + 6])
    assert connection.answers() == [(200, b"0123456789"), (200, b"abcdefghij")]
    await connection.send(request[head_end + 6 :])
    assert connection.answers() == [(200, b"abcdef" + b"ghij")]


@_in_loop
async def test_pipelined_requests_mixing_remembered_and_new_heads_are_answered_in_order(
    served: tuple[HttpServer, list[HttpRequest]],
) -> None:
    _, seen = served
    connection = _connect(served)
    await connection.send(_post(b"aa"))
    other = _post(b"other", b"/v2/models/other/infer")
    await connection.send(_post(b"bb") + _post(b"cc") + other + _post(b"dd"))
    assert [body for _, body in connection.answers()] == [b"aa", b"bb", b"cc", b"other", b"dd"]
    assert seen[3].path == "/v2/models/other/infer" and seen[3].plan is None  # it came pipelined: parsed
    await connection.send(other)  # alone in its read: now remembered
    await connection.send(other)
    assert seen[-1].plan is not None and seen[-1].path == "/v2/models/other/infer"


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(
            b"POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            id="chunked",
        ),
        pytest.param(_post(b"abc", extra=b"Expect: 100-continue\r\n"), id="expect-100-continue"),
        pytest.param(_post(b"abc", extra=b"X-Long: " + b"y" * 5000 + b"\r\n"), id="head-over-4-KiB"),
    ],
)
@_in_loop
async def test_heads_the_parser_must_see_each_time_are_not_remembered(
    served: tuple[HttpServer, list[HttpRequest]], request_bytes: bytes
) -> None:
    server, seen = served
    connection = _connect(served)
    for _ in range(3):
        await connection.send(request_bytes)
    assert [status for status, _ in connection.answers()] == [200, 200, 200]
    assert [request.plan for request in seen] == [None, None, None]
    assert len(server.heads) == 0


@_in_loop
async def test_a_head_is_remembered_only_from_a_read_that_began_with_it_and_held_nothing_after(
    served: tuple[HttpServer, list[HttpRequest]],
) -> None:
    """The parser's view of a head is known to be exactly the bytes before the first blank line only
    when the read held the message and nothing else: leading blank lines, say, are not a head."""
    server, seen = served
    connection = _connect(served)
    request = _post(b"body")
    await connection.send(request[:10], request[10:])  # split: parsed, not remembered
    await connection.send(b"\r\n\r\n" + request)  # a blank line before: parsed, not remembered
    assert [status for status, _ in connection.answers()][:1] == [200]
    assert len(server.heads) == 0 and all(request.plan is None for request in seen)
    await connection.send(b"\r\n\r\n")
    assert len(server.heads) == 0


@_in_loop
async def test_a_head_whose_body_came_in_later_reads_is_remembered_too(
    served: tuple[HttpServer, list[HttpRequest]],
) -> None:
    """A large body never arrives in the read that holds its head: before, such heads were parsed every
    time, and httptools handed their bodies over as copies, 64 KiB at a time, on the event loop."""
    server, seen = served
    connection = _connect(served)
    body = bytes(range(256)) * 1000
    request = _post(body)
    head_end = request.index(b"\r\n\r\n") + 4
    for _ in range(2):
        await connection.send(request[: head_end + 100], request[head_end + 100 : 150_000], request[150_000:])
    assert connection.answers() == [(200, body), (200, body)]
    assert len(server.heads) == 1
    assert [request.plan is not None for request in seen] == [True, True]  # the first made it
    assert len({id(request.plan) for request in seen}) == 1


@_in_loop
async def test_the_cache_keeps_at_most_its_bound_the_oldest_going_first() -> None:
    server, seen = _echo_server(heads=HeadCache(max_heads=2))
    connection = _Connection(server, seen)
    for path in (b"/a", b"/b", b"/c"):
        await connection.send(_post(b"x", path))
    assert len(server.heads) == 2
    await connection.send(_post(b"x", b"/a"))  # forgotten: parsed again (and remembered again)
    await connection.send(_post(b"x", b"/c"))
    assert seen[-2].plan is not None and seen[-2].path == "/a"
    assert len(server.heads) == 2
    assert server.heads.get(_post(b"x", b"/b")[:-1]) is None


@_in_loop
async def test_a_remembered_head_still_counts_its_body_against_the_servers_bound() -> None:
    seen: list[HttpRequest] = []
    budget = QueuedBytes(100)

    async def hold(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse(200, request.body)

    server = HttpServer(hold, queued_bytes=budget)
    connection = _Connection(server, seen)
    await connection.send(_post(b"a" * 60))
    budget.reserve(60)  # someone else holds 60 bytes now: 60 more would pass the bound
    await connection.send(_post(b"b" * 60))
    assert [status for status, _ in connection.answers()] == [200, 503]
    assert seen[-1].plan is not None or len(seen) == 1
    budget.release(60)
    assert budget.held == 0  # the refused body's bytes were handed back
    await connection.send(_post(b"c" * 60))
    assert connection.answers() == [(200, b"c" * 60)]
    assert budget.held == 0


@_in_loop
async def test_http_1_0_keep_alive_is_still_answered_as_http_1_0_needs(
    served: tuple[HttpServer, list[HttpRequest]],
) -> None:
    connection = _connect(served)
    request = b"POST /p HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi"
    for _ in range(2):
        await connection.send(request)
    assert connection.transport.written.count(b"connection: keep-alive") == 2
    assert not connection.transport.closed


@_in_loop
async def test_a_content_length_with_thousands_of_leading_zeros_is_answered_each_time() -> None:
    """httptools takes it (it is 5 with no overflow), int() would not read it: such a head, when a raised
    size limit lets it be remembered, is still parsed each time."""
    server, seen = _echo_server(heads=HeadCache(max_head_bytes=16384))
    connection = _Connection(server, seen)
    request = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %s5\r\n\r\nhello" % (
        b"0" * 5000
    )
    await connection.send(request)
    await connection.send(request)
    assert connection.answers() == [(200, b"hello"), (200, b"hello")]
    assert [request.plan for request in seen] == [None, None]


@_in_loop
async def test_header_spellings_are_kept_only_when_asked_and_also_for_remembered_heads() -> None:
    extra = b"X-Tenant-Id: acme\r\nx-lower: b\r\n"
    spelt_names = {"host": "Host", "x-tenant-id": "X-Tenant-Id", "content-length": "Content-Length"}
    for keep, expected in ((False, None), (True, spelt_names)):
        served = _echo_server(keep_header_spelling=keep)
        connection = _connect(served)
        await connection.send(_post(b"one", extra=extra))
        await connection.send(_post(b"two", extra=extra), _post(b"new", extra=b"Other: c\r\n"))
        _, seen = served
        assert [request.header_spellings for request in seen[:2]] == [expected, expected]
        assert seen[1].plan is not None  # looked up, not parsed
        assert seen[0].headers["x-tenant-id"] == "acme"  # looked up by lower-case name either way
        spelt = seen[0].spelt_headers()
        assert ("X-Tenant-Id" if keep else "x-tenant-id", "acme") in spelt and ("x-lower", "b") in spelt
        # The next request's own spellings, not the last one's
        new = {"host": "Host", "other": "Other", "content-length": "Content-Length"}
        assert seen[2].header_spellings == (new if keep else None)

"""A large body whose head was seen before is read by the transport straight into the bytes object
that becomes the request's body (``body_reader``): the handler gets exactly the bytes sent, a request
pipelined behind it is read by the connection again, the server's byte accounting and deadlines hold,
and it works on uvloop and asyncio's own loop, in the clear and over TLS.

The server runs in-process on a real socket (its event loop in a thread); the clients are sockets."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
import uvloop

from tests.certificates import issue_certificates
from tests.support import read_http_response
from trt.server.core.scheduling.queued_bytes import QueuedBytes
from trt.server.http import unfilled_bytes as unfilled_bytes_module
from trt.server.http.body_reader import READ_INTO_BYTES, BodyReader
from trt.server.http.limits import HttpLimits
from trt.server.http.messages import HttpRequest, HttpResponse
from trt.server.http.server import HttpServer
from trt.server.http.unfilled_bytes import unfilled_bytes

Result = TypeVar("Result")
SIZE = 3 * READ_INTO_BYTES  # a body the reader takes


def test_unfilled_bytes_are_written_through_their_view() -> None:
    made = unfilled_bytes(5)
    assert made is not None
    body, contents = made
    contents[:] = b"abcde"
    del contents
    assert type(body) is bytes and body == b"abcde" and body.decode() == "abcde"
    with pytest.raises(ValueError):
        unfilled_bytes(1)  # CPython's shared one-byte objects must never be written


def test_a_layout_that_is_not_cpythons_is_found_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the characters are not where the offset says, the check reads a known pattern there and
    refuses, before it writes (a write past the object would corrupt the heap): bodies come in pieces."""
    monkeypatch.setattr(unfilled_bytes_module, "_CONTENTS_OFFSET", unfilled_bytes_module._CONTENTS_OFFSET + 8)
    monkeypatch.setattr(unfilled_bytes_module, "_made", lambda size: pytest.fail("wrote before checking"))
    assert not unfilled_bytes_module._layout_holds()


class _Served:
    """An ``HttpServer`` on 127.0.0.1 whose handler echoes each body, on its own loop in a thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, server: HttpServer, port: int) -> None:
        self.loop, self.server, self.port = loop, server, port
        self.seen: list[HttpRequest] = []
        self.context: ssl.SSLContext | None = None

    def call(self, coroutine: Coroutine[Any, Any, Result]) -> Result:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def protocols(self) -> list[str]:
        """The class of each open connection's transport's protocol now."""

        async def look() -> list[str]:
            return [type(c._transport.get_protocol()).__name__ for c in self.server.connections]

        return self.call(look())

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        if self.context is not None:
            return self.context.wrap_socket(sock, server_hostname="127.0.0.1")
        return sock


@contextmanager
def _serving(loop_kind: str, tls: dict[str, str] | None = None, **options: Any) -> Iterator[_Served]:
    loop = uvloop.new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    context = None
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls["server_cert"], tls["server_key"])
    listener = socket.create_server(("127.0.0.1", 0))

    async def echo(request: HttpRequest) -> HttpResponse:
        served.seen.append(request)
        return HttpResponse(200, request.body)

    server = HttpServer(echo, ssl_context=context, **options)
    served = _Served(loop, server, listener.getsockname()[1])
    if tls is not None:
        served.context = ssl.create_default_context(cafile=tls["ca"])
    served.call(server.start(listener))
    try:
        yield served
    finally:
        served.call(server.stop(2))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _post(body: bytes) -> bytes:
    return b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def _answer(sock: socket.socket, buffer: bytearray) -> tuple[int, bytes]:
    """(status, body) of the next answer on ``sock``; what follows it stays in ``buffer``."""
    status, _, body = read_http_response(sock, buffer)
    return status, body


def _body(seed: int) -> bytes:
    return bytes((seed + i) % 251 for i in range(251)) * (SIZE // 251) + b"end"


def _send_slowly(sock: socket.socket, data: bytes, pause_at: int, during_pause: Callable[[], None]) -> None:
    sock.sendall(data[:pause_at])
    time.sleep(0.2)
    during_pause()
    sock.sendall(data[pause_at:])


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return issue_certificates(tmp_path_factory.mktemp("certs"))


@pytest.mark.parametrize("tls", [False, True], ids=["clear", "TLS"])
@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_a_large_body_is_read_into_one_bytes_object(
    loop_kind: str, tls: bool, certificates: dict[str, str]
) -> None:
    with _serving(loop_kind, certificates if tls else None, queued_bytes=QueuedBytes()) as served:
        sock, buffer = served.connect(), bytearray()
        first, second = _body(1), _body(2)
        sock.sendall(_post(first))  # its head is remembered once the parser has read it
        assert _answer(sock, buffer) == (200, first)
        readers: list[list[str]] = []
        _send_slowly(sock, _post(second), 2 * READ_INTO_BYTES, lambda: readers.append(served.protocols()))
        assert _answer(sock, buffer) == (200, second)
        assert readers == [[BodyReader.__name__]]  # halfway, the transport read into the body
        assert served.protocols() == ["HttpProtocol"]  # and then gave the connection back
        assert [type(r.body) for r in served.seen] == [bytes, bytes] and served.seen[1].plan is not None
        assert served.server.queued_bytes is not None and served.server.queued_bytes.held == 0
        sock.close()


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_requests_pipelined_behind_a_large_body_are_read_by_the_connection(loop_kind: str) -> None:
    with _serving(loop_kind) as served:
        sock, buffer = served.connect(), bytearray()
        sock.sendall(_post(_body(0)))
        _answer(sock, buffer)
        small = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
        sock.sendall(_post(_body(3)) + small + _post(_body(4)) + small)
        assert [_answer(sock, buffer) for _ in range(4)] == [
            (200, _body(3)),
            (200, b""),
            (200, _body(4)),
            (200, b""),
        ]
        assert [r.path for r in served.seen[1:]] == ["/v2/models/m/infer", "/v2/health/ready"] * 2


def test_a_body_counts_what_has_come_not_what_its_head_declares() -> None:
    """A client that sends a head and stalls holds only the bytes it sent against the server's
    budget; gone, it holds none, and the server goes on serving."""
    with _serving("uvloop", queued_bytes=QueuedBytes()) as served:
        sock, buffer = served.connect(), bytearray()
        sock.sendall(_post(_body(0)))
        _answer(sock, buffer)
        queued = served.server.queued_bytes
        assert queued is not None
        body = _body(5)
        head_size = len(_post(body)) - len(body)
        sock.sendall(_post(body)[: 2 * READ_INTO_BYTES])
        time.sleep(0.2)
        assert served.protocols() == [BodyReader.__name__]
        assert queued.held == 2 * READ_INTO_BYTES - head_size
        sock.close()
        for _ in range(50):
            if queued.held == 0:
                break
            time.sleep(0.05)
        assert queued.held == 0
        other = served.connect()
        other.sendall(_post(b"still here"))
        assert _answer(other, bytearray()) == (200, b"still here")


def test_a_body_that_stalls_while_read_into_one_gets_408() -> None:
    limits = HttpLimits(body_timeout=0.5, body_min_rate=1 << 30)
    with _serving("uvloop", limits=limits) as served:
        sock, buffer = served.connect(), bytearray()
        sock.sendall(_post(_body(0)))
        _answer(sock, buffer)
        sock.sendall(_post(_body(6))[: 2 * READ_INTO_BYTES])
        time.sleep(0.2)
        assert served.protocols() == [BodyReader.__name__]
        sock.settimeout(15)  # the server's sweep looks every body_timeout seconds
        status, body = _answer(sock, buffer)
        assert status == 408 and b"did not arrive whole" in body


def test_a_body_past_the_servers_budget_midway_is_dropped_read_to_its_end_and_refused() -> None:
    """The reader stops where the server's budget runs out; the connection reads the rest in pieces,
    answers 503, and serves the next request on the same connection."""
    with _serving("uvloop", queued_bytes=QueuedBytes(len(_body(0)) + len(_body(0)) // 2)) as served:
        sock, buffer = served.connect(), bytearray()
        sock.sendall(_post(_body(0)))
        assert _answer(sock, buffer)[0] == 200
        slow = served.connect()
        slow.sendall(_post(_body(7))[: 2 * READ_INTO_BYTES])  # holds 2 MiB of the 4.5
        time.sleep(0.2)
        sock.sendall(_post(_body(8)) + _post(b"next"))  # runs out of budget midway
        status, body = _answer(sock, buffer)
        assert status == 503 and b"max-queued-bytes" in body
        assert _answer(sock, buffer) == (200, b"next")
        slow.close()
        queued = served.server.queued_bytes
        assert queued is not None
        for _ in range(50):
            if queued.held == 0:
                break
            time.sleep(0.05)
        assert queued.held == 0


def test_a_body_dropped_with_its_last_bytes_is_still_answered() -> None:
    """The budget runs out on the very read that ends the body: nothing more comes to end the request
    in pieces, so the reader's connection ends it (it hung until the idle timeout)."""
    with _serving("uvloop", queued_bytes=QueuedBytes()) as served:
        sock, buffer = served.connect(), bytearray()
        sock.sendall(_post(_body(0)))
        assert _answer(sock, buffer)[0] == 200
        queued = served.server.queued_bytes
        assert queued is not None
        queued.limit = len(_body(0)) - 1  # every read fits but the one that brings the last byte
        sock.settimeout(10)
        sock.sendall(_post(_body(9)))  # and nothing after it, to end it
        status, body = _answer(sock, buffer)
        assert status == 503 and b"max-queued-bytes" in body
        sock.sendall(_post(b"next"))
        assert _answer(sock, buffer) == (200, b"next")
        assert queued.held == 0

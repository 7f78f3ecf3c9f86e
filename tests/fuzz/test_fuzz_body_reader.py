"""Bodies read straight into their bytes object (``http.body_reader``), in any pieces, under any byte
budget: the connection answers every request it was sent whole, in order, each with exactly its own
body (or 503 where the server's budget ran out first, 413 past the body limit), never more answers than
requests, and once the client is gone nothing stays counted against the budget.

The client is hypothesis: requests to one path with one head per body length, each head first sent
alone to a server without bounds that shares its head cache (so that the server under test looks the
heads up, and sends their bodies to the reader), bodies of random lengths around the reader's
threshold (lowered here so that examples stay small), the last sometimes sent short, the stream cut
into random pieces. The server is trt's own HTTP/1.1 connection with an echo handler, fed in process
through a transport that hands each read to the protocol it has at the time, as the event loop does.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.connection_harness import RecordingTransport, serve
from trt.server.core.scheduling.queued_bytes import QueuedBytes
from trt.server.http import body_reader
from trt.server.http.heads import HeadCache
from trt.server.http.limits import HttpLimits
from trt.server.http.messages import HttpRequest, HttpResponse
from trt.server.http.protocol import HttpProtocol
from trt.server.http.server import HttpServer

THRESHOLD = 16  # bytes still to come for the reader to take a body (1 MiB when served)
MAX_BODY = 200


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(body_reader, "READ_INTO_BYTES", THRESHOLD)


def _request(body: bytes) -> bytes:
    return b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


@st.composite
def stream(draw: st.DrawFn) -> tuple[list[bytes], list[bytes], bool]:
    """(the pieces the client sends, the bodies of the requests it sends whole, whether it stops
    short in the last one)."""
    lengths = draw(
        st.lists(st.sampled_from([0, 5, THRESHOLD + 3, 40, 64, 120, MAX_BODY]), min_size=1, max_size=6)
    )
    bodies = [bytes((index * 7 + i) % 256 for i in range(length)) for index, length in enumerate(lengths)]
    data = b"".join(_request(body) for body in bodies)
    short = draw(st.booleans())
    if short:  # the last request's body never arrives whole
        data = data[: len(data) - draw(st.integers(1, max(1, len(bodies[-1]))))]
    if draw(st.booleans()):  # reads of one size, as a socket's
        read = draw(st.integers(55, 150))  # a head (about 50 bytes) may come whole or split
        pieces = [data[at : at + read] for at in range(0, len(data), read)]
    else:
        cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=16)))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True) if b > a]
    return pieces, bodies[:-1] if short else bodies, short


_ANSWER = re.compile(rb"HTTP/1\.1 (\d{3}) [^\r]*\r\n((?:[^\r\n]+\r\n)*)\r\n")


def _answers(written: bytes) -> list[tuple[int, bytes]]:
    """(status, body) of each whole answer written, in order; the bytes must be nothing else."""
    found, at = [], 0
    while at < len(written):
        head = _ANSWER.match(written, at)
        assert head is not None, written[at : at + 200]
        length = int(re.search(rb"content-length: (\d+)", head.group(2)).group(1))  # type: ignore[union-attr]
        end = head.end() + length
        assert end <= len(written), "an answer shorter than it announced"
        found.append((int(head.group(1)), written[head.end() : end]))
        at = end
    return found


@given(sent=stream(), budget=st.sampled_from([0, 50, 150, 400]), body_limit=st.sampled_from([100, 4096]))
def test_every_whole_request_is_answered_with_its_own_body(
    sent: tuple[list[bytes], list[bytes], bool], budget: int, body_limit: int
) -> None:
    pieces, bodies, _ = sent

    async def echo(request: HttpRequest) -> HttpResponse:
        assert type(request.body) is bytes
        return HttpResponse(200, request.body)

    queued = QueuedBytes(budget)

    async def scenario() -> bytes:
        # First each length's head, alone in a read of its own and under no bound, so that the heads
        # are remembered (a head is, from a read that holds its request and nothing more); the server
        # under test shares them and looks them up.
        heads = HeadCache()
        priming = HttpServer(echo, heads=heads)
        for length in {len(body) for body in bodies}:
            connection, transport = HttpProtocol(priming.handler, priming), RecordingTransport()
            transport.protocol = connection
            connection.connection_made(transport)
            connection.data_received(_request(bytes(length)))  # remembered as the parser completes it
            connection.connection_lost(None)
        limits = HttpLimits(max_body_size=body_limit)
        server = HttpServer(echo, limits=limits, queued_bytes=queued, heads=heads)
        written = await serve(HttpProtocol(server.handler, server), pieces)
        return bytes(written.written)

    answers = _answers(asyncio.run(scenario()))
    assert len(answers) == len(bodies)  # each request sent whole, answered once
    for (status, answer), body in zip(answers, bodies, strict=True):
        if status == 200:
            assert answer == body
        else:
            # 503: the budget ran out first (it may, before the body limit); 413 only past the limit.
            assert status == 503 or (status == 413 and len(body) > body_limit), (status, answer)
    assert queued.held == 0

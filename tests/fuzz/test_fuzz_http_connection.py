"""Any bytes a client sends to the HTTP port, in any pieces: the connection never raises, what it writes
is a sequence of whole HTTP/1.1 responses (a status line, headers, and exactly the body they
announce), it never answers more requests than it was sent, and once the client is gone no request
it sent is left running.

The client is hypothesis: requests drawn from real ones to the ``simple`` model and the other routes
(JSON and binary inference, metadata, health, repository, statistics), pipelined, with their heads,
lengths and bodies changed, chunked or not, and random bytes between them. The server is trt's own
HTTP/1.1 connection in front of a real core, with small limits so that they are reached, fed in
process through a transport that records what it writes.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.connection_harness import core_on, serve
from tests.fuzz.strategies import BINARY_HEADER, BINARY_INFER, JSON_INFER
from tests.support import write_simple
from trt.server.http.app import HttpApp
from trt.server.http.limits import HttpLimits
from trt.server.http.protocol import HttpProtocol
from trt.server.http.server import HttpServer

LIMITS = HttpLimits(max_body_size=4096, max_header_size=1024, max_header_count=16)


# -- what the client sends ------------------------------------------------------------------------


ROUTES = [
    ("POST", "/v2/models/simple/infer", JSON_INFER, {}),
    ("POST", "/v2/models/simple/infer", BINARY_INFER,
     {"Inference-Header-Content-Length": str(len(BINARY_HEADER)),
      "Content-Type": "application/octet-stream"}),
    ("POST", "/v2/models/simple/versions/1/infer", JSON_INFER, {}),
    ("POST", "/v2/models/nothing/infer", JSON_INFER, {}),
    ("GET", "/v2/models/simple", b"", {}),
    ("GET", "/v2/models/simple/config", b"", {}),
    ("GET", "/v2/models/simple/stats", b"", {}),
    ("GET", "/v2/health/ready", b"", {}),
    ("GET", "/v2", b"", {}),
    ("POST", "/v2/repository/index", b"{}", {}),
    ("POST", "/v2/models/simple/generate", b'{"INPUT0": [1], "INPUT1": [2]}', {}),
    ("GET", "/metrics", b"", {}),
    ("DELETE", "/v2/models/simple/infer", b"", {}),
    ("POST", "/v2/cudasharedmemory/region/r/register",
     b'{"raw_handle": {"b64": "' + base64.b64encode(bytes(64)) + b'"}, "device_id": 0, "byte_size": 64}', {}),
    ("POST", "/v2/systemsharedmemory/region/r/register", b'{"key": "/absent", "byte_size": 64}', {}),
    ("GET", "/v2/cudasharedmemory/region/r/status", b"", {}),
    ("POST", "/v2/cudasharedmemory/unregister", b"", {}),
]  # fmt: skip


@st.composite
def request(draw: st.DrawFn) -> bytes:
    """One request, as sent or changed: its method, path, version, headers, length and body."""
    method, path, body, headers = draw(st.sampled_from(ROUTES))
    headers = dict(headers)
    if draw(st.integers(0, 3)) == 0:
        path = path.replace("simple", draw(st.sampled_from(["", "..", "%00", "s" * 300, "simple/../simple"])))
    if draw(st.integers(0, 4)) == 0:
        body = body[: draw(st.integers(0, len(body)))]
    if draw(st.integers(0, 4)) == 0:
        data = bytearray(body)
        for _ in range(draw(st.integers(1, 3))):
            if data:
                data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        body = bytes(data)
    length = draw(
        st.sampled_from(["exact", "exact", "exact", "short", "long", "none", "huge", "twice", "bad"])
    )
    chunked = draw(st.integers(0, 5)) == 0
    lines = [f"{method} {path} {draw(st.sampled_from(['HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0', 'HTTP/2.0']))}"]
    lines.append("Host: localhost")
    for name, value in headers.items():
        lines.append(f"{name}: {value}")
    if draw(st.integers(0, 4)) == 0:
        lines.append(draw(st.sampled_from([
            "Connection: close", "Expect: 100-continue", "Content-Encoding: gzip", "Accept-Encoding: gzip",
            "Transfer-Encoding: gzip, chunked", "X: " + "y" * 2000, "Bad Header",
            "Inference-Header-Content-Length: -1", "Inference-Header-Content-Length: 99999",
            "Inference-Header-Content-Length: \xb2", "Inference-Header-Content-Length: " + "9" * 900,
            "Inference-Header-Content-Length: 0", "Inference-Header-Content-Length: 1_0",
            "Inference-Header-Content-Length:  +0012x",
        ])))  # fmt: skip
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        split = draw(st.integers(0, len(body)))
        parts = [p for p in (body[:split], body[split:]) if p]
        encoded = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        if draw(st.integers(0, 4)) == 0:
            encoded = encoded[: draw(st.integers(0, len(encoded)))]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + encoded
    announced = {
        "exact": len(body), "short": max(len(body) - 3, 0), "long": len(body) + 3, "huge": 1 << 40,
        "twice": len(body), "bad": -1, "none": None,
    }[length]  # fmt: skip
    if announced is not None:
        lines.append(f"Content-Length: {announced}")
    if length == "twice":
        lines.append(f"Content-Length: {len(body) + 1}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@st.composite
def connection_bytes(draw: st.DrawFn) -> list[bytes]:
    """What one client sends, in the pieces it arrives in."""
    parts = draw(st.lists(st.one_of(request(), request(), st.binary(max_size=64)), min_size=1, max_size=5))
    data = b"".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=4)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True) if b > a]


# -- what the server wrote ------------------------------------------------------------------------

_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3}) [^\r\n]*\r\n")


def responses(written: bytes) -> list[int]:
    """The statuses of the whole responses ``written`` holds; fails on anything else."""
    statuses, at = [], 0
    while at < len(written):
        status = _STATUS.match(written, at)
        assert status, f"not a status line at {at}: {written[at : at + 80]!r}"
        end = written.find(b"\r\n\r\n", at)
        assert end > 0, "a head without its end"
        head = written[status.end() : end].split(b"\r\n") if end > status.end() else []
        fields = [line.split(b":", 1) for line in head]
        assert all(len(field) == 2 for field in fields), f"a malformed header line in {head!r}"
        names = {name.strip().lower(): value.strip() for name, value in fields}
        at = end + 4
        code = int(status.group(1))
        if code == 100:
            statuses.append(code)
            continue
        if b"content-length" in names:
            length = int(names[b"content-length"])
            assert len(written) - at >= length, "a body shorter than its Content-Length"
            at += length
        else:
            assert names.get(b"transfer-encoding") == b"chunked", f"no length for the body of a {code}"
            while True:
                line_end = written.index(b"\r\n", at)
                size = int(written[at:line_end].split(b";")[0], 16)
                at = line_end + 2 + size + 2
                if size == 0:
                    break
        statuses.append(code)
    return statuses


# -- the property ---------------------------------------------------------------------------------

LOOP = asyncio.new_event_loop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    repo = tmp_path_factory.mktemp("repo")
    write_simple(repo)
    with core_on(LOOP, repo, "simple") as core:

        async def made() -> HttpServer:  # it belongs to the loop that runs it
            return HttpServer(
                HttpApp(core),
                LIMITS,
                cancellable=HttpApp.cancellable,
                queued_bytes=core.queued_bytes,
                keep_header_spelling=True,  # header names' spellings kept, as with header forwarding
            )

        yield LOOP.run_until_complete(made())


async def _connection(server: HttpServer) -> HttpProtocol:
    return HttpProtocol(server.handler, server)


@given(connection_bytes())
def test_any_client_bytes_get_whole_responses_and_leave_nothing_running(
    server: HttpServer, pieces: list[bytes]
) -> None:
    connection = LOOP.run_until_complete(_connection(server))
    transport = LOOP.run_until_complete(serve(connection, pieces))
    statuses = responses(bytes(transport.written))
    sent = b"".join(pieces)
    assert len([s for s in statuses if s != 100]) <= sent.count(b"HTTP/") + 1
    assert server.queued_bytes is not None and server.queued_bytes.held == 0

"""Bounds on what one HTTP request can make the server hold: request line and header bytes, header
count, and HTTP/1.0 keep-alive answered as HTTP/1.0 clients need (issue 17, items 5 and 7)."""

from __future__ import annotations

import select
import socket
import time

from tests.server.http.test_protocol import INFER_BODY, _connect
from tests.support import ServerProcess, read_http_response

DEFAULT_MAX_HEADER_SIZE = 64 * 1024


def _stream_until_answered(sock: socket.socket, head: bytes, piece: bytes, most: int) -> tuple[int, bytes]:
    """Send ``head`` then ``piece`` after ``piece`` (at most ``most`` bytes) until the server answers or
    drops the connection; return the bytes sent by then and what it answered. Each piece waits a
    moment for an answer, so the kernel's buffers do not hide how much the server read."""
    sock.sendall(head)
    sent = len(head)
    while sent < most:
        readable, _, _ = select.select([sock], [], [], 0.005)
        if readable:
            break
        try:
            sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += len(piece)
    sock.settimeout(10)
    try:
        answer = sock.recv(4096)
    except ConnectionResetError:
        answer = b""  # the server closed on bytes it had not read: the kernel answered with a reset
    return sent, answer


def test_a_header_value_streamed_in_pieces_is_cut_off_at_the_limit(server: ServerProcess) -> None:
    """A 100 MB header value sent in pieces was buffered (quadratically) and accepted after 12 s,
    stalling other clients; now the connection is answered 431 once the head passes its limit."""
    with _connect(server) as sock:
        sent, answer = _stream_until_answered(
            sock, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: ", b"a" * 4096, most=1024 * 1024
        )
    assert sent < 2 * DEFAULT_MAX_HEADER_SIZE, f"the server took {sent} bytes of one header"
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer
    _assert_serving(server)


def test_a_url_streamed_in_pieces_is_cut_off_at_the_limit(server: ServerProcess) -> None:
    with _connect(server) as sock:
        sent, answer = _stream_until_answered(sock, b"GET /v2/", b"a" * 4096, most=1024 * 1024)
    assert sent < 2 * DEFAULT_MAX_HEADER_SIZE, f"the server took {sent} bytes of one URL"
    assert answer == b"" or answer.startswith(b"HTTP/1.1 414 "), answer
    _assert_serving(server)


def test_a_request_with_too_many_headers_is_431(server: ServerProcess) -> None:
    headers = b"".join(b"X-Header-%d: 1\r\n" % index for index in range(101))
    with _connect(server) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
        status, response_headers, body = read_http_response(sock, bytearray())
    assert status == 431 and b"--http-max-header-count" in body
    assert response_headers.get("connection") == "close"
    with _connect(server) as sock:  # 100 headers in all (Host and 99 more) are fine
        sock.sendall(
            b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n"
            + headers[: headers.index(b"X-Header-99")]
            + b"\r\n"
        )
        assert read_http_response(sock, bytearray())[0] == 200


def test_a_head_just_under_the_limit_is_answered(server: ServerProcess) -> None:
    """The counterpart of the cut-offs above: the bound is the flag's, not lower."""
    value = b"a" * (DEFAULT_MAX_HEADER_SIZE - 200)
    with _connect(server) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + value + b"\r\n\r\n")
        assert read_http_response(sock, bytearray())[0] == 200


def test_limits_follow_their_flags(tmp_path: object, model_repo: object) -> None:
    proc = ServerProcess(
        [model_repo],  # type: ignore[list-item]
        ["--exit-on-error=false", "--http-max-header-size=1024", "--http-max-header-count=5"],
    )
    proc.start(tmp_path)  # type: ignore[arg-type]
    try:
        with _connect(proc) as sock:
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
            status, _, body = read_http_response(sock, bytearray())
        assert status == 431 and b"1024 bytes" in body
        with _connect(proc) as sock:
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + b"X: 1\r\n" * 5 + b"\r\n")
            assert read_http_response(sock, bytearray())[0] == 431
        _assert_serving(proc)
    finally:
        proc.stop()


def test_http_1_0_keep_alive_is_said_in_the_answer(server: ServerProcess) -> None:
    """An HTTP/1.0 client keeps its connection only when the answer carries Connection: keep-alive."""
    request = b"GET /v2/health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    with _connect(server) as sock:
        buffer = bytearray()
        for _ in range(2):  # the same connection answers again
            sock.sendall(request)
            status, headers, _ = read_http_response(sock, buffer)
            assert status == 200
            assert headers.get("connection") == "keep-alive"


def _assert_serving(server: ServerProcess) -> None:
    assert server.alive()
    with _connect(server) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_http_response(sock, bytearray())[0] == 200


def test_a_head_whose_end_straddles_two_reads_is_not_counted_with_the_body(server: ServerProcess) -> None:
    """The blank line ending the head split across reads ("\\r\\n\\r" | "\\n" + a large body): the
    body must not count as head bytes."""
    body = INFER_BODY + b" " * (2 * DEFAULT_MAX_HEADER_SIZE)  # JSON allows trailing blanks
    head = f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r".encode()
    with _connect(server) as sock:
        sock.sendall(head)
        time.sleep(0.2)  # two reads on the server's side
        sock.sendall(b"\n" + body)
        status, _, payload = read_http_response(sock, bytearray())
    assert status == 200, payload


def test_a_chunked_body_of_too_many_chunks_is_refused_in_tritons_words(server: ServerProcess) -> None:
    """Each chunk's bytes were kept as an object of their own: a 64 MiB body of one-byte chunks made
    some 2.8 GB of them. Triton's bound (65,536 non-empty chunks) and words, the connection closed."""
    head = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    with _connect(server) as sock:
        sent, answer = _stream_until_answered(sock, head, b"1\r\nx\r\n" * 4096, most=8 * 1024 * 1024)
    assert sent < 2 * 65_536 * 6, f"the server took {sent} bytes of one-byte chunks"
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert (
        b'{"error":"Chunked request body exceeds maximum of 65536 non-empty chunks. Send fewer or larger '
        b'HTTP chunks."}' in answer
    )
    # Up to the bound, chunks are a body like any other.
    chunks = [INFER_BODY[i : i + 1] for i in range(len(INFER_BODY))]
    assert len(chunks) < 65_536
    body = b"".join(b"1\r\n%s\r\n" % chunk for chunk in chunks) + b"0\r\n\r\n"
    with _connect(server) as sock:
        sock.sendall(head + body)
        assert read_http_response(sock, bytearray())[0] == 200
    _assert_serving(server)

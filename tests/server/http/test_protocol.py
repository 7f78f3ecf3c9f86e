"""The HTTP/1.1 layer under the API: what curl, proxies and load balancers rely on."""

from __future__ import annotations

import gzip
import json
import socket
import struct
import subprocess
import time

import pytest

from tests.support import ServerProcess, read_http_response

INFER_BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
).encode()


def _connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.http_port), timeout=10)


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def test_pipelined_requests_are_answered_in_order_on_one_connection(server: ServerProcess) -> None:
    with _connect(server) as sock:
        sock.sendall(
            b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
            + _post("/v2/models/simple/infer", INFER_BODY)
            + b"GET /v2/models/simple HTTP/1.1\r\nHost: x\r\n\r\n"
            + _post("/v2/models/nope/infer", INFER_BODY)
        )
        buffer = bytearray()
        statuses = [read_http_response(sock, buffer) for _ in range(4)]
    assert [s for s, _, _ in statuses] == [200, 200, 200, 404]
    assert json.loads(statuses[1][2])["outputs"][0]["data"][:3] == [1, 2, 3]
    assert json.loads(statuses[2][2])["name"] == "simple"
    assert "unknown model" in json.loads(statuses[3][2])["error"]


def test_a_keep_alive_connection_is_answered_after_pauses_and_bursts(server: ServerProcess) -> None:
    """Between requests the connection waits for the next one; each that comes, alone or several
    at once, is answered in order."""
    live = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    with _connect(server) as sock:
        buffer = bytearray()
        for burst in (1, 3, 1, 2):
            time.sleep(0.05)  # the connection is idle, waiting
            sock.sendall(_post("/v2/models/simple/infer", INFER_BODY) + live * (burst - 1))
            answers = [read_http_response(sock, buffer) for _ in range(burst)]
            assert [status for status, _, _ in answers] == [200] * burst
            assert json.loads(answers[0][2])["outputs"][0]["data"][:3] == [1, 2, 3]
        assert not buffer


def _binary_infer(
    first: int, second: int, extra: str = "", compress: bool = False, model: str = "simple"
) -> bytes:
    """An infer request of ``model`` (``simple``'s inputs) with binary inputs: the same head for any
    two values."""
    header = json.dumps(
        {
            "inputs": [
                {"name": n, "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}
                for n in ("INPUT0", "INPUT1")
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}],
        }
    ).encode()
    body = header + struct.pack("<16i", *[first] * 16) + struct.pack("<16i", *[second] * 16)
    if compress:
        body, extra = gzip.compress(body, mtime=0), extra + "Content-Encoding: gzip\r\n"
    return _post(
        f"/v2/models/{model}/infer", body, f"{extra}Inference-Header-Content-Length: {len(header)}\r\n"
    )


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip-body"])
def test_requests_with_the_same_head_each_get_their_own_answer(server: ServerProcess, compress: bool) -> None:
    """A head seen before is looked up, not parsed: each body is still read, decoded and answered."""
    with _connect(server) as sock:
        buffer = bytearray()
        for value in (1, 2, 3, 50, -7):
            sock.sendall(_binary_infer(value, 1, compress=compress))
            status, _, payload = read_http_response(sock, buffer)
            assert status == 200
            assert json.loads(payload)["outputs"][0]["data"] == [value + 1] * 16


def test_a_request_layout_is_checked_by_each_model_it_is_sent_to(server: ServerProcess) -> None:
    """The same JSON header (INT32 [1,16] inputs) to a model that takes it and to one that takes FP32:
    what one model found of the layout is never taken for the other's answer."""
    with _connect(server) as sock:
        buffer = bytearray()
        for _ in range(3):
            for model, expected in (("simple", 200), ("autocomplete_fp32", 400)):
                sock.sendall(_binary_infer(2, 1, model=model))
                status, _, payload = read_http_response(sock, buffer)
                assert status == expected, (model, payload)
                if status == 400:
                    assert "data-type is 'INT32'" in json.loads(payload)["error"]


def test_a_repeated_head_asking_for_gzip_gets_gzip_every_time(server: ServerProcess) -> None:
    with _connect(server) as sock:
        buffer = bytearray()
        for value in (4, 5, 6):
            sock.sendall(_binary_infer(value, 1, "Accept-Encoding: gzip\r\n"))
            status, headers, payload = read_http_response(sock, buffer)
            assert status == 200 and headers["content-encoding"] == "gzip"
            assert json.loads(gzip.decompress(payload))["outputs"][0]["data"] == [value + 1] * 16


def test_connection_close_and_http_1_0_close_after_the_answer(server: ServerProcess) -> None:
    for request in (
        b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /v2/health/live HTTP/1.0\r\n\r\n",
    ):
        with _connect(server) as sock:
            sock.sendall(request)
            status, headers, _ = read_http_response(sock, bytearray())
            assert status == 200
            assert headers.get("connection") == "close"
            assert sock.recv(10) == b""


def test_chunked_request_body(server: ServerProcess) -> None:
    half = len(INFER_BODY) // 2
    chunks = [INFER_BODY[:half], INFER_BODY[half:]]
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    with _connect(server) as sock:
        sock.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body
        )
        status, _, payload = read_http_response(sock, bytearray())
    assert status == 200
    assert json.loads(payload)["outputs"][1]["data"][0] == -1


def test_curl_with_expect_100_continue_and_a_large_body(server: ServerProcess, tmp_path: object) -> None:
    body = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [8, 16], "datatype": "INT32", "data": [300] * 128},
                {"name": "INPUT1", "shape": [8, 16], "datatype": "INT32", "data": [100] * 128},
            ]
        }
    )
    assert len(body) > 1024  # curl asks "Expect: 100-continue" above this size
    result = subprocess.run(
        ["curl", "-s", "-H", "Expect: 100-continue", "--data-binary", body,
         f"http://{server.http_url}/v2/models/simple/infer"],
        capture_output=True, text=True, timeout=20,
    )  # fmt: skip
    assert json.loads(result.stdout)["outputs"][0]["data"][0] == 400


def test_malformed_http_gets_400_and_the_server_carries_on(server: ServerProcess) -> None:
    with _connect(server) as sock:
        sock.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        status, _, _ = read_http_response(sock, bytearray())
    assert status == 400
    with _connect(server) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_http_response(sock, bytearray())[0] == 200


def test_oversized_and_bad_gzip_bodies_are_refused(tmp_path: object, model_repo: object) -> None:
    proc = ServerProcess([model_repo], ["--exit-on-error=false", "--http-max-input-size=2048"])  # type: ignore[list-item]
    proc.start(tmp_path)  # type: ignore[arg-type]
    try:
        with _connect(proc) as sock:
            sock.sendall(_post("/v2/models/simple/infer", b"x" * 5000))
            status, _, payload = read_http_response(sock, bytearray())
            assert status == 413
            assert json.loads(payload)["error"] == (  # Triton's words after "request body"
                "request body exceeds the maximum allowed input size of 2048 bytes. "
                "Use --http-max-input-size to increase the limit."
            )
            bomb = gzip.compress(b"[" * 100_000)
            sock.sendall(_post("/v2/models/simple/infer", bomb, "Content-Encoding: gzip\r\n"))
            status, _, payload = read_http_response(sock, bytearray())
            assert status == 400 and "decompressed body exceeds" in json.loads(payload)["error"]
            sock.sendall(_post("/v2/models/simple/infer", INFER_BODY, "Content-Encoding: br\r\n"))
            assert read_http_response(sock, bytearray())[0] == 415
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v2/models/simple/infer", 405),
        ("DELETE", "/v2/health/live", 405),
        ("GET", "/v1/nothing", 404),
    ],
)
def test_unknown_routes_and_wrong_methods(server: ServerProcess, method: str, path: str, status: int) -> None:
    with _connect(server) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
        got, _, payload = read_http_response(sock, bytearray())
    assert got == status
    assert "error" in json.loads(payload)

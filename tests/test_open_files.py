"""``trt serve`` and ``trt perf`` take their open-file limit up to the hard limit: each connection is a
file, and at a soft limit of 1,024 (many hosts' default) the server reset the connections past it
without a word in the log, and ``trt perf`` failed most requests of a high concurrency. A server limit
that stays low is said once, at start."""

from __future__ import annotations

import http.client
import json
import resource
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support import ROOT, ServerProcess, write_simple

CONNECTIONS = 400


def _under_ulimit(flags: str) -> list[str]:
    """``trt serve`` started by a shell that first runs ``ulimit <flags>``."""
    return ["bash", "-c", f'ulimit {flags} && exec "$0" "$@"', sys.executable, "-m", "trt"]


def _answers_on_each(server: ServerProcess, count: int) -> int:
    """Open ``count`` connections at once, then ask for readiness on each; how many answered 200."""
    sockets = [socket.create_connection(("127.0.0.1", server.http_port), timeout=10) for _ in range(count)]
    answered = 0
    try:
        for sock in sockets:
            try:
                sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
                answered += sock.recv(64).startswith(b"HTTP/1.1 200")
            except OSError:
                pass
    finally:
        for sock in sockets:
            sock.close()
    return answered


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 2 * CONNECTIONS, reason="hard limit too low"
)
def test_a_low_soft_limit_is_raised_and_every_connection_is_served(tmp_path: Path) -> None:
    write_simple(tmp_path / "repo")
    server = ServerProcess([tmp_path / "repo"], command_prefix=_under_ulimit("-Sn 256")).start(tmp_path)
    try:
        assert server.process is not None
        soft, hard = psutil.Process(server.process.pid).rlimit(psutil.RLIMIT_NOFILE)  # bash exec'd trt
        assert soft == hard > 256
        assert _answers_on_each(server, CONNECTIONS) == CONNECTIONS
        assert "open-file limit is" not in server.log()
    finally:
        server.stop()


def test_a_low_hard_limit_is_said_at_start(tmp_path: Path) -> None:
    write_simple(tmp_path / "repo")
    server = ServerProcess([tmp_path / "repo"], command_prefix=_under_ulimit("-n 512")).start(tmp_path)
    try:
        assert "the open-file limit is 512 (hard limit): connections beyond about that many are reset" in (
            server.log()
        )
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
        connection.request("GET", "/v2/health/ready")
        assert connection.getresponse().status == 200
    finally:
        server.stop()


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 2 * CONNECTIONS, reason="hard limit too low"
)
def test_trt_perf_keeps_a_connection_per_concurrent_request_past_a_low_soft_limit(tmp_path: Path) -> None:
    write_simple(tmp_path / "repo")
    server = ServerProcess([tmp_path / "repo"]).start(tmp_path)
    try:
        perf = subprocess.run(
            [*_under_ulimit("-Sn 256"), "perf", "-m", "simple", "-u", server.http_url,
             "--concurrency", str(CONNECTIONS), "-p", "800", "-r", "3", "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert perf.returncode == 0, perf.stderr
        (result,) = json.loads(perf.stdout)["results"]
        assert result["error_count"] == 0, result.get("error_samples")
        assert result["level"] == CONNECTIONS and result["request_count"] > CONNECTIONS
    finally:
        server.stop()

"""What a hostile client can make `trt serve` hold, and for how long it stalls the others.

Each case of issue 17's item 5 is played against a real server (this checkout's, and with
``--against ROOT`` another checkout's, e.g. the commit before the bounds, one after the other) and
measured from outside: the server's RSS growth (psutil, the server and its model processes), how long
the hostile request took to be answered, and how long a health check sent meanwhile by another client
waited. Cases:

- ``bytes_shape``: a BYTES input declaring shape [200000000] with 5 bytes of data, three times;
- ``header_stream``: one 8 MiB header value sent in 64 KiB pieces, a health check alongside;
- ``header_cache``: 40 requests whose JSON headers carry distinct 4 MiB parameters;
- ``queued``: 300 requests of 4 MiB, all at once, to a Python model that takes 50 ms each.

    flock /tmp/trt-bench.lock python benchmarks/abuse_bounds.py [--against /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import free_port  # noqa: E402

MIB = 1024 * 1024
SLOW_CONFIG = """name: "slow"
backend: "python"
input [ { name: "IN" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""
SLOW_MODEL = """import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.05)
        sizes = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy().size for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([size]))]) for size in sizes]
"""
ECHO_CONFIG = """name: "echo"
backend: "python"
input [ { name: "IN" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
ECHO_MODEL = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data)]) for data in inputs]
"""


class Server:
    """``trt serve`` from one checkout, on free loopback ports."""

    def __init__(self, checkout: Path, repo: Path) -> None:
        self.port = free_port()
        command = [
            sys.executable, "-m", "trt", "serve", f"--model-repository={repo}", "--http-address=127.0.0.1",
            f"--http-port={self.port}", "--allow-grpc=false", "--allow-metrics=false",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v2/health/ready", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"trt serve from {checkout} did not start")

    def rss(self) -> int:
        root = psutil.Process(self.process.pid)
        total = 0
        for process in [root, *root.children(recursive=True)]:
            try:
                total += process.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def alive(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v2/health/live", timeout=10) as reply:
                return reply.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _post(port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as reply:
            reply.read()
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        return int(exc.code)
    except OSError:
        return 0


class Sampler:
    """The server's peak RSS while a case runs, sampled every 20 ms."""

    def __init__(self, server: Server) -> None:
        self.server, self.peak, self._done = server, server.rss(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.02):
            try:
                self.peak = max(self.peak, self.server.rss())
            except psutil.NoSuchProcess:
                return

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


def _health_wait(port: int, stop: threading.Event, waits: list[float]) -> None:
    """Health checks on another connection while a case runs: how long each waited."""
    while not stop.is_set():
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/live", timeout=60):
                pass
        except OSError:
            pass
        waits.append(time.perf_counter() - started)
        time.sleep(0.05)


def measure(server: Server, case: Callable[[Server], dict[str, Any]]) -> dict[str, Any]:
    before = server.rss()
    sampler = Sampler(server)
    stop, waits = threading.Event(), []
    watcher = threading.Thread(target=_health_wait, args=(server.port, stop, waits), daemon=True)
    watcher.start()
    started = time.perf_counter()
    result = case(server)
    seconds = time.perf_counter() - started
    stop.set()
    watcher.join()
    peak = sampler.stop()
    return {
        **result,
        "seconds": round(seconds, 2),
        "peak_rss_growth_mib": round((peak - before) / MIB, 1),
        "rss_growth_after_mib": round((server.rss() - before) / MIB, 1),
        "worst_health_wait_ms": round(max(waits, default=0.0) * 1000, 1),
        "alive": server.alive(),
    }


def bytes_shape(server: Server) -> dict[str, Any]:
    data = struct.pack("<I", 1) + b"a"
    header = json.dumps(
        {"inputs": [{"name": "IN", "shape": [200_000_000], "datatype": "BYTES",
                     "parameters": {"binary_data_size": len(data)}}]}
    ).encode()  # fmt: skip
    statuses = [
        _post(
            server.port,
            "/v2/models/echo/infer",
            header + data,
            {"Inference-Header-Content-Length": str(len(header))},
        )
        for _ in range(3)
    ]
    return {"answers": ",".join(map(str, statuses))}


def header_stream(server: Server) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sent = 0
        try:
            while sent < 8 * MIB:
                sock.sendall(b"a" * (64 * 1024))
                sent += 64 * 1024
            sock.sendall(b"\r\n\r\n")
        except OSError:
            pass  # the server answered and closed while the header was still arriving
        try:
            answer = sock.recv(64).split(b"\r\n")[0].decode(errors="replace") or "(closed)"
        except OSError:
            answer = "(reset)"
    return {"answers": f"{answer} after {sent // 1024} KiB", "bytes_sent": sent}


def header_cache(server: Server) -> dict[str, Any]:
    data = struct.pack("<I", 1) + b"a"
    statuses = []
    for index in range(40):
        tensor = {
            "name": "IN",
            "shape": [1],
            "datatype": "BYTES",
            "parameters": {"binary_data_size": len(data)},
        }
        header = json.dumps({"parameters": {"note": chr(65 + index) * 4 * MIB}, "inputs": [tensor]}).encode()
        statuses.append(
            _post(
                server.port,
                "/v2/models/echo/infer",
                header + data,
                {"Inference-Header-Content-Length": str(len(header))},
            )
        )
    return {"answers": _counts(statuses)}


def queued(server: Server) -> dict[str, Any]:
    payload = np.zeros(4 * MIB, dtype=np.uint8).tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "IN",
                    "shape": [4 * MIB],
                    "datatype": "UINT8",
                    "parameters": {"binary_data_size": 4 * MIB},
                }
            ]
        }
    ).encode()
    headers = {"Inference-Header-Content-Length": str(len(header))}
    with ThreadPoolExecutor(300) as pool:
        statuses = list(
            pool.map(
                lambda _: _post(server.port, "/v2/models/slow/infer", header + payload, headers), range(300)
            )
        )
    return {"answers": _counts(statuses)}


def _counts(statuses: list[int]) -> str:
    return ", ".join(f"{count}x{status}" for status, count in sorted(_histogram(statuses).items()))


def _histogram(values: list[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


CASES: dict[str, Callable[[Server], dict[str, Any]]] = {
    "bytes_shape": bytes_shape,
    "header_stream": header_stream,
    "header_cache": header_cache,
    "queued": queued,
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--against", type=Path, help="another checkout to run the same cases against")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--json", type=Path, default=ROOT / "reports" / "benchmarks" / "abuse_bounds.json")
    args = parser.parse_args()
    checkouts = {"this": ROOT} | ({"against": args.against} if args.against else {})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        for name, config, source in (("slow", SLOW_CONFIG, SLOW_MODEL), ("echo", ECHO_CONFIG, ECHO_MODEL)):
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "config.pbtxt").write_text(config)
            (repo / name / "1" / "model.py").write_text(source)
        for case in args.cases.split(","):
            for label, checkout in checkouts.items():  # each case on a fresh server, the trees in turn
                server = Server(checkout, repo)
                try:
                    rows.append({"case": case, "server": label, **measure(server, CASES[case])})
                finally:
                    server.stop()

    table = Table(
        title="What a hostile client makes the server hold (RSS of the server and its model processes)"
    )
    columns = ("case", "server", "answers", "seconds", "peak_rss_growth_mib", "rss_growth_after_mib",
               "worst_health_wait_ms", "alive")  # fmt: skip
    for column in columns:
        table.add_column(
            column.replace("_", " "), justify="left" if column in ("case", "server", "answers") else "right"
        )
    for row in rows:
        table.add_row(*(str(row.get(column, "")) for column in columns))
    Console(width=170).print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"checkouts": {k: str(v) for k, v in checkouts.items()}, "rows": rows}, indent=2)
    )
    print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

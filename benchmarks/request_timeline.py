"""Where the time of one HTTP request goes in a served trt at concurrency 1 (issue 19).

At concurrency 1 every step of a request runs in turn: the client sends, the server reads and hands
the execution to the Python model's process, that process runs ``execute`` and answers, the server
writes the response, the client reads it and sends the next. Throughput is one over the sum, so
what counts is which stage is long, not the CPU each process spends. This serves Triton's
``add_sub`` example (``trt serve`` with ``_timeline_probe`` loaded, no change to trt's code), drives
it with one client at a time, and splits each round trip into four stages from marks taken on the
server's event loop:

- read -> handed to the model: HTTP, decoding, the core's checks and scheduling, the hand-off;
- the model process: its wake-up, ``execute`` and its answer, and the server's wake-up;
- answer -> response written: reading the answer, the core's bookkeeping, encoding, the write;
- the client: from the write to the next request's bytes (the client's own work and the loopback).

The client is perf_analyzer when ``--peers`` names the peers (../shared/PEERS.md), else a minimal
keep-alive socket client sending the bytes perf_analyzer sends. Compare stages within one run.

    python benchmarks/request_timeline.py [--seconds 10] [--peers /tmp/trt-peers] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import free_port, wait_model_ready  # noqa: E402
from _timeline_probe import ANSWERED, ARRIVED, POSTED, WRITTEN  # noqa: E402
from python_backend_vs_triton import write_repository  # noqa: E402
from request_path import http_request  # noqa: E402

BOOTSTRAP = (
    "import sys, runpy; sys.path.insert(0, sys.argv.pop(1)); import _timeline_probe; "
    "_timeline_probe.install(sys.argv.pop(1)); sys.argv[0] = 'trt'; "
    "runpy.run_module('trt', run_name='__main__')"
)
STAGES = (
    ("server: read to hand-off", ARRIVED, POSTED),
    ("model process, wake-ups", POSTED, ANSWERED),
    ("server: answer to write", ANSWERED, WRITTEN),
)
CLIENT = "client, loopback"  # from the write to the next request's bytes
ORDER = [ARRIVED, POSTED, ANSWERED, WRITTEN]


def _socket_client(port: int, seconds: float) -> int:
    """Send perf_analyzer's add_sub request over one keep-alive connection, one at a time."""
    payload = http_request("add_sub")
    count = 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            sock.sendall(payload)
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += sock.recv(65536)
            if not head.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"the server answered {head[:60]!r}")
            count += 1
    return count


def _perf_analyzer_client(peers: Path, port: int, seconds: float) -> int:
    binary = peers / "perf" / "perf_analyzer"
    subprocess.run(
        [str(binary), "-m", "add_sub", "-u", f"127.0.0.1:{port}", "-i", "http", "--concurrency-range", "1",
         "-p", str(int(seconds * 1000 / 3)), "-s", "50"],
        check=True, capture_output=True, timeout=seconds * 10 + 60,
    )  # fmt: skip
    return 0


def stages(marks: list[list[int]]) -> dict[str, list[float]]:
    """Each stage's durations (us) over the requests whose four marks came in order, with the client's
    time between a response and the next request of the same run of requests."""
    found: dict[str, list[float]] = {name: [] for name, _, _ in STAGES}
    found[CLIENT] = []
    index, written = 0, None
    while index + 4 <= len(marks):
        points = [point for point, _ in marks[index : index + 4]]
        if points != ORDER:
            index += 1
            written = None
            continue
        times = {point: ns for point, ns in marks[index : index + 4]}
        for name, start, end in STAGES:
            found[name].append((times[end] - times[start]) / 1000)
        if written is not None:
            found[CLIENT].append((times[ARRIVED] - written) / 1000)
        written = times[WRITTEN]
        index += 4
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--peers", type=Path, help="use NVIDIA's perf_analyzer from the peers as the client")
    parser.add_argument(
        "--serve-arg", action="append", default=[], help="passed on to trt serve (repeatable)"
    )
    parser.add_argument(
        "--server-cpus", help="run the server (and its model process) on these CPUs: 1 or 0,1"
    )
    parser.add_argument("--json", nargs="?", const=str(ROOT / "reports/benchmarks/request_timeline.json"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        repo = write_repository(Path(folder) / "repo")
        output = str(Path(folder) / "marks.json")
        http, grpc, metrics = free_port(), free_port(), free_port()
        command = [
            sys.executable, "-c", BOOTSTRAP, str(ROOT / "benchmarks"), output, "serve",
            f"--model-repository={repo}", "--log-info=false", "--http-address=127.0.0.1",
            f"--http-port={http}", "--grpc-address=127.0.0.1", f"--grpc-port={grpc}",
            f"--metrics-port={metrics}", *args.serve_arg,
        ]  # fmt: skip
        cpus = {int(cpu) for cpu in args.server_cpus.split(",")} if args.server_cpus else None
        server = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )  # fmt: skip
        try:
            wait_model_ready(http, server, "add_sub")
            _socket_client(http, 1.0)  # warm-up: caches, the model process's first executions
            if args.peers:
                _perf_analyzer_client(args.peers, http, args.seconds)
            else:
                _socket_client(http, args.seconds)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=60)
        marks = json.loads(Path(output).read_text())

    found = stages(marks)
    rows: list[dict[str, Any]] = []
    round_trip = sum(statistics.mean(values) for values in found.values() if values)
    for name, values in found.items():
        if values:
            rows.append(
                {
                    "stage": name,
                    "median_us": statistics.median(values),
                    "mean_us": statistics.mean(values),
                    "p90_us": sorted(values)[int(len(values) * 0.9)],
                    "share": statistics.mean(values) / round_trip,
                }
            )
    requests = len(found[STAGES[0][0]])
    table = Table(title=f"One HTTP request at concurrency 1, add_sub ({requests:,} requests, "
                  f"client: {'perf_analyzer' if args.peers else 'socket'})")  # fmt: skip
    for column in ("stage", "median us", "mean us", "p90 us", "share"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for row in rows:
        table.add_row(
            row["stage"], f"{row['median_us']:.1f}", f"{row['mean_us']:.1f}", f"{row['p90_us']:.1f}",
            f"{row['share']:.0%}",
        )  # fmt: skip
    table.add_row("round trip (sum)", "", f"{round_trip:.1f}", "", f"{1e6 / round_trip:,.0f}/s")
    Console().print(table)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"requests": requests, "stages": rows}, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()

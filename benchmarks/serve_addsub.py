"""Serving overhead on a tiny model: `trt serve` over HTTP and gRPC vs ONNX Runtime in-process.

Serves `model_repository/simple` (INT32 add/sub, [1,16]) and prints, for HTTP (binary tensors) and gRPC
at concurrency 1, 8 and 16: throughput, p50/p99 latency and the server's CPU time per request, beside
the in-process ONNX Runtime call rate. Ratios measured in one run are what to compare: these
machines are noisy.

    python benchmarks/serve_addsub.py [--seconds 5] [--json reports/benchmarks/serve_addsub.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import onnxruntime as ort
import orjson
import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import free_port, measured_with_perf_analyzer  # noqa: E402
from _load import http_request_bytes, run_load  # noqa: E402

from trt.protos import grpc_service_pb2  # noqa: E402


def in_process_rate(model: Path, seconds: float) -> float:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    feeds = {"INPUT0": np.arange(16, dtype=np.int32).reshape(1, 16), "INPUT1": np.ones((1, 16), np.int32)}
    for _ in range(200):
        session.run(None, feeds)
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            session.run(None, feeds)
        count += 100
    return count / (time.perf_counter() - start)


def start_server(http_port: int, grpc_port: int) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "trt",
        "serve",
        f"--model-repository={ROOT / 'model_repository'}",
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--http-address=127.0.0.1",
        f"--http-port={http_port}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={grpc_port}",
        "--allow-metrics=false",
        "--log-info=false",
    ]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/simple/ready", timeout=1):
                return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"server did not start: {process.stderr.read().decode() if process.stderr else ''}")


def grpc_request() -> grpc_service_pb2.ModelInferRequest:
    request = grpc_service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32")
        tensor.shape.extend([1, 16])
    request.raw_input_contents.append(np.arange(16, dtype=np.int32).tobytes())
    request.raw_input_contents.append(np.ones(16, dtype=np.int32).tobytes())
    return request


def http_payload(port: int) -> bytes:
    header = orjson.dumps(
        {
            "inputs": [
                {"name": n, "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}
                for n in ("INPUT0", "INPUT1")
            ],
            "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in ("OUTPUT0", "OUTPUT1")],
        }
    )
    binary = np.arange(16, dtype=np.int32).tobytes() + np.ones(16, dtype=np.int32).tobytes()
    return http_request_bytes(f"127.0.0.1:{port}", "/v2/models/simple/infer", header, binary)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement window per row")
    parser.add_argument("--concurrency", default="1,8,16")
    parser.add_argument(
        "--perf-analyzer",
        metavar="PATH",
        help="measure with NVIDIA's perf_analyzer (the client Triton's figures come from) instead of the "
        "built-in raw-socket client",
    )
    parser.add_argument("--json", type=Path, default=ROOT / "reports" / "benchmarks" / "serve_addsub.json")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]

    http_port, grpc_port = free_port(), free_port()
    server = start_server(http_port, grpc_port)
    server_proc = psutil.Process(server.pid)
    rows: list[dict[str, float | int | str]] = []
    try:
        in_process = in_process_rate(ROOT / "model_repository" / "simple" / "1" / "model.onnx", 2.0)
        targets = {
            "http": ("http", ("127.0.0.1", http_port, http_payload(http_port))),
            "grpc": ("grpc", (f"127.0.0.1:{grpc_port}", grpc_request())),
        }
        for protocol, (kind, load_args) in targets.items():
            for concurrency in levels:
                if args.perf_analyzer:
                    port = http_port if protocol == "http" else grpc_port
                    figures = measured_with_perf_analyzer(
                        args.perf_analyzer, "simple", protocol, port, http_port, server.pid, concurrency,
                        int(args.seconds * 1000),
                    )  # fmt: skip
                    rows.append({"protocol": protocol, "concurrency": concurrency, "errors": 0, **figures})
                    continue
                run_load(kind, load_args, concurrency, 1.0)  # warm-up, not measured
                cpu_before = sum(server_proc.cpu_times()[:2])
                result = run_load(kind, load_args, concurrency, args.seconds, processes=1)
                cpu_used = sum(server_proc.cpu_times()[:2]) - cpu_before
                rows.append(
                    {
                        "protocol": protocol,
                        "concurrency": concurrency,
                        "throughput": result.throughput,
                        "p50_us": result.percentile(50),
                        "p99_us": result.percentile(99),
                        "errors": result.errors,
                        "server_cpu_us_per_request": cpu_used / max(result.requests, 1) * 1e6,
                    }
                )
    finally:
        server.terminate()
        server.wait(20)

    table = Table(
        title=f"trt serve, model 'simple' (INT32 add/sub); in-process ONNX Runtime: {in_process:,.0f} calls/s"
    )
    for column in (
        "protocol",
        "concurrency",
        "infer/s",
        "p50 (us)",
        "p99 (us)",
        "server CPU/req (us)",
        "errors",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["protocol"]),
            str(row["concurrency"]),
            f"{row['throughput']:,.0f}",
            f"{row['p50_us']:,.0f}",
            f"{row['p99_us']:,.0f}",
            f"{row['server_cpu_us_per_request']:,.0f}",
            str(row["errors"]),
        )
    Console().print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"in_process_calls_per_s": in_process, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

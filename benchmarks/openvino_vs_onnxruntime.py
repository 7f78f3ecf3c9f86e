"""OpenVINO against ONNX Runtime on the same models, both served by one ``trt serve``.

The example repository's ``mlp_onnx`` (FP32 [256] -> [10]) and ``cnn_onnx`` (FP32 [3,64,64] -> [10])
are served as they are by ONNX Runtime and, converted by OpenVINO's own converter (FP32 weights
kept), by OpenVINO: four models in one server, each with one instance, ``max_batch_size: 32`` and a
dynamic batcher without delay, each backend's defaults otherwise (ONNX Runtime: the instance's share
of the cores as intra-op threads; OpenVINO: one stream, every core). Batch-1 binary HTTP requests
from a thin closed-loop client at each concurrency, the two backends measured in turn, ``--rounds``
times, so that drift on the shared machine falls on both alike. Beside it, each runtime in-process
at batch 1 and 16 (same threads) says how much of a difference is the runtime's own.

    flock /tmp/trt-bench.lock python benchmarks/openvino_vs_onnxruntime.py [--seconds 4] [--rounds 2]

Prints a table of OpenVINO/ONNX Runtime ratios and writes JSON and CSV under reports/benchmarks/.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import openvino as ov
import orjson
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import answered_requests, free_port, process_tree_cpu  # noqa: E402
from _load import http_request_bytes, run_load  # noqa: E402

MODELS = {  # example model -> (input, output, per-request shape)
    "mlp_onnx": ("INPUT0", "OUTPUT0", (256,)),
    "cnn_onnx": ("input", "logits", (3, 64, 64)),
}
BACKENDS = ("onnxruntime", "openvino")
RATIO_KEYS = ("throughput", "p50_us", "p99_us", "server_cpu_us")
CONFIG = """name: "{name}"
{backend_line}
max_batch_size: 32
dynamic_batching {{ }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


def build_repository(repo: Path) -> None:
    """Each example model twice: the ONNX file for ONNX Runtime, its IR for OpenVINO."""
    for model in MODELS:
        source = ROOT / "model_repository" / model / "1" / "model.onnx"
        ort_dir = repo / f"{model}_onnxruntime"
        (ort_dir / "1").mkdir(parents=True)
        shutil.copyfile(source, ort_dir / "1" / "model.onnx")
        (ort_dir / "config.pbtxt").write_text(
            CONFIG.format(name=ort_dir.name, backend_line='platform: "onnxruntime_onnx"')
        )
        ov_dir = repo / f"{model}_openvino"
        (ov_dir / "1").mkdir(parents=True)
        ov.save_model(ov.convert_model(str(source)), str(ov_dir / "1" / "model.xml"), compress_to_fp16=False)
        (ov_dir / "config.pbtxt").write_text(
            CONFIG.format(name=ov_dir.name, backend_line='backend: "openvino"')
        )


def start_server(repo: Path) -> tuple[subprocess.Popen[bytes], int]:
    port, grpc_port = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "trt", "serve", f"--model-repository={repo}", "--http-address=127.0.0.1",
         f"--http-port={port}", f"--grpc-port={grpc_port}", "--allow-metrics=false", "--log-info=false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(900):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1)
            return server, port
        except OSError:
            if server.poll() is not None:
                raise SystemExit(f"trt serve exited with {server.returncode}") from None
            time.sleep(0.2)
    server.kill()
    raise SystemExit("trt serve did not become ready")


def request_bytes(port: int, served: str, model: str) -> bytes:
    name, output, shape = MODELS[model]
    body = np.random.default_rng(3).standard_normal((1, *shape)).astype(np.float32).tobytes()
    header = orjson.dumps(
        {
            "inputs": [{"name": name, "shape": [1, *shape], "datatype": "FP32",
                        "parameters": {"binary_data_size": len(body)}}],
            "outputs": [{"name": output, "parameters": {"binary_data": True}}],
        }
    )  # fmt: skip
    return http_request_bytes(f"127.0.0.1:{port}", f"/v2/models/{served}/infer", header, body)


def served(
    server: subprocess.Popen[bytes], port: int, name: str, model: str, concurrency: int, seconds: float
) -> dict[str, float]:
    cpu_before, count_before = process_tree_cpu(server.pid), answered_requests(port, name)
    result = run_load(
        "http", ("127.0.0.1", port, request_bytes(port, name, model)), concurrency, seconds, 1.0
    )
    cpu = process_tree_cpu(server.pid) - cpu_before
    count = answered_requests(port, name) - count_before
    return {
        "throughput": result.throughput,
        "p50_us": result.percentile(50),
        "p99_us": result.percentile(99),
        "errors": result.errors,
        "server_cpu_us": cpu / max(count, 1) * 1e6,
    }


def in_process(model: str, backend: str, batch: int, seconds: float) -> float:
    """Inferences per second of the runtime alone, two threads, one call at a time."""
    name, _, shape = MODELS[model]
    source = ROOT / "model_repository" / model / "1" / "model.onnx"
    data = np.random.default_rng(4).standard_normal((batch, *shape)).astype(np.float32)
    if backend == "onnxruntime":
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        session = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])

        def call() -> None:
            session.run(None, {name: data})

    else:
        compiled = ov.Core().compile_model(ov.convert_model(str(source)), "CPU", {"NUM_STREAMS": "1"})
        request = compiled.create_infer_request()

        def call() -> None:
            request.infer({name: data})

    for _ in range(20):
        call()
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        call()
        calls += 1
    return calls * batch / (time.perf_counter() - started)


def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measurement window per row")
    parser.add_argument("--rounds", type=int, default=2, help="times each pair is measured, in turn")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "reports" / "benchmarks" / "openvino_vs_onnxruntime"
    )
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    console = Console()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        build_repository(repo)
        server, port = start_server(repo)
        try:
            for model in MODELS:
                for concurrency in levels:
                    runs: dict[str, list[dict[str, float]]] = {backend: [] for backend in BACKENDS}
                    for round_index in range(args.rounds):
                        # Alternate which backend goes first, so neither always follows the other.
                        order = BACKENDS if round_index % 2 == 0 else BACKENDS[::-1]
                        for backend in order:
                            runs[backend].append(
                                served(server, port, f"{model}_{backend}", model, concurrency, args.seconds)
                            )
                    row: dict[str, Any] = {"model": model, "concurrency": concurrency}
                    for backend in BACKENDS:
                        for key in RATIO_KEYS:
                            row[f"{backend}_{key}"] = _median(runs[backend], key)
                        row[f"{backend}_errors"] = sum(r["errors"] for r in runs[backend])
                    rows.append(row)
                    console.print(
                        f"{model} c={concurrency}: OpenVINO {row['openvino_throughput']:,.0f}/s, "
                        f"ONNX Runtime {row['onnxruntime_throughput']:,.0f}/s"
                    )
        finally:
            server.terminate()
            server.wait(30)
    baselines = []
    for model in MODELS:
        for batch in (1, 16):
            speeds = {backend: in_process(model, backend, batch, args.seconds / 2) for backend in BACKENDS}
            baselines.append(
                {"model": model, "batch": batch, **{f"{b}_infer_per_s": s for b, s in speeds.items()}}
            )
    report(console, rows, baselines, args.out)


def report(console: Console, rows: list[dict[str, Any]], baselines: list[dict[str, Any]], out: Path) -> None:
    table = Table(title="OpenVINO / ONNX Runtime, served by trt (batch-1 HTTP requests, one instance each)")
    for column in (
        "model",
        "concurrency",
        "throughput",
        "p50",
        "p99",
        "server CPU/request",
        "OV infer/s",
        "ORT infer/s",
    ):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in rows:
        ratios = {key: row[f"openvino_{key}"] / row[f"onnxruntime_{key}"] for key in RATIO_KEYS}
        table.add_row(
            row["model"], str(row["concurrency"]), *(f"{ratios[key]:.2f}" for key in RATIO_KEYS),
            f"{row['openvino_throughput']:,.0f}", f"{row['onnxruntime_throughput']:,.0f}",
        )  # fmt: skip
    console.print(table)
    alone = Table(title="The runtimes alone, in-process, two threads")
    for column in ("model", "batch", "OpenVINO / ONNX Runtime", "OV infer/s", "ORT infer/s"):
        alone.add_column(column, justify="left" if column == "model" else "right")
    for base in baselines:
        ov_speed, ort_speed = base["openvino_infer_per_s"], base["onnxruntime_infer_per_s"]
        alone.add_row(
            base["model"],
            str(base["batch"]),
            f"{ov_speed / ort_speed:.2f}",
            f"{ov_speed:,.0f}",
            f"{ort_speed:,.0f}",
        )
    console.print(alone)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"served": rows, "in_process": baselines}, indent=2))
    with out.with_suffix(".csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    console.print(f"written: {out.with_suffix('.json')}, {out.with_suffix('.csv')}")


if __name__ == "__main__":
    main()

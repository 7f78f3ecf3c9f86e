"""OpenVINO against ONNX Runtime on the same models, both served by one ``trt serve``.

The example repository's ``mlp_onnx`` (FP32 [256] -> [10]) and ``cnn_onnx`` (FP32 [3,64,64] -> [10])
are served as they are by ONNX Runtime and, converted by OpenVINO's own converter (FP32 weights
kept), by OpenVINO, once with its defaults and once with ``ENABLE_CPU_PINNING: NO`` (OpenVINO pins
its threads to cores by default, and here other processes share those cores). Each model has one
instance, ``max_batch_size: 32`` and a dynamic batcher without delay, each backend's defaults
otherwise (ONNX Runtime: the instance's share of the cores as intra-op threads; OpenVINO: one stream,
every core). Batch-1 binary HTTP requests from a thin closed-loop client at each concurrency, the
variants measured in turn, ``--rounds`` times, each round starting with the next variant, so that
drift on the shared machine falls on all alike. Beside it, each runtime in-process at batch 1 and 16
(same threads) says how much of a difference is the runtime's own.

    flock /tmp/trt-bench.lock python benchmarks/openvino_vs_onnxruntime.py [--seconds 4] [--rounds 3]

Prints tables of ratios to ONNX Runtime and writes JSON and CSV under reports/benchmarks/.
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
# variant -> (the config's backend line, more config, OpenVINO properties in-process; None: ONNX Runtime)
VARIANTS: dict[str, tuple[str, str, dict[str, str] | None]] = {
    "onnxruntime": ('platform: "onnxruntime_onnx"', "", None),
    "openvino": ('backend: "openvino"', "", {"NUM_STREAMS": "1"}),
    "openvino_unpinned": (
        'backend: "openvino"',
        'parameters { key: "ENABLE_CPU_PINNING" value { string_value: "NO" } }\n',
        {"NUM_STREAMS": "1", "ENABLE_CPU_PINNING": "NO"},
    ),
}
BASE = "onnxruntime"
RATIO_KEYS = ("throughput", "p50_us", "p99_us", "server_cpu_us")
CONFIG = """name: "{name}"
{backend_line}
max_batch_size: 32
dynamic_batching {{ }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


def build_repository(repo: Path, variants: list[str]) -> None:
    """Each example model once per variant: the ONNX file for ONNX Runtime, its IR for OpenVINO."""
    for model in MODELS:
        source = ROOT / "model_repository" / model / "1" / "model.onnx"
        for variant in variants:
            backend_line, more, openvino_properties = VARIANTS[variant]
            folder = repo / f"{model}_{variant}"
            (folder / "1").mkdir(parents=True)
            if openvino_properties is None:
                shutil.copyfile(source, folder / "1" / "model.onnx")
            else:
                ir = ov.convert_model(str(source))
                ov.save_model(ir, str(folder / "1" / "model.xml"), compress_to_fp16=False)
            text = CONFIG.format(name=folder.name, backend_line=backend_line) + more
            (folder / "config.pbtxt").write_text(text)


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


def in_process(model: str, variant: str, batch: int, seconds: float) -> float:
    """Inferences per second of the runtime alone, two threads, one call at a time."""
    name, _, shape = MODELS[model]
    source = ROOT / "model_repository" / model / "1" / "model.onnx"
    data = np.random.default_rng(4).standard_normal((batch, *shape)).astype(np.float32)
    openvino_properties = VARIANTS[variant][2]
    if openvino_properties is None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        session = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])

        def call() -> None:
            session.run(None, {name: data})

    else:
        compiled = ov.Core().compile_model(ov.convert_model(str(source)), "CPU", openvino_properties)
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


def measure(
    server: subprocess.Popen[bytes], port: int, variants: list[str], model: str, level: int, args: Any
) -> dict[str, Any]:
    """One row: every variant at one concurrency, ``--rounds`` times in turn; medians."""
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
    for round_index in range(args.rounds):
        shift = round_index % len(variants)  # each round starts with the next variant
        for variant in variants[shift:] + variants[:shift]:
            runs[variant].append(served(server, port, f"{model}_{variant}", model, level, args.seconds))
    row: dict[str, Any] = {"model": model, "concurrency": level}
    for variant in variants:
        for key in RATIO_KEYS:
            row[f"{variant}_{key}"] = statistics.median(run[key] for run in runs[variant])
        row[f"{variant}_errors"] = sum(run["errors"] for run in runs[variant])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measurement window per row")
    parser.add_argument("--rounds", type=int, default=3, help="times each variant is measured, in turn")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "reports" / "benchmarks" / "openvino_vs_onnxruntime"
    )
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    variants = [BASE, *(v for v in args.variants.split(",") if v != BASE)]
    console = Console()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        build_repository(Path(tmp), variants)
        server, port = start_server(Path(tmp))
        try:
            for model in MODELS:
                for level in levels:
                    rows.append(row := measure(server, port, variants, model, level, args))
                    figures = ", ".join(f"{v} {row[f'{v}_throughput']:,.0f}/s" for v in variants)
                    console.print(f"{model} c={level}: {figures}")
        finally:
            server.terminate()
            server.wait(30)
    baselines = []
    for model in MODELS:
        for batch in (1, 16):
            speeds = {v: in_process(model, v, batch, args.seconds / 2) for v in variants}
            baselines.append(
                {"model": model, "batch": batch, **{f"{v}_infer_per_s": s for v, s in speeds.items()}}
            )
    report(console, variants, rows, baselines, args.out)


def report(
    console: Console,
    variants: list[str],
    rows: list[dict[str, Any]],
    baselines: list[dict[str, Any]],
    out: Path,
) -> None:
    table = Table(title="Served by trt: batch-1 HTTP requests, one instance each; ratios to ONNX Runtime")
    for column in (
        "model",
        "concurrency",
        "variant",
        "throughput",
        "p50",
        "p99",
        "server CPU/request",
        "infer/s",
    ):
        table.add_column(column, justify="left" if column in ("model", "variant") else "right")
    for row in rows:
        base = f"{row[f'{BASE}_throughput']:,.0f}"
        table.add_row(row["model"], str(row["concurrency"]), BASE, "1", "1", "1", "1", base)
        for variant in variants[1:]:
            ratios = [row[f"{variant}_{key}"] / row[f"{BASE}_{key}"] for key in RATIO_KEYS]
            own = f"{row[f'{variant}_throughput']:,.0f}"
            table.add_row("", "", variant, *(f"{ratio:.2f}" for ratio in ratios), own)
    console.print(table)
    alone = Table(title="The runtimes alone, in-process, two threads: ratios to ONNX Runtime")
    for column in ("model", "batch", f"{BASE} infer/s", *variants[1:]):
        alone.add_column(column, justify="left" if column == "model" else "right")
    for base_row in baselines:
        speeds = [base_row[f"{variant}_infer_per_s"] for variant in variants]
        ratios = [f"{speed / speeds[0]:.2f}" for speed in speeds[1:]]
        alone.add_row(base_row["model"], str(base_row["batch"]), f"{speeds[0]:,.0f}", *ratios)
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

"""Dynamic batching on a compute-bound model: served throughput against the model's own limit.

Builds a 2048-wide, 4-layer FP32 MLP (seeded weights, in a temporary folder; nothing downloaded),
serves it twice with `trt serve` (with and without `dynamic_batching`), and drives each at
concurrency 1, 8, 32 and 64 with binary HTTP requests of batch 1. Beside it: ONNX Runtime
in-process throughput at batch 1, 8, 32 and 64 with the same threads. The goals: at concurrency
32, batched serving reaches 0.85 of in-process throughput at batch 32; at concurrency 1, batching
costs no more p99 than the configured queue delay.

    python benchmarks/dynamic_batching.py [--seconds 5] [--delay-us 2000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import orjson
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import free_port  # noqa: E402
from _load import http_request_bytes, run_load  # noqa: E402

WIDTH, LAYERS = 2048, 4
LEVELS = (1, 8, 32, 64)


def build_mlp(path: Path) -> None:
    rng = np.random.default_rng(0)
    nodes, initializers, previous = [], [], "INPUT0"
    for layer in range(LAYERS):
        weight = (rng.standard_normal((WIDTH, WIDTH)) * np.sqrt(2 / WIDTH)).astype(np.float32)
        initializers += [
            numpy_helper.from_array(weight, f"w{layer}"),
            numpy_helper.from_array(np.zeros(WIDTH, np.float32), f"b{layer}"),
        ]
        out = "OUTPUT0" if layer == LAYERS - 1 else f"h{layer}"
        nodes.append(helper.make_node("Gemm", [previous, f"w{layer}", f"b{layer}"], [f"g{layer}"], transB=1))
        nodes.append(helper.make_node("Relu", [f"g{layer}"], [out]))
        previous = out
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", WIDTH])],
        initializers,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))


def config(name: str, batching: str) -> str:
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 64\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        f"instance_group [ {{ kind: KIND_CPU count: 1 }} ]\n{batching}"
    )


def in_process(model: Path, batch: int, seconds: float) -> float:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2  # what the server gives its one instance on this 2-core machine
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((batch, WIDTH)).astype(np.float32)
    session.run(None, {"INPUT0": x})
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        session.run(None, {"INPUT0": x})
        count += batch
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--delay-us", type=int, default=2000, help="max_queue_delay_microseconds of the batched model"
    )
    parser.add_argument(
        "--json", type=Path, default=ROOT / "reports" / "benchmarks" / "dynamic_batching.json"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        for name in ("mlp_batched", "mlp_plain"):
            build_mlp(repo / name / "1" / "model.onnx")
        (repo / "mlp_batched" / "config.pbtxt").write_text(
            config("mlp_batched", f"dynamic_batching {{ max_queue_delay_microseconds: {args.delay_us} }}\n")
        )
        (repo / "mlp_plain" / "config.pbtxt").write_text(config("mlp_plain", ""))
        model_path = repo / "mlp_plain" / "1" / "model.onnx"
        reference = {batch: in_process(model_path, batch, 2.0) for batch in LEVELS}

        port, grpc_port = free_port(), free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", f"--model-repository={repo}",
             "--http-address=127.0.0.1", f"--http-port={port}", f"--grpc-port={grpc_port}",
             "--allow-metrics=false", "--log-info=false"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for _ in range(300):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1)
                    break
                except OSError:
                    time.sleep(0.2)
            body = np.random.default_rng(2).standard_normal(WIDTH).astype(np.float32).tobytes()
            rows = []
            for model in ("mlp_plain", "mlp_batched"):
                header = orjson.dumps(
                    {
                        "inputs": [{"name": "INPUT0", "shape": [1, WIDTH], "datatype": "FP32",
                                    "parameters": {"binary_data_size": len(body)}}],
                        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
                    }
                )  # fmt: skip
                payload = http_request_bytes(f"127.0.0.1:{port}", f"/v2/models/{model}/infer", header, body)
                for concurrency in LEVELS:
                    run_load("http", ("127.0.0.1", port, payload), concurrency, 1.0)
                    result = run_load("http", ("127.0.0.1", port, payload), concurrency, args.seconds)
                    rows.append({"model": model, "concurrency": concurrency, "throughput": result.throughput,
                                 "p99_us": result.percentile(99), "errors": result.errors,
                                 "in_process_same_batch": reference[concurrency]})  # fmt: skip
        finally:
            server.terminate()
            server.wait(30)

    table = Table(
        title=f"{WIDTH}-wide {LAYERS}-layer MLP, batch-1 requests over HTTP (queue delay {args.delay_us} us)"
    )
    for column in (
        "batching",
        "concurrency",
        "infer/s",
        "p99 (ms)",
        "in-process infer/s at batch=concurrency",
        "ratio",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            "on" if row["model"] == "mlp_batched" else "off", str(row["concurrency"]),
            f"{row['throughput']:,.0f}",
            f"{row['p99_us'] / 1000:,.1f}", f"{row['in_process_same_batch']:,.0f}",
            f"{row['throughput'] / row['in_process_same_batch']:.2f}",
        )  # fmt: skip
    Console().print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

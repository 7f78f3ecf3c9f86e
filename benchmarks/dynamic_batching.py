"""Dynamic batching on a compute-bound model: served throughput against the model's own limit.

Builds a 2048-wide, 4-layer FP32 MLP (seeded weights, in a temporary folder; nothing downloaded),
serves it twice with `trt serve` (with and without `dynamic_batching`), and drives each at
concurrency 1, 8, 32 and 64 with binary HTTP requests of batch 1. Beside it: ONNX Runtime
in-process throughput at batch 1, 8, 32 and 64 with the same threads. The goals: at concurrency
32, batched serving reaches 0.85 of in-process throughput at batch 32; at concurrency 1, batching
costs no more p99 than the configured queue delay.

Diagnostic columns, which change nothing in that comparison: the average batch the server formed
(statistics extension), the server's CPU per request on its event loop thread (the serving path:
HTTP, scheduling, encoding) and on its other threads (the model), and the in-process throughput of
the same batch when each batch waits the queue delay first, which is what Triton's semantics give a
closed loop of that many clients when it cannot fill ``max_batch_size``: a batch that is neither
full nor preferred goes only when its oldest request has waited the delay.

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
import psutil
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
MAX_BATCH = 64


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
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {MAX_BATCH}\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        f"instance_group [ {{ kind: KIND_CPU count: 1 }} ]\n{batching}"
    )


def in_process(model: Path, batch: int, seconds: float, pause_s: float = 0.0) -> float:
    """Inferences per second running ``batch`` back to back (after ``pause_s`` idle before each run)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2  # what the server gives its one instance on this 2-core machine
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((batch, WIDTH)).astype(np.float32)
    session.run(None, {"INPUT0": x})
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        if pause_s:
            time.sleep(pause_s)
        session.run(None, {"INPUT0": x})
        count += batch
    return count / (time.perf_counter() - start)


class ServerMeter:
    """Requests, executions and CPU of the server process over one measured run."""

    def __init__(self, pid: int, port: int, model: str) -> None:
        self._process, self._port, self._model = psutil.Process(pid), port, model
        self._start = self._sample()

    def _sample(self) -> tuple[int, int, float, float]:
        url = f"http://127.0.0.1:{self._port}/v2/models/{self._model}/stats"
        with urllib.request.urlopen(url) as reply:
            stats = json.loads(reply.read())["model_stats"][0]
        loop_cpu = other_cpu = 0.0
        for thread in self._process.threads():
            cpu = thread.user_time + thread.system_time
            if thread.id == self._process.pid:
                loop_cpu += cpu
            else:
                other_cpu += cpu
        return int(stats["inference_count"]), int(stats["execution_count"]), loop_cpu, other_cpu

    def finish(self) -> dict[str, float]:
        end = self._sample()
        inferences, executions, loop_cpu, other_cpu = (b - a for a, b in zip(self._start, end, strict=True))
        return {
            "avg_batch": inferences / max(executions, 1),
            "serving_cpu_us": loop_cpu / max(inferences, 1) * 1e6,
            "model_cpu_us": other_cpu / max(inferences, 1) * 1e6,
        }


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
        delay_s = args.delay_us / 1e6

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
            payloads = {}
            for model in ("mlp_plain", "mlp_batched"):
                header = orjson.dumps(
                    {
                        "inputs": [{"name": "INPUT0", "shape": [1, WIDTH], "datatype": "FP32",
                                    "parameters": {"binary_data_size": len(body)}}],
                        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
                    }
                )  # fmt: skip
                payloads[model] = http_request_bytes(
                    f"127.0.0.1:{port}", f"/v2/models/{model}/infer", header, body
                )
            rows = []
            # Each level's references are measured just before and just after its served runs, and the
            # better of the two kept: this shared machine's speed drifts, and a reference taken while
            # something else runs would flatter the ratio.
            for concurrency in LEVELS:
                pause = delay_s if concurrency < MAX_BATCH else 0.0
                reference = in_process(model_path, concurrency, 2.0)
                with_delay = in_process(model_path, concurrency, 2.0, pause)
                level_rows = []
                for model, payload in payloads.items():
                    run_load("http", ("127.0.0.1", port, payload), concurrency, 1.0)
                    meter = ServerMeter(server.pid, port, model)
                    result = run_load("http", ("127.0.0.1", port, payload), concurrency, args.seconds)
                    level_rows.append({"model": model, "concurrency": concurrency,
                                       "throughput": result.throughput, "p99_us": result.percentile(99),
                                       "errors": result.errors, **meter.finish()})  # fmt: skip
                reference = max(reference, in_process(model_path, concurrency, 2.0))
                with_delay = max(with_delay, in_process(model_path, concurrency, 2.0, pause))
                for row in level_rows:
                    row.update(in_process_same_batch=reference, in_process_with_delay=with_delay)
                rows += level_rows
            rows.sort(key=lambda row: (row["model"] != "mlp_plain", row["concurrency"]))
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
        "avg batch",
        "CPU/request (us): serving / model",
        "in-process infer/s at batch=concurrency",
        "ratio",
        "in-process, delay before each batch",
        "ratio",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        batched = row["model"] == "mlp_batched"
        table.add_row(
            "on" if batched else "off", str(row["concurrency"]),
            f"{row['throughput']:,.0f}", f"{row['p99_us'] / 1000:,.1f}", f"{row['avg_batch']:.1f}",
            f"{row['serving_cpu_us']:,.0f} / {row['model_cpu_us']:,.0f}",
            f"{row['in_process_same_batch']:,.0f}",
            f"{row['throughput'] / row['in_process_same_batch']:.2f}",
            f"{row['in_process_with_delay']:,.0f}" if batched else "",
            f"{row['throughput'] / row['in_process_with_delay']:.2f}" if batched else "",
        )  # fmt: skip
    console = Console(width=180)
    console.print(table)
    by_key = {(row["model"], row["concurrency"]): row for row in rows}
    batched_32 = by_key[("mlp_batched", 32)]
    p99_cost = (by_key[("mlp_batched", 1)]["p99_us"] - by_key[("mlp_plain", 1)]["p99_us"]) / 1000
    console.print(
        f"goal 1: batched infer/s at concurrency 32 / in-process at batch 32 = "
        f"{batched_32['throughput'] / batched_32['in_process_same_batch']:.2f} (goal >= 0.85; waiting the "
        f"queue delay before each batch allows at most "
        f"{batched_32['in_process_with_delay'] / batched_32['in_process_same_batch']:.2f})"
    )
    console.print(
        f"goal 2: p99 at concurrency 1, batching on - off = {p99_cost:+.1f} ms "
        f"(goal <= +{args.delay_us / 1000:.1f} ms, the queue delay)"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

"""Dynamic batching on compute-bound models: served throughput against the model's own limit.

Builds FP32 MLPs with seeded weights in a temporary folder (nothing downloaded): the 2048-wide
4-layer one of earlier runs, and a 4096-wide 5-layer one whose inference costs ten times the
serving path's CPU. Each is served by one `trt serve` three ways:

- ``off``: no ``dynamic_batching``;
- ``2 ms``: ``max_queue_delay_microseconds: 2000`` (``--delay-us``), max_batch_size 64;
- ``pref 32``: ``preferred_batch_size: [ 32 ]`` with a queue delay of one batch-32 execution
  (measured in-process first), the configuration that suits a closed loop of 32 clients.

Each is driven at concurrency 1, 8, 32 and 64 with binary HTTP requests of batch 1 (at concurrency
1, three rounds of each variant taken in turn, since p99 is compared there), beside ONNX
Runtime in-process throughput at the same batch size with the same threads. The goals: at
concurrency 32, batched serving reaches 0.85 of in-process throughput at batch 32; at concurrency
1, batching costs no more p99 than the configured queue delay.

Diagnostic columns, which change nothing in that comparison: the average batch the server formed
(statistics extension), the server's CPU per request on its event loop thread (the serving path:
HTTP, scheduling, encoding) and on its other threads (the model), the load generator's CPU per
request (it shares the cores: the three together bound the throughput the machine allows), and the
in-process throughput of the same batch when each batch first waits the 2 ms delay, which is what
Triton's semantics give a closed loop of that many clients when it cannot fill ``max_batch_size``:
a batch that is neither full nor preferred goes only when its oldest request has waited the delay.

    python benchmarks/dynamic_batching.py [--seconds 5] [--delay-us 2000] [--models 2048x4,4096x5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import orjson
import psutil
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import free_port  # noqa: E402
from _load import LoadResult, http_request_bytes, run_load  # noqa: E402

LEVELS = (1, 8, 32, 64)
C1_ROUNDS = 3  # rounds of each variant at concurrency 1, taken in turn
MAX_BATCH = 64
CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
MODELS = {"2048x4": (2048, 4), "4096x5": (4096, 5)}  # width, layers


@dataclass(frozen=True)
class Mlp:
    label: str
    width: int
    layers: int

    @property
    def stem(self) -> str:
        return f"mlp_{self.label}"


def build_mlp(path: Path, width: int, layers: int) -> None:
    rng = np.random.default_rng(0)
    nodes, initializers, previous = [], [], "INPUT0"
    for layer in range(layers):
        weight = (rng.standard_normal((width, width)) * np.sqrt(2 / width)).astype(np.float32)
        initializers += [
            numpy_helper.from_array(weight, f"w{layer}"),
            numpy_helper.from_array(np.zeros(width, np.float32), f"b{layer}"),
        ]
        out = "OUTPUT0" if layer == layers - 1 else f"h{layer}"
        nodes.append(helper.make_node("Gemm", [previous, f"w{layer}", f"b{layer}"], [f"g{layer}"], transB=1))
        nodes.append(helper.make_node("Relu", [f"g{layer}"], [out]))
        previous = out
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", width])],
        initializers,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))


def config(name: str, width: int, batching: str) -> str:
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {MAX_BATCH}\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        f"instance_group [ {{ kind: KIND_CPU count: 1 }} ]\n{batching}"
    )


def in_process(model: Path, width: int, batch: int, seconds: float, pause_s: float = 0.0) -> float:
    """Inferences per second running ``batch`` back to back (after ``pause_s`` idle before each run)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2  # what the server gives its one instance on this 2-core machine
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((batch, width)).astype(np.float32)
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


def _combined(runs: list[tuple[LoadResult, dict[str, float]]]) -> dict[str, Any]:
    """One row from several runs of a variant: all their latencies, their rate, meters by request."""
    requests = sum(result.requests for result, _ in runs)
    latencies = np.concatenate([result.latencies_us for result, _ in runs])
    meters = {
        key: sum(meter[key] * result.requests for result, meter in runs) / max(requests, 1)
        for key in runs[0][1]
    }
    return {
        "throughput": requests / sum(result.seconds for result, _ in runs),
        "p99_us": float(np.percentile(latencies, 99)),
        "samples": len(latencies),
        "errors": sum(result.errors for result, _ in runs),
        **meters,
    }


def start_server(repo: Path) -> tuple[subprocess.Popen[bytes], int]:
    port, grpc_port = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "trt", "serve", f"--model-repository={repo}",
         "--http-address=127.0.0.1", f"--http-port={port}", f"--grpc-port={grpc_port}",
         "--allow-metrics=false", "--log-info=false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1)
            return server, port
        except OSError:
            if server.poll() is not None:
                raise SystemExit(f"trt serve exited with {server.returncode}") from None
            time.sleep(0.2)
    server.kill()
    raise SystemExit("trt serve did not become ready")


def payload(port: int, model: str, width: int) -> bytes:
    body = np.random.default_rng(2).standard_normal(width).astype(np.float32).tobytes()
    header = orjson.dumps(
        {
            "inputs": [{"name": "INPUT0", "shape": [1, width], "datatype": "FP32",
                        "parameters": {"binary_data_size": len(body)}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    )  # fmt: skip
    return http_request_bytes(f"127.0.0.1:{port}", f"/v2/models/{model}/infer", header, body)


def measure_model(mlp: Mlp, seconds: float, delay_us: int, progress: Progress) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        source = repo / "source.onnx"
        build_mlp(source, mlp.width, mlp.layers)
        # The preferred-32 variant waits up to one batch-32 execution (rounded up to a millisecond),
        # so a closed loop of 32 clients refills the batch before it goes.
        batch_32 = 32 / in_process(source, mlp.width, 32, 2.0)
        pref_delay_us = int(np.ceil(batch_32 * 1.25 * 1000)) * 1000
        delayed = f"{delay_us / 1000:g} ms"
        variants = {
            "off": "",
            delayed: f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n",
            "pref 32": (
                f"dynamic_batching {{ preferred_batch_size: [ 32 ] "
                f"max_queue_delay_microseconds: {pref_delay_us} }}\n"
            ),
        }
        delays = {"off": 0, delayed: delay_us, "pref 32": pref_delay_us}
        full_at = {delayed: MAX_BATCH, "pref 32": 32}  # the batch that goes without waiting
        names = {}
        for index, (variant, batching) in enumerate(variants.items()):
            name = names[variant] = f"{mlp.stem}_{index}"
            (repo / name / "1").mkdir(parents=True)
            shutil.copy(source, repo / name / "1" / "model.onnx")
            (repo / name / "config.pbtxt").write_text(config(name, mlp.width, batching))
        server, port = start_server(repo)
        rows: list[dict[str, Any]] = []
        task = progress.add_task(f"MLP {mlp.label}", total=len(LEVELS) * len(variants))
        try:
            # Each level's references are measured just before and just after its served runs, and
            # the better of the two kept: this shared machine's speed drifts, and a reference taken
            # while something else runs would flatter the ratio.
            for concurrency in LEVELS:
                # What Triton's semantics give a closed loop of this many clients in-process: a batch
                # that is neither full nor preferred waits the delay before it runs.
                pauses = {
                    variant: delays[variant] / 1e6 if concurrency < full_at[variant] else 0.0
                    for variant in names
                    if variant != "off"
                }
                reference = in_process(source, mlp.width, concurrency, 2.0)
                waited = {
                    v: in_process(source, mlp.width, concurrency, 2.0, pause) for v, pause in pauses.items()
                }
                # p99 at concurrency 1 is compared across variants: there each variant is measured in
                # C1_ROUNDS rounds taken in turn, so the compared runs share the machine's drift and the
                # percentile rests on several times the samples.
                rounds = C1_ROUNDS if concurrency == 1 else 1
                results: dict[str, list[tuple[LoadResult, dict[str, float]]]] = {v: [] for v in names}
                for _ in range(rounds):
                    for variant, name in names.items():
                        request = payload(port, name, mlp.width)
                        run_load("http", ("127.0.0.1", port, request), concurrency, 1.0)
                        meter = ServerMeter(server.pid, port, name)
                        result = run_load("http", ("127.0.0.1", port, request), concurrency, seconds)
                        meters = {**meter.finish(), "client_cpu_us": result.client_cpu_us_per_request}
                        results[variant].append((result, meters))
                level_rows = []
                for variant, runs in results.items():
                    level_rows.append({"model": mlp.label, "batching": variant, "concurrency": concurrency,
                                       "queue_delay_us": delays[variant], **_combined(runs)})  # fmt: skip
                    progress.advance(task)
                reference = max(reference, in_process(source, mlp.width, concurrency, 2.0))
                for variant, pause in pauses.items():
                    waited[variant] = max(
                        waited[variant], in_process(source, mlp.width, concurrency, 2.0, pause)
                    )
                for row in level_rows:
                    row.update(
                        in_process_same_batch=reference, in_process_with_delay=waited.get(row["batching"])
                    )
                rows += level_rows
        finally:
            server.terminate()
            server.wait(30)
    order = list(variants)
    rows.sort(key=lambda row: (order.index(row["batching"]), row["concurrency"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--delay-us", type=int, default=2000, help="max_queue_delay_microseconds of the '2 ms' variant"
    )
    parser.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    parser.add_argument(
        "--json", type=Path, default=ROOT / "reports" / "benchmarks" / "dynamic_batching.json"
    )
    args = parser.parse_args()
    models = [Mlp(label, *MODELS[label]) for label in args.models.split(",")]
    console = Console(width=190)
    rows: list[dict[str, Any]] = []
    with Progress(console=console, transient=True) as progress:
        for mlp in models:
            rows += measure_model(mlp, args.seconds, args.delay_us, progress)

    delayed = f"{args.delay_us / 1000:g} ms"
    for mlp in models:
        table = Table(title=f"MLP {mlp.label} (width x layers), batch-1 requests over HTTP, one instance")
        for column in (
            "batching",
            "concurrency",
            "infer/s",
            "p99 (ms)",
            "avg batch",
            "CPU/request (us): serving / model / client",
            "in-process infer/s at batch=concurrency",
            "ratio",
            "in-process, the delay before each batch",
            "ratio",
        ):
            table.add_column(column, justify="right")
        mine = [row for row in rows if row["model"] == mlp.label]
        for row in mine:
            waits = row["in_process_with_delay"] is not None
            table.add_row(
                row["batching"], str(row["concurrency"]),
                f"{row['throughput']:,.0f}", f"{row['p99_us'] / 1000:,.1f}", f"{row['avg_batch']:.1f}",
                f"{row['serving_cpu_us']:,.0f} / {row['model_cpu_us']:,.0f} / {row['client_cpu_us']:,.0f}",
                f"{row['in_process_same_batch']:,.0f}",
                f"{row['throughput'] / row['in_process_same_batch']:.2f}",
                f"{row['in_process_with_delay']:,.0f}" if waits else "",
                f"{row['throughput'] / row['in_process_with_delay']:.2f}" if waits else "",
            )  # fmt: skip
        console.print(table)
        by_key = {(row["batching"], row["concurrency"]): row for row in mine}
        plain_p99 = by_key[("off", 1)]["p99_us"]
        for variant in (delayed, "pref 32"):
            at_32 = by_key[(variant, 32)]
            ratio = at_32["throughput"] / at_32["in_process_same_batch"]
            p99_cost = (by_key[(variant, 1)]["p99_us"] - plain_p99) / 1000
            delay_ms = at_32["queue_delay_us"] / 1000
            at_1 = by_key[(variant, 1)]
            # The model's own cost of waiting: a run after the delay idle, against one back to back.
            idle_cost_ms = (1 / at_1["in_process_with_delay"] - 1 / at_1["in_process_same_batch"]) * 1000
            mean_cost_ms = (1 / at_1["throughput"] - 1 / by_key[("off", 1)]["throughput"]) * 1000
            # Server and client share these cores: at the CPU each request took, they cannot go faster.
            per_request_us = at_32["serving_cpu_us"] + at_32["model_cpu_us"] + at_32["client_cpu_us"]
            ceiling = CPUS / per_request_us * 1e6
            console.print(
                f"  {variant}: goal 1, infer/s at concurrency 32 / in-process at batch 32 = {ratio:.2f} "
                f"(goal >= 0.85, {'met' if ratio >= 0.85 else 'missed'}; at the {per_request_us:,.0f} us "
                f"of CPU a request took, serving, model and client together, {CPUS} cores allow "
                f"{ceiling:,.0f}/s, {ceiling / at_32['in_process_same_batch']:.2f} of in-process); "
                f"goal 2, p99 at concurrency 1 "
                f"minus batching off = {p99_cost:+.1f} ms against the {delay_ms:g} ms queue delay "
                f"({'met' if p99_cost <= delay_ms else 'missed'}; {at_1['samples']:,} and "
                f"{by_key[('off', 1)]['samples']:,} samples; the mean rises {mean_cost_ms:+.1f} ms; "
                f"in-process, waiting the delay before each run adds {idle_cost_ms:+.1f} ms a run)"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

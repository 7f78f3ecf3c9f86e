"""Dynamic batching on compute-bound models: served throughput against the model's own limit.

Builds FP32 MLPs with seeded weights in a temporary folder (nothing downloaded): the 2048-wide
4-layer one of earlier runs, a 4096-wide 5-layer one whose inference costs ten times the
serving path's CPU, and (``--models 2048x8``) issue 19's 2048-wide 8-layer one. Each is served by
one `trt serve` three ways (``--variants`` picks some):

- ``off``: no ``dynamic_batching``;
- ``2 ms``: ``max_queue_delay_microseconds: 2000`` (``--delay-us``), max_batch_size 64;
- ``pref 32``: ``preferred_batch_size: [ 32 ]`` with a queue delay of one batch-32 execution
  (measured in-process first; ``--pref-delay-us`` sets it), the configuration that suits a closed
  loop of 32 clients.

Each is driven at concurrency 1, 8, 32 and 64 (``--levels``) with binary HTTP requests of batch 1
(at concurrency 1, three rounds of each variant taken in turn, since p99 is compared there) by the
thin load generator of ``_load.py``, or by NVIDIA's perf_analyzer (``--perf-analyzer [PATH]``,
``-i http -p SECONDS*1000 -s 25``, as issue 19 measured), beside ONNX Runtime in-process throughput
at the same batch size with the server's threads (every core, no spinning), with ONNX Runtime's
defaults and with one thread. The goals: at concurrency 32, batched serving reaches 0.85 of
in-process throughput at batch 32 with default threads; at concurrency 1, batching costs no more
p99 than the configured queue delay. ``--trt-root`` serves from another checkout (an export of an
earlier commit), to compare commits in one sitting.

Diagnostic columns, which change nothing in that comparison: the average batch the server formed and
the sizes it formed most (statistics extension), the server's CPU per request on its event loop
thread (the serving path: HTTP, scheduling, encoding) and on its other threads (the model), the load
generator's CPU per request (it shares the cores: the three together bound the throughput the
machine allows), and the in-process throughput of the same batch when each batch first waits the 2
ms delay, which is what Triton's semantics give a closed loop of that many clients when it cannot
fill ``max_batch_size``: a batch that is neither full nor preferred goes only when its oldest
request has waited the delay.

    python benchmarks/dynamic_batching.py [--seconds 5] [--delay-us 2000] [--models 2048x4,4096x5]
    python benchmarks/dynamic_batching.py --models 2048x8 --levels 32 --variants "pref 32" \
        --pref-delay-us 5000 --perf-analyzer --seconds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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

from _common import free_port, perf_analyzer_run  # noqa: E402
from _load import LoadResult, http_request_bytes, run_load  # noqa: E402

LEVELS = (1, 8, 32, 64)
C1_ROUNDS = 3  # rounds of each variant at concurrency 1, taken in turn
MAX_BATCH = 64
CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
MODELS = {"2048x4": (2048, 4), "4096x5": (4096, 5), "2048x8": (2048, 8)}  # width, layers
PERF_ANALYZER = Path("/tmp/trt-peers/perf/perf_analyzer")


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


def in_process(
    model: Path, width: int, batch: int, seconds: float, pause_s: float = 0.0, threads: str = "server"
) -> float:
    """Inferences per second running ``batch`` back to back (after ``pause_s`` idle before each run).

    ``threads``: "server" is what the server gives its one instance on this machine (every core, no
    spinning); "default" is ONNX Runtime's own defaults (a thread per core, spinning); "1" one thread."""
    options = ort.SessionOptions()
    if threads == "server":
        options.intra_op_num_threads = CPUS
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    elif threads == "1":
        options.intra_op_num_threads = 1
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
    """Requests, executions, batch sizes and CPU of the server process over one measured run."""

    def __init__(self, pid: int, port: int, model: str) -> None:
        self._process, self._port, self._model = psutil.Process(pid), port, model
        self._start = self._sample()

    def _sample(self) -> tuple[int, int, float, float, dict[int, int]]:
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
        sizes = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])}
        return int(stats["inference_count"]), int(stats["execution_count"]), loop_cpu, other_cpu, sizes

    def finish(self) -> dict[str, float]:
        end = self._sample()
        inferences, executions, loop_cpu, other_cpu = (
            b - a for a, b in zip(self._start[:4], end[:4], strict=True)
        )
        sizes = {size: count - self._start[4].get(size, 0) for size, count in end[4].items()}
        common = sorted(((count, size) for size, count in sizes.items() if count), reverse=True)[:3]
        self.batch_sizes = ", ".join(f"{size}x{count}" for count, size in common)
        return {
            "inferences": inferences,
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


def start_server(
    repo: Path, trt_root: Path, serve_args: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], int]:
    port, grpc_port = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "trt", "serve", f"--model-repository={repo}",
         "--http-address=127.0.0.1", f"--http-port={port}", f"--grpc-port={grpc_port}",
         "--allow-metrics=false", "--log-info=false", *serve_args],
        cwd=trt_root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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


@dataclass(frozen=True)
class Settings:
    seconds: float
    delay_us: int
    pref_delay_us: int  # 0: one batch-32 execution, measured in-process
    levels: tuple[int, ...]
    variants: tuple[str, ...]  # of "off", "delay", "pref 32"
    perf_analyzer: Path | None  # drive the server with NVIDIA's perf_analyzer instead of _load
    trt_root: Path  # the checkout whose trt serves (compare commits in one run)
    serve_args: tuple[str, ...] = ()  # more flags for trt serve (--frontend-workers=1)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured_run(
    settings: Settings, server: subprocess.Popen[bytes], port: int, name: str, width: int, concurrency: int
) -> tuple[tuple[LoadResult, dict[str, float]], str]:
    """One measured run of ``concurrency`` clients: the load's result, the server's meters, and the
    batch sizes it executed most ("32x140, 7x3": size x executions)."""
    if settings.perf_analyzer is None:
        request = payload(port, name, width)
        run_load("http", ("127.0.0.1", port, request), concurrency, 1.0)
        meter = ServerMeter(server.pid, port, name)
        result = run_load("http", ("127.0.0.1", port, request), concurrency, settings.seconds)
        meters = meter.finish()
        meters.pop("inferences")
        return (result, {**meters, "client_cpu_us": result.client_cpu_us_per_request}), meter.batch_sizes
    meter = ServerMeter(server.pid, port, name)
    cpu_before = _children_cpu_s()
    figures = perf_analyzer_run(
        str(settings.perf_analyzer), name, f"127.0.0.1:{port}", "http", concurrency,
        int(settings.seconds * 1000),
    )  # fmt: skip
    client_cpu = _children_cpu_s() - cpu_before
    meters = meter.finish()
    requests = max(int(meters.pop("inferences")), 1)
    # perf_analyzer's own throughput and p99 stand; its CPU is spread over every request of its run.
    result = LoadResult(
        requests=requests,
        errors=0,
        seconds=requests / max(figures["throughput"], 1e-9),
        latencies_us=np.array([figures["p99_us"]]),
        client_cpu_s=client_cpu,
    )
    return (result, {**meters, "client_cpu_us": result.client_cpu_us_per_request}), meter.batch_sizes


def measure_model(mlp: Mlp, settings: Settings, progress: Progress) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        source = repo / "source.onnx"
        build_mlp(source, mlp.width, mlp.layers)
        # Unless given, the preferred-32 variant waits up to one batch-32 execution (rounded up to a
        # millisecond), so a closed loop of 32 clients refills the batch before it goes.
        pref_delay_us = settings.pref_delay_us
        if not pref_delay_us:
            batch_32 = 32 / in_process(source, mlp.width, 32, 2.0)
            pref_delay_us = int(np.ceil(batch_32 * 1.25 * 1000)) * 1000
        delayed = f"{settings.delay_us / 1000:g} ms"
        every = {
            "off": ("off", "", 0),
            "delay": (delayed, f"dynamic_batching {{ max_queue_delay_microseconds: {settings.delay_us} }}\n",
                      settings.delay_us),
            "pref 32": ("pref 32", f"dynamic_batching {{ preferred_batch_size: [ 32 ] "
                        f"max_queue_delay_microseconds: {pref_delay_us} }}\n", pref_delay_us),
        }  # fmt: skip
        variants = {every[key][0]: every[key][1] for key in settings.variants}
        delays = {every[key][0]: every[key][2] for key in settings.variants}
        full_at = {delayed: MAX_BATCH, "pref 32": 32}  # the batch that goes without waiting
        names = {}
        for index, (variant, batching) in enumerate(variants.items()):
            name = names[variant] = f"{mlp.stem}_{index}"
            (repo / name / "1").mkdir(parents=True)
            shutil.copy(source, repo / name / "1" / "model.onnx")
            (repo / name / "config.pbtxt").write_text(config(name, mlp.width, batching))
        server, port = start_server(repo, settings.trt_root, settings.serve_args)
        rows: list[dict[str, Any]] = []
        task = progress.add_task(f"MLP {mlp.label}", total=len(settings.levels) * len(variants))
        try:
            # Each level's references are measured just before and just after its served runs, and
            # the better of the two kept: this shared machine's speed drifts, and a reference taken
            # while something else runs would flatter the ratio.
            for concurrency in settings.levels:
                # What Triton's semantics give a closed loop of this many clients in-process: a batch
                # that is neither full nor preferred waits the delay before it runs.
                pauses = {
                    variant: delays[variant] / 1e6 if concurrency < full_at[variant] else 0.0
                    for variant in names
                    if variant != "off"
                }

                def references(batch: int) -> dict[str, float]:
                    return {
                        threads: in_process(source, mlp.width, batch, 2.0, threads=threads)
                        for threads in ("server", "default", "1")
                    }

                reference = references(concurrency)
                waited = {
                    v: in_process(source, mlp.width, concurrency, 2.0, pause) for v, pause in pauses.items()
                }
                # p99 at concurrency 1 is compared across variants: there each variant is measured in
                # C1_ROUNDS rounds taken in turn, so the compared runs share the machine's drift and the
                # percentile rests on several times the samples.
                rounds = C1_ROUNDS if concurrency == 1 and settings.perf_analyzer is None else 1
                results: dict[str, list[tuple[LoadResult, dict[str, float]]]] = {v: [] for v in names}
                sizes: dict[str, str] = {}
                for _ in range(rounds):
                    for variant, name in names.items():
                        run, sizes[variant] = measured_run(
                            settings, server, port, name, mlp.width, concurrency
                        )
                        results[variant].append(run)
                level_rows = []
                for variant, runs in results.items():
                    level_rows.append({"model": mlp.label, "batching": variant, "concurrency": concurrency,
                                       "queue_delay_us": delays[variant], "batch_sizes": sizes[variant],
                                       **_combined(runs)})  # fmt: skip
                    progress.advance(task)
                again = references(concurrency)
                reference = {key: max(value, again[key]) for key, value in reference.items()}
                for variant, pause in pauses.items():
                    waited[variant] = max(
                        waited[variant], in_process(source, mlp.width, concurrency, 2.0, pause)
                    )
                for row in level_rows:
                    row.update(
                        in_process_same_batch=reference["server"],
                        in_process_default_threads=reference["default"],
                        in_process_one_thread=reference["1"],
                        in_process_with_delay=waited.get(row["batching"]),
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
    parser.add_argument(
        "--pref-delay-us", type=int, default=0,
        help="max_queue_delay_microseconds of 'pref 32' (default: one batch-32 execution, measured)",
    )  # fmt: skip
    parser.add_argument("--models", default="2048x4,4096x5", help=f"of {', '.join(MODELS)}")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="concurrencies")
    parser.add_argument("--variants", default="off,delay,pref 32", help="of off, delay, pref 32")
    parser.add_argument(
        "--perf-analyzer", type=Path, nargs="?", const=PERF_ANALYZER, default=None,
        help=f"drive the server with NVIDIA's perf_analyzer over HTTP (default path {PERF_ANALYZER})",
    )  # fmt: skip
    parser.add_argument(
        "--trt-root", type=Path, default=ROOT, help="the checkout whose trt serves (to compare commits)"
    )
    parser.add_argument(
        "--serve-args", default="", help="more flags for trt serve, e.g. '--frontend-workers=1'"
    )
    parser.add_argument(
        "--json", type=Path, default=ROOT / "reports" / "benchmarks" / "dynamic_batching.json"
    )
    args = parser.parse_args()
    if args.perf_analyzer is not None and not args.perf_analyzer.exists():
        raise SystemExit(f"perf_analyzer not found at {args.perf_analyzer}: see ../shared/PEERS.md")
    settings = Settings(
        args.seconds, args.delay_us, args.pref_delay_us, tuple(int(c) for c in args.levels.split(",")),
        tuple(v.strip() for v in args.variants.split(",")), args.perf_analyzer, args.trt_root.resolve(),
        tuple(args.serve_args.split()),
    )  # fmt: skip
    models = [Mlp(label, *MODELS[label]) for label in args.models.split(",")]
    console = Console(width=200)
    rows: list[dict[str, Any]] = []
    with Progress(console=console, transient=True) as progress:
        for mlp in models:
            rows += measure_model(mlp, settings, progress)
    client = "perf_analyzer" if settings.perf_analyzer else "benchmarks/_load.py"
    for mlp in models:
        print_model(console, mlp, [row for row in rows if row["model"] == mlp.label], client)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


def print_model(console: Console, mlp: Mlp, mine: list[dict[str, Any]], client: str) -> None:
    table = Table(
        title=f"MLP {mlp.label} (width x layers), batch-1 requests over HTTP ({client}), one instance"
    )
    for column in (
        "batching", "concurrency", "infer/s", "p99 (ms)", "avg batch", "batches (size x count)",
        "CPU/request (us): serving / model / client",
        "in-process infer/s at batch=concurrency: server's threads / default / 1 thread",
        "ratio to each", "in-process, the delay before each batch", "ratio",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    for row in mine:
        waits = row["in_process_with_delay"] is not None
        references = (
            row["in_process_same_batch"],
            row["in_process_default_threads"],
            row["in_process_one_thread"],
        )
        table.add_row(
            row["batching"], str(row["concurrency"]),
            f"{row['throughput']:,.0f}", f"{row['p99_us'] / 1000:,.1f}", f"{row['avg_batch']:.1f}",
            row["batch_sizes"],
            f"{row['serving_cpu_us']:,.0f} / {row['model_cpu_us']:,.0f} / {row['client_cpu_us']:,.0f}",
            " / ".join(f"{value:,.0f}" for value in references),
            " / ".join(f"{row['throughput'] / value:.2f}" for value in references),
            f"{row['in_process_with_delay']:,.0f}" if waits else "",
            f"{row['throughput'] / row['in_process_with_delay']:.2f}" if waits else "",
        )  # fmt: skip
    console.print(table)
    by_key = {(row["batching"], row["concurrency"]): row for row in mine}
    for variant in sorted({row["batching"] for row in mine} - {"off"}):
        at_32 = by_key.get((variant, 32))
        if at_32 is not None:
            ratio = at_32["throughput"] / at_32["in_process_default_threads"]
            # Server and client share these cores: at the CPU each request took, they cannot go faster.
            per_request_us = at_32["serving_cpu_us"] + at_32["model_cpu_us"] + at_32["client_cpu_us"]
            ceiling = CPUS / per_request_us * 1e6
            # A closed loop of 32 clients and batches of 32: the model idles while the 32 answers go
            # out and the 32 next requests come in, which takes at least 32 times the larger of the
            # loop's and the client's CPU per request (they run side by side, each on one core).
            batch_s = 32 / at_32["in_process_default_threads"]
            turnaround_s = 32 * max(at_32["serving_cpu_us"], at_32["client_cpu_us"]) / 1e6
            closed_loop = batch_s / (batch_s + turnaround_s)
            console.print(
                f"  {variant}: goal 1, infer/s at concurrency 32 / in-process at batch 32, default threads = "
                f"{ratio:.2f} (goal >= 0.85, {'met' if ratio >= 0.85 else 'missed'}; at the "
                f"{per_request_us:,.0f} us of CPU a request took, serving, model and client together, {CPUS} "
                f"cores allow {ceiling / at_32['in_process_default_threads']:.2f} of it; a closed loop whose "
                f"batch waits {turnaround_s * 1000:.1f} ms for its 32 requests to turn round allows "
                f"{closed_loop:.2f})"
            )
        at_1, plain = by_key.get((variant, 1)), by_key.get(("off", 1))
        if at_1 is not None and plain is not None:
            p99_cost = (at_1["p99_us"] - plain["p99_us"]) / 1000
            delay_ms = at_1["queue_delay_us"] / 1000
            # The model's own cost of waiting: a run after the delay idle, against one back to back.
            idle_cost_ms = (1 / at_1["in_process_with_delay"] - 1 / at_1["in_process_same_batch"]) * 1000
            mean_cost_ms = (1 / at_1["throughput"] - 1 / plain["throughput"]) * 1000
            console.print(
                f"  {variant}: goal 2, p99 at concurrency 1 minus batching off = {p99_cost:+.1f} ms against "
                f"the {delay_ms:g} ms queue delay ({'met' if p99_cost <= delay_ms else 'missed'}; "
                f"{at_1['samples']:,} and {plain['samples']:,} samples; mean {mean_cost_ms:+.1f} ms; "
                f"in-process, waiting the delay before each run adds {idle_cost_ms:+.1f} ms a run)"
            )


if __name__ == "__main__":
    main()

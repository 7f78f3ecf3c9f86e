"""What the core costs per request, alone: no sockets, no codecs, no model process.

Drives ``InferenceServer.infer`` in one event loop on the ONNX ``simple`` model (INT32 add/sub,
[1,16]), served with the direct scheduler (``simple``) and with the dynamic batcher
(``simple_batched``), and on Triton's Python ``add_sub`` example (issue 19's model), and reports
per request:
- ``infer_us``: the whole call into the core and back (min over ``--repeats`` runs);
- ``execute_us``: the backend's own ``execute`` on the same inputs, called directly;
- ``core_us``: the difference, what the core adds (checks, scheduling, statistics, futures);
  for Triton's Python ``add_sub`` model (``add_sub``, request scheduler) the whole call, the hand-off
  to its model process and back included;
- ``loop_cpu_us``: CPU time of the event loop's thread (for ``add_sub``, what this process spends
  while its model process computes);
- ``calls``: Python function calls per request under cProfile (``infer`` included, ``execute``'s
  own calls into ONNX Runtime are C and not counted).
At ``--concurrency`` above 1 the requests come from that many tasks at once.

    flock /tmp/trt-bench.lock python benchmarks/core_path.py [--requests 4000] [--repeats 5] \
        [--concurrency 1,32] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.server.backends.python.python_models import ADD_SUB, ADD_SUB_CONFIG  # noqa: E402
from trt.server.core.options import CoreOptions, ModelControlMode  # noqa: E402
from trt.server.core.server import InferenceServer  # noqa: E402
from trt.server.core.types import InferenceRequest, InputTensor  # noqa: E402

MODELS = {
    "simple": "direct scheduler",
    "simple_batched": "dynamic batcher",
    "add_sub": "request scheduler (Python model)",
}


@dataclass
class CorePathRow:
    model: str
    scheduler: str
    concurrency: int
    infer_us: float
    execute_us: float
    core_us: float
    loop_cpu_us: float
    calls: float


def _repository(folder: Path) -> Path:
    """``simple`` from the project's repository, and a copy of it that batches dynamically."""
    source = ROOT / "model_repository" / "simple"
    if not (source / "1" / "model.onnx").is_file():
        raise SystemExit("model_repository/simple is missing: run scripts/generate_model_repository.py")
    shutil.copytree(source, folder / "simple")
    batched = folder / "simple_batched"
    shutil.copytree(source, batched)
    config = (source / "config.pbtxt").read_text().replace('name: "simple"', 'name: "simple_batched"')
    (batched / "config.pbtxt").write_text(config + "dynamic_batching { }\n")
    (folder / "add_sub" / "1").mkdir(parents=True)
    (folder / "add_sub" / "1" / "model.py").write_text(ADD_SUB)
    (folder / "add_sub" / "config.pbtxt").write_text(ADD_SUB_CONFIG)
    return folder


def _request(model: str) -> InferenceRequest:
    if model == "add_sub":  # Triton's example: FP32 [4], no batching
        vector = np.arange(4, dtype=np.float32)
        tensors = [InputTensor("INPUT0", "FP32", (4,), vector), InputTensor("INPUT1", "FP32", (4,), vector)]
        return InferenceRequest(model, inputs=tensors)
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    return InferenceRequest(
        model,
        inputs=[InputTensor("INPUT0", "INT32", (1, 16), data), InputTensor("INPUT1", "INT32", (1, 16), data)],
    )


async def _run(
    server: InferenceServer, request: InferenceRequest, requests: int, concurrency: int
) -> tuple[float, float]:
    """Seconds, and CPU seconds of the event loop's thread, for ``requests`` requests from
    ``concurrency`` tasks."""

    async def client(count: int) -> None:
        for _ in range(count):
            await server.infer(request)

    started, cpu_started = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(client(requests // concurrency) for _ in range(concurrency)))
    return time.perf_counter() - started, time.thread_time() - cpu_started


def _execute_us(server: InferenceServer, request: InferenceRequest, requests: int, repeats: int) -> float:
    """The backend's own execute, called directly, per call (min over repeats); 0 for a Python model,
    whose execution runs in its own process (its row's ``core_us`` is then the whole call)."""
    model = server.model(request.model_name)
    if not hasattr(model._instances[0], "execute"):
        return 0.0
    instance = model._instances[0]  # the one instance both configs have
    feeds = {tensor.name: tensor.data for tensor in request.inputs if tensor.data is not None}
    names = tuple(model.signature.outputs)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(requests):
            instance.execute(feeds, names)
        best = min(best, time.perf_counter() - started)
    return best / requests * 1e6


async def _measure(requests: int, repeats: int, concurrencies: list[int]) -> list[CorePathRow]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        options = CoreOptions(
            model_repositories=(_repository(Path(folder)),),
            model_control_mode=ModelControlMode.EXPLICIT,
            load_models=tuple(MODELS),
        )
        server = InferenceServer(options)
        await server.start()
        try:
            for model, scheduler in MODELS.items():
                request = _request(model)
                await _run(server, request, 200, 1)  # warm up: the pool moves executions inline
                execute_us = _execute_us(server, request, requests, repeats)
                for concurrency in concurrencies:
                    runs = [await _run(server, request, requests, concurrency) for _ in range(repeats)]
                    seconds, loop_cpu = min(runs)
                    count = requests // concurrency * concurrency
                    profile = cProfile.Profile()
                    profile.enable()
                    await _run(server, request, count, concurrency)
                    profile.disable()
                    calls = pstats.Stats(profile).total_calls / count  # type: ignore[attr-defined]
                    infer_us = seconds / count * 1e6
                    rows.append(
                        CorePathRow(
                            model,
                            scheduler,
                            concurrency,
                            round(infer_us, 2),
                            round(execute_us, 2),
                            round(infer_us - execute_us, 2),
                            round(loop_cpu / count * 1e6, 2),
                            round(calls, 1),
                        )
                    )
        finally:
            await server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=4000, help="requests per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per row; the fastest counts")
    parser.add_argument("--concurrency", default="1,32", help="comma-separated task counts")
    parser.add_argument("--output", type=Path, default=ROOT / "reports" / "core_path.json")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    # The Python model's process inherits stdout and prints there (add_sub's finalize does):
    # send it to stderr while the models run, so that --json prints nothing but the rows.
    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        rows = asyncio.run(_measure(args.requests, args.repeats, concurrencies))
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
        os.close(stdout)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps([asdict(row) for row in rows], indent=2) + "\n")
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
        return
    table = Table(title="The core's cost per request (InferenceServer.infer, one event loop)")
    for column in (
        "model",
        "scheduler",
        "concurrency",
        "infer us",
        "execute us",
        "core us",
        "loop CPU us",
        "calls/request",
    ):
        table.add_column(column, justify="left" if column in ("model", "scheduler") else "right")
    for row in rows:
        table.add_row(
            row.model,
            row.scheduler,
            str(row.concurrency),
            f"{row.infer_us:.1f}",
            f"{row.execute_us:.1f}",
            f"{row.core_us:.1f}",
            f"{row.loop_cpu_us:.1f}",
            f"{row.calls:.0f}",
        )
    Console(width=120).print(table)
    print(f"JSON: {args.output}")


if __name__ == "__main__":
    main()

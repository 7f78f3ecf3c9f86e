"""What `trt serve` spends per HTTP request from the bytes read off a socket to the bytes written back.

The HTTP protocol, the app, the core and the backend of a real server run in one event loop; only the
socket is replaced by an in-memory transport that hands the protocol perf_analyzer's own request bytes
(its head and binary body, as captured from it) and takes the answer. Triton's Python ``add_sub``
example runs in its model process as when served (the hand-off to it and back included); the ONNX
``simple`` model runs in-process. Per request it reports the wall time, the CPU of the event loop's
thread, and Python calls (cProfile), each the best of ``--repeats`` runs. With no sockets and one
client at a time, the figures repeat within a few percent on a quiet machine: compare commits with it
(``--json`` rows), and confirm with perf_analyzer against a served checkout.

    flock /tmp/trt-bench.lock python benchmarks/http_path.py [--requests 4000] [--repeats 5] \\
        [--models add_sub,simple] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_path import _repository  # noqa: E402

from trt.server.core.options import CoreOptions, ModelControlMode  # noqa: E402
from trt.server.core.server import InferenceServer  # noqa: E402
from trt.server.http.app import HttpApp  # noqa: E402
from trt.server.http.protocol import HttpProtocol  # noqa: E402
from trt.server.http.server import HttpServer  # noqa: E402

MODELS = ("add_sub", "simple")


def perf_analyzer_request(model: str) -> bytes:
    """The bytes perf_analyzer 2.60 sends for one request of ``model`` (binary inputs and outputs)."""
    if model == "add_sub":
        inputs = [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])]
        outputs, data = ("OUTPUT0", "OUTPUT1"), np.arange(4, dtype=np.float32).tobytes()
    else:
        inputs = [("INPUT0", "INT32", [1, 16]), ("INPUT1", "INT32", [1, 16])]
        outputs, data = ("OUTPUT0", "OUTPUT1"), np.arange(16, dtype=np.int32).tobytes()
    header = json.dumps(
        {
            "id": "",
            "inputs": [
                {"name": n, "datatype": d, "shape": s, "parameters": {"binary_data_size": len(data)}}
                for n, d, s in inputs
            ],
            "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in outputs],
        },
        separators=(",", ":"),
    ).encode()
    body = header + data * len(inputs)
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: libcurl-agent/1.0\r\n"
        f"Accept: */*\r\nInference-Header-Content-Length: {len(header)}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class _Transport(asyncio.Transport):
    """A connection whose reads are fed by hand and whose writes resolve ``answered``."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: asyncio.Future[bytes] | None = None

    def write(self, data: Any) -> None:
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(bytes(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


@dataclass
class HttpPathRow:
    model: str
    request_us: float
    loop_cpu_us: float
    calls: float


async def _run(protocol: HttpProtocol, transport: _Transport, data: bytes, count: int) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    started, cpu_started = time.perf_counter(), time.thread_time()
    for _ in range(count):
        transport.answered = loop.create_future()
        protocol.data_received(data)
        answer = await transport.answered
        if not answer.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"the request failed: {answer[:300]!r}")
    return time.perf_counter() - started, time.thread_time() - cpu_started


async def _measure(models: list[str], requests: int, repeats: int, profiled: bool) -> list[HttpPathRow]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        options = CoreOptions(
            model_repositories=(_repository(Path(folder)),),
            model_control_mode=ModelControlMode.EXPLICIT,
            load_models=tuple(models),
        )
        core = InferenceServer(options)
        await core.start()
        try:
            server = HttpServer(
                HttpApp(core), cancellable=HttpApp.cancellable, queued_bytes=core.queued_bytes
            )
            for model in models:
                transport = _Transport()
                protocol = HttpProtocol(server.handler, server)
                protocol.connection_made(transport)
                data = perf_analyzer_request(model)
                await _run(protocol, transport, data, 200)  # warm up
                seconds, cpu = min([await _run(protocol, transport, data, requests) for _ in range(repeats)])
                calls = 0.0
                if profiled:
                    profile = cProfile.Profile()
                    profile.enable()
                    await _run(protocol, transport, data, requests)
                    profile.disable()
                    calls = pstats.Stats(profile).total_calls / requests  # type: ignore[attr-defined]
                rows.append(
                    HttpPathRow(
                        model,
                        round(seconds / requests * 1e6, 2),
                        round(cpu / requests * 1e6, 2),
                        round(calls, 1),
                    )
                )
        finally:
            await core.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=4000, help="requests per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per row; the fastest counts")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    parser.add_argument(
        "--no-calls",
        action="store_true",
        help="skip the cProfile run (for instruction counts under callgrind)",
    )
    args = parser.parse_args()
    # The Python model's process inherits stdout: send it to stderr while the models run, so that
    # --json prints nothing but the rows.
    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        import uvloop

        rows = uvloop.run(_measure(args.models.split(","), args.requests, args.repeats, not args.no_calls))
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
        os.close(stdout)
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
        return
    table = Table(title="One HTTP request through trt serve (in-memory socket, one event loop)")
    for column in ("model", "request us", "loop CPU us", "calls/request"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in rows:
        table.add_row(row.model, f"{row.request_us:.1f}", f"{row.loop_cpu_us:.1f}", f"{row.calls:.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()

"""What `trt serve` spends per request from the bytes read off a socket to the bytes written back.

The transport (HTTP/1.1, or HTTP/2 and gRPC), the app, the core and the backend of a real server run
in one event loop; only the socket is replaced by an in-memory transport that hands the connection
the bytes perf_analyzer sends for one request (over HTTP its head and binary body, as captured from
it; over gRPC its HEADERS, DATA and WINDOW_UPDATE frames) and takes the answer. Triton's Python ``add_sub``
example runs in its model process as when served (the hand-off to it and back included); the ONNX
``simple`` model runs in-process. Per request it reports the wall time, the CPU of the event loop's
thread, and Python calls (cProfile), each the best of ``--repeats`` runs. With no sockets and one
client at a time, the figures repeat within a few percent on a quiet machine: compare commits with it
(``--json`` rows), and confirm with perf_analyzer against a served checkout.

    flock /tmp/trt-bench.lock python benchmarks/request_path.py [--protocol grpc] [--requests 4000] \\
        [--repeats 5] [--models add_sub,simple] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import struct
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
from grpc_frontend import PERF_ANALYZER_HEADERS  # noqa: E402

from trt.http2.frames import END_HEADERS, END_STREAM, PREFACE, FrameType, frame_head  # noqa: E402
from trt.protos import grpc_service_pb2 as pb  # noqa: E402
from trt.server.core.options import CoreOptions, ModelControlMode  # noqa: E402
from trt.server.core.server import InferenceServer  # noqa: E402
from trt.server.grpc.app import GrpcApp  # noqa: E402
from trt.server.grpc.h2.connection import H2ServerConnection  # noqa: E402
from trt.server.grpc.options import GrpcOptions  # noqa: E402
from trt.server.grpc.server import service_methods  # noqa: E402
from trt.server.http.app import HttpApp  # noqa: E402
from trt.server.http.protocol import HttpProtocol  # noqa: E402
from trt.server.http.server import HttpServer  # noqa: E402

MODELS = ("add_sub", "simple")


def _tensors(model: str) -> tuple[list[tuple[str, str, list[int]]], tuple[str, ...], bytes]:
    """(name, datatype, shape) of each input, the outputs perf_analyzer asks for, an input's bytes."""
    if model == "add_sub":  # Triton's example: FP32 [4], no batching
        inputs = [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])]
        return inputs, ("OUTPUT0", "OUTPUT1"), np.arange(4, dtype=np.float32).tobytes()
    inputs = [("INPUT0", "INT32", [1, 16]), ("INPUT1", "INT32", [1, 16])]
    return inputs, ("OUTPUT0", "OUTPUT1"), np.arange(16, dtype=np.int32).tobytes()


def http_request(model: str) -> bytes:
    """The bytes perf_analyzer 2.60 sends for one HTTP request of ``model`` (binary inputs and outputs)."""
    inputs, outputs, data = _tensors(model)
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


def grpc_request(model: str) -> bytes:
    """The gRPC message (length-prefixed ``ModelInferRequest``) perf_analyzer sends for ``model``."""
    inputs, outputs, data = _tensors(model)
    request = pb.ModelInferRequest(model_name=model)
    for name, datatype, shape in inputs:
        request.inputs.add(name=name, datatype=datatype).shape.extend(shape)
        request.raw_input_contents.append(data)
    for name in outputs:
        request.outputs.add(name=name)
    request.parameters["triton_enable_empty_final_response"].bool_param = False
    message = request.SerializeToString()
    return struct.pack(">BI", 0, len(message)) + message


def grpc_call_bytes(stream_id: int, message: bytes, credit: int) -> bytes:
    """One call as grpc's C core sends it: credit back for the previous answer, HEADERS, DATA."""
    updates = b""
    if credit:
        updates = frame_head(4, FrameType.WINDOW_UPDATE, 0, 0) + struct.pack(">I", credit)
    return (
        updates
        + frame_head(len(PERF_ANALYZER_HEADERS), FrameType.HEADERS, END_HEADERS, stream_id)
        + PERF_ANALYZER_HEADERS
        + frame_head(len(message), FrameType.DATA, END_STREAM, stream_id)
        + message
    )


class _Transport(asyncio.Transport):
    """A connection whose reads are fed by hand; ``answered`` resolves once a whole answer was
    written (over HTTP/1.1 any write; over HTTP/2 the frame that ends a stream)."""

    def __init__(self, http2: bool) -> None:
        super().__init__()
        self.http2 = http2
        self.answered: asyncio.Future[bytes] | None = None
        self.written = bytearray()
        self.data_bytes = 0  # DATA payload written since the client last credited the connection

    def write(self, data: Any) -> None:
        if not self.http2:
            self._answer(bytes(data))
            return
        self.written += data
        while len(self.written) >= 9:
            length = int.from_bytes(self.written[:3], "big")
            if len(self.written) < 9 + length:
                break
            kind, flags = self.written[3], self.written[4]
            if kind == FrameType.DATA:
                self.data_bytes += length
            frame = bytes(self.written[: 9 + length])
            del self.written[: 9 + length]
            if kind == FrameType.HEADERS and flags & END_STREAM:
                self._answer(frame)

    def writelines(self, parts: Any) -> None:
        for part in parts:
            self.write(part)

    def _answer(self, data: bytes) -> None:
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


@dataclass
class RequestPathRow:
    protocol: str
    model: str
    request_us: float
    loop_cpu_us: float
    calls: float


class _Client:
    """Sends one request at a time over an in-memory connection and waits for its answer."""

    def __init__(self, protocol: str, core: InferenceServer, model: str) -> None:
        self.http2 = protocol == "grpc"
        self.transport = _Transport(self.http2)
        if self.http2:
            options = GrpcOptions()
            app = GrpcApp(options, service_methods(core), core.tracer)
            self.connection: asyncio.Protocol = H2ServerConnection(
                app, options.http2, options.keepalive, set()
            )
            self.connection.connection_made(self.transport)
            self.connection.data_received(PREFACE + frame_head(0, FrameType.SETTINGS, 0, 0))
            self.message = grpc_request(model)
            self.stream_id = 1
        else:
            server = HttpServer(
                HttpApp(core), cancellable=HttpApp.cancellable, queued_bytes=core.queued_bytes
            )
            self.connection = HttpProtocol(server.handler, server)
            self.connection.connection_made(self.transport)
            self.data = http_request(model)

    async def run(self, count: int) -> tuple[float, float]:
        """Seconds, and CPU seconds of the event loop's thread, for ``count`` requests one after another."""
        loop = asyncio.get_running_loop()
        started, cpu_started = time.perf_counter(), time.thread_time()
        for _ in range(count):
            self.transport.answered = loop.create_future()
            if self.http2:
                data = grpc_call_bytes(self.stream_id, self.message, self.transport.data_bytes)
                self.transport.data_bytes = 0
                self.stream_id += 2
            else:
                data = self.data
            self.connection.data_received(data)
            answer = await self.transport.answered
            if (
                (b"grpc-status" in answer and b"grpc-message" in answer)
                if self.http2
                else not answer.startswith(b"HTTP/1.1 200")
            ):
                raise RuntimeError(f"the request failed: {answer[:300]!r}")
        return time.perf_counter() - started, time.thread_time() - cpu_started


async def _measure(
    protocol: str, models: list[str], requests: int, repeats: int, profiled: bool
) -> list[RequestPathRow]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        options = CoreOptions(
            model_repositories=(_repository(Path(folder)),),
            model_control_mode=ModelControlMode.EXPLICIT,
            load_models=tuple(models),
            # Its load sampling runs on a timer: under callgrind, whose requests take far longer, it
            # would add to every request's count. Nothing else here depends on it.
            cpu_colocation=False,
        )
        core = InferenceServer(options)
        await core.start()
        try:
            for model in models:
                client = _Client(protocol, core, model)
                await client.run(200)  # warm up
                seconds, cpu = min([await client.run(requests) for _ in range(repeats)])
                calls = 0.0
                if profiled:
                    profile = cProfile.Profile()
                    profile.enable()
                    await client.run(requests)
                    profile.disable()
                    calls = pstats.Stats(profile).total_calls / requests  # type: ignore[attr-defined]
                rows.append(
                    RequestPathRow(
                        protocol,
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
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--requests", type=int, default=4000, help="requests per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per row; the fastest counts")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    parser.add_argument(
        "--no-calls", action="store_true", help="no cProfile run (for instruction counts under callgrind)"
    )
    args = parser.parse_args()
    # The Python model's process inherits stdout: send it to stderr while the models run, so that
    # --json prints nothing but the rows.
    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        import uvloop

        rows = uvloop.run(
            _measure(args.protocol, args.models.split(","), args.requests, args.repeats, not args.no_calls)
        )
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
        os.close(stdout)
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
        return
    table = Table(title=f"One {args.protocol} request through trt serve (in-memory socket, one event loop)")
    for column in ("model", "request us", "loop CPU us", "calls/request"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in rows:
        table.add_row(row.model, f"{row.request_us:.1f}", f"{row.loop_cpu_us:.1f}", f"{row.calls:.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()

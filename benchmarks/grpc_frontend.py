"""CPU per request of trt's gRPC front end and inference codecs alone, in-process (no sockets, no model).

The front end: trt's HTTP/2 connection and gRPC call fed, request after request, the bytes a gRPC
client (perf_analyzer) sends: its WINDOW_UPDATEs for the previous answer, HEADERS (the same header
block each time) and one DATA frame; the handler answers stored bytes, and what the connection
writes goes to a transport that only counts. The codecs: perf_analyzer's add_sub request
(2 x FP32[16], two outputs asked, its control parameter) decoded from gRPC, its response encoded for
gRPC and HTTP (binary outputs). Each figure is the minimum over repeats of the CPU time per call
(``time.process_time``), the least disturbed by the rest of a shared machine. To compare two
versions, run this script from each checkout in turn, several times, and compare the minima.

    python benchmarks/grpc_frontend.py [--requests 5000] [--repeats 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import uvloop
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trt.http2.frames import END_HEADERS, END_STREAM, PREFACE, FrameType, frame_head  # noqa: E402
from trt.http2.hpack import encode_header, encode_literal  # noqa: E402
from trt.protos import grpc_service_pb2 as pb  # noqa: E402
from trt.server.core.types import InferenceResponse, OutputTensor  # noqa: E402
from trt.server.grpc import codec as grpc_codec  # noqa: E402
from trt.server.grpc.app import GrpcApp, Method  # noqa: E402
from trt.server.grpc.call import GrpcCall  # noqa: E402
from trt.server.grpc.h2.connection import H2ServerConnection  # noqa: E402
from trt.server.grpc.options import GrpcOptions  # noqa: E402
from trt.server.http import codec as http_codec  # noqa: E402

INFER = "/inference.GRPCInferenceService/ModelInfer"


class CountingTransport:
    """Where the connection writes: bytes and writes counted, nothing sent."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def writelines(self, parts: list[bytes]) -> None:
        self.writes += 1

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False


# The HEADERS block of a ModelInfer call as perf_analyzer's grpc C core sends it (HPACK, no indexing).
PERF_ANALYZER_HEADERS = b"".join(
    [
        encode_header(":method", "POST"),
        encode_header(":scheme", "http"),
        encode_header(":path", INFER),
        encode_header(":authority", "127.0.0.1:8001"),
        encode_literal("te", "trailers"),
        encode_literal("content-type", "application/grpc"),
        encode_literal("user-agent", "grpc-c++/1.67.1 grpc-c/43.0.0 (linux; chttp2)"),
        encode_literal("grpc-accept-encoding", "identity, deflate, gzip"),
    ]
)


def _client_bytes(stream_id: int, block: bytes, message: bytes) -> bytes:
    updates = b""
    if stream_id > 1:  # the client credits the previous answer back, as grpc's C core does
        updates = frame_head(4, FrameType.WINDOW_UPDATE, 0, 0) + struct.pack(">I", 205)
        updates += frame_head(4, FrameType.WINDOW_UPDATE, 0, stream_id - 2) + struct.pack(">I", 205)
    return (
        updates
        + frame_head(len(block), FrameType.HEADERS, END_HEADERS, stream_id)
        + block
        + frame_head(len(message), FrameType.DATA, END_STREAM, stream_id)
        + message
    )


async def front_end_us(requests: int, repeats: int) -> float:
    reply = b"r" * 200

    async def answer(data: bytes | memoryview, call: GrpcCall) -> bytes:
        return reply

    options = GrpcOptions()
    app = GrpcApp(options, {INFER: Method("ModelInfer", "inference", answer, compressed=True)}, None)
    connection = H2ServerConnection(app, options.http2, options.keepalive, set())
    transport = CountingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.data_received(PREFACE + frame_head(0, FrameType.SETTINGS, 0, 0))
    block = PERF_ANALYZER_HEADERS
    body = b"m" * 150
    message = struct.pack(">BI", 0, len(body)) + body
    chunks = [_client_bytes(1 + 2 * i, block, message) for i in range(requests * (repeats + 1))]
    best = float("inf")
    index = 0
    for repeat in range(repeats + 1):  # the first is a warm-up
        started = time.process_time()
        for _ in range(requests):
            connection.data_received(chunks[index])
            index += 1
            await asyncio.sleep(0)  # the call's task runs
            await asyncio.sleep(0)
        if repeat:
            best = min(best, (time.process_time() - started) / requests * 1e6)
    if transport.writes < requests * repeats:
        raise SystemExit(f"only {transport.writes} writes for {requests * (repeats + 1)} requests")
    return best


def per_call_us(function: Callable[[], object], calls: int, repeats: int) -> float:
    function()
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(calls):
            function()
        best = min(best, (time.process_time() - started) / calls * 1e6)
    return best


def add_sub_request() -> bytes:
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="FP32")
        tensor.shape.extend([16])
        request.raw_input_contents.append(np.arange(16, dtype=np.float32).tobytes())
    for name in ("OUTPUT0", "OUTPUT1"):
        request.outputs.add(name=name)
    request.parameters["triton_enable_empty_final_response"].bool_param = False
    return bytes(request.SerializeToString())


def add_sub_response() -> InferenceResponse:
    data = np.arange(16, dtype=np.float32)
    return InferenceResponse(
        "add_sub",
        "1",
        "",
        [OutputTensor("OUTPUT0", "FP32", (16,), data), OutputTensor("OUTPUT1", "FP32", (16,), data)],
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=5000, help="requests (calls) per repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path, default=ROOT / "reports" / "benchmarks" / "grpc_frontend.json")
    args = parser.parse_args()
    request, response = add_sub_request(), add_sub_response()
    figures = {
        "gRPC front end (frames in, stored reply out)": uvloop.run(front_end_us(args.requests, args.repeats)),
        "gRPC decode, add_sub request": per_call_us(
            lambda: grpc_codec.decode_infer_message(request), args.requests * 4, args.repeats
        ),
        "gRPC encode, add_sub response": per_call_us(
            lambda: grpc_codec.encode_infer_parts(response), args.requests * 4, args.repeats
        ),
        "HTTP encode, add_sub response (binary)": per_call_us(
            lambda: http_codec.encode_response(response, {}, True), args.requests * 4, args.repeats
        ),
    }
    table = Table(title=f"CPU per request, minimum of {args.repeats} repeats (in-process)")
    table.add_column("what")
    table.add_column("us", justify="right")
    for name, value in figures.items():
        table.add_row(name, f"{value:.2f}")
    Console().print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"us_per_request": figures, "requests": args.requests, "repeats": args.repeats}, indent=2)
    )


if __name__ == "__main__":
    main()

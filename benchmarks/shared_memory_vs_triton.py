"""Tensors through system shared memory, trt against NVIDIA Triton 2.51: the same Python identity model
on both, one request at a time over HTTP (or gRPC, ``--protocol grpc``), for large FP32 tensors sent in
the body (binary; over gRPC, ``raw_input_contents``) or through registered regions (input and output
both in shared memory).

Per run: the median request latency, and the longest a health check of the same server waited while
the requests ran (whether a large copy holds everyone else). Rounds alternate the servers' order; the
table gives each round's trt / Triton ratio and their median. One run on one machine: compare ratios.

    flock /tmp/trt-bench.lock python benchmarks/shared_memory_vs_triton.py --peers /tmp/trt-peers
        [--protocol grpc] [--sizes-mb 1,16,64] [--requests 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _side_by_side import add_options, ratio_table, rounds_in_turn, triton_and_trt, write_results  # noqa: E402

from tests.support import longest_wait_while  # noqa: E402

MODEL = "identity"
CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return answers
"""
MODES = ("binary", "system_shm")


def _write_repository(root: Path) -> Path:
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(CONFIG)
    (root / MODEL / "1" / "model.py").write_text(MODEL_PY)
    return root


@contextmanager
def _health_checks(port: int) -> Iterator[Callable[[], object]]:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        yield client.is_server_live
    finally:
        client.close()


def _run(
    ports: tuple[int, int], protocol: str, data: np.ndarray, mode: str, requests: int
) -> dict[str, float]:
    """``requests`` to the server on ``ports`` (HTTP, gRPC) over ``protocol``, the health checks over
    HTTP."""
    http_port, grpc_port = ports
    client: Any
    if protocol == "grpc":
        # tritonclient's own limit (2**31 - 1 both ways) is what perf_analyzer and most clients set.
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        module = grpcclient
        output = grpcclient.InferRequestedOutput("Y")
    else:
        client, module = (
            httpclient.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=300),
            httpclient,
        )
        output = httpclient.InferRequestedOutput("Y", binary_data=True)
    size, tag = data.nbytes, f"/trt_bench_shm_{os.getpid()}"
    regions = []
    try:
        tensor = module.InferInput("X", [data.size], "FP32")
        if mode == "system_shm":
            regions = [shm.create_shared_memory_region(n, f"{tag}_{n}", size) for n in ("in", "out")]
            shm.set_shared_memory_region(regions[0], [data])
            for name in ("in", "out"):
                client.register_system_shared_memory(f"bench_{name}", f"{tag}_{name}", size)
            tensor.set_shared_memory("bench_in", size)
            output.set_shared_memory("bench_out", size)
        else:
            tensor.set_data_from_numpy(data)
        latencies: list[float] = []

        def send() -> None:
            for _ in range(requests):
                started = time.perf_counter()
                result = client.infer(MODEL, [tensor], outputs=[output])
                if mode == "binary":
                    result.as_numpy("Y")
                latencies.append(time.perf_counter() - started)

        send()  # warm: the first large request of each size allocates on both servers
        latencies.clear()
        _, worst = longest_wait_while(partial(_health_checks, http_port), send)
        answer = shm.get_contents_as_numpy(regions[1], np.float32, [data.size]) if regions else None
        if answer is not None and not np.array_equal(answer, data):
            raise SystemExit(f"the answer on port {http_port} differs from the input")
        return {"latency_ms": 1000 * statistics.median(latencies), "health_wait_ms": 1000 * worst}
    finally:
        if mode == "system_shm":
            client.unregister_system_shared_memory()
            for region in regions:
                shm.destroy_shared_memory_region(region)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(parser, "shared_memory_vs_triton", requests=10)
    parser.add_argument("--sizes-mb", default="1,16,64", help="tensor sizes, MB (10^6 bytes) of FP32")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    args = parser.parse_args()
    console = Console()
    sizes = [int(size) for size in args.sizes_mb.split(",")]
    tensors = {size: np.random.default_rng(size).random(size * 250_000, dtype=np.float32) for size in sizes}
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as folder:
        repository = _write_repository(Path(folder))
        with triton_and_trt(args.peers, args.venv, repository, MODEL, ["--allow-client-shm=true"]) as servers:
            for index, order in rounds_in_turn(args.rounds):
                for server in order:
                    for size in sizes:
                        for mode in MODES:
                            served = servers[server]
                            ports = (served.http_port, served.grpc_port)
                            measured = _run(ports, args.protocol, tensors[size], mode, args.requests)
                            rows.append(
                                {"round": index, "server": server, "case": f"{size} MB {mode}", **measured}
                            )
                            console.print(f"round {index} {server:6} {size:>4} MB {mode:10} {measured}")
    groups = {f"{size} MB {mode}": ["latency_ms", "health_wait_ms"] for size in sizes for mode in MODES}
    title = f"system shared memory over {args.protocol}: trt / Triton 2.51"
    table, summary = ratio_table(title, rows, groups, "case")
    console.print(table)
    write_results(args.output, rows, summary, console)


if __name__ == "__main__":
    main()

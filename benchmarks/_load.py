"""A deliberately thin closed-loop load generator for the benchmarks: pre-encoded requests over raw
keep-alive HTTP/1.1 sockets or a gRPC stub, spread over worker processes, so that the client spends
as little CPU as possible and the server's cost per request is what gets measured."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import resource
import time
from dataclasses import dataclass

import numpy as np


@dataclass
class LoadResult:
    requests: int
    errors: int
    seconds: float
    latencies_us: np.ndarray
    client_cpu_s: float = 0.0  # CPU the client processes used, warm-up included

    @property
    def client_cpu_us_per_request(self) -> float:
        return self.client_cpu_s / max(self.requests, 1) * 1e6

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        return float(np.percentile(self.latencies_us, p)) if len(self.latencies_us) else float("nan")


def http_request_bytes(host: str, path: str, json_header: bytes, binary: bytes) -> bytes:
    body = json_header + binary
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
        f"Inference-Header-Content-Length: {len(json_header)}\r\n\r\n"
    ).encode()
    return head + body


async def _http_worker(host: str, port: int, payload: bytes, deadline: float, latencies: list[float]) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    errors = 0
    try:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            writer.write(payload)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            status_ok = head.startswith(b"HTTP/1.1 200")
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            latencies.append((time.perf_counter() - start) * 1e6)
            errors += not status_ok
    finally:
        writer.close()
    return errors


async def _grpc_worker(target: str, request: object, deadline: float, latencies: list[float]) -> int:
    import grpc

    from trt.protos import grpc_service_pb2_grpc

    errors = 0
    async with grpc.aio.insecure_channel(target) as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            try:
                await stub.ModelInfer(request)
            except grpc.aio.AioRpcError:
                errors += 1
            latencies.append((time.perf_counter() - start) * 1e6)
    return errors


def _process_main(
    kind: str, args: tuple, connections: int, seconds: float, warmup: float, queue: mp.Queue
) -> None:
    async def main() -> tuple[int, int, list[float]]:
        warm_deadline = time.perf_counter() + warmup
        latencies: list[float] = []
        start_at = time.perf_counter() + warmup
        deadline = start_at + seconds

        async def one() -> int:
            warm: list[float] = []
            if kind == "http":
                await _http_worker(*args, warm_deadline, warm)
                return await _http_worker(*args, deadline, latencies)
            await _grpc_worker(*args, warm_deadline, warm)
            return await _grpc_worker(*args, deadline, latencies)

        errors = sum(await asyncio.gather(*(one() for _ in range(connections))))
        return len(latencies), errors, latencies

    try:
        import uvloop

        count, errors, latencies = uvloop.run(main())
    except ImportError:
        count, errors, latencies = asyncio.run(main())
    queue.put((count, errors, latencies))


def run_load(
    kind: str, args: tuple, concurrency: int, seconds: float, warmup: float = 1.0, processes: int = 1
) -> LoadResult:
    """Closed loop: ``concurrency`` requests in flight, split across ``processes`` client processes."""
    processes = max(1, min(processes, concurrency))
    shares = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    queue: mp.Queue = mp.get_context("fork").Queue()
    workers = [
        mp.get_context("fork").Process(target=_process_main, args=(kind, args, share, seconds, warmup, queue))
        for share in shares
    ]
    for worker in workers:
        worker.start()
    results = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers count once they are joined
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # The warm-up's share is taken out in proportion to time: near enough for a per-request figure.
    client_cpu *= seconds / (seconds + warmup)
    latencies = np.array([lat for _, _, lats in results for lat in lats])
    return LoadResult(sum(r[0] for r in results), sum(r[1] for r in results), seconds, latencies, client_cpu)

"""The generative load: closed loop (``concurrency`` requests in flight, each slot sending its next when
the last completes) or open loop (arrivals at a constant or Poisson rate), ``warm-up + count`` requests a
level, on one asyncio loop (uvloop when installed). Generation requests last seconds and arrive at tens
per second, so one loop is far from saturating; the level reports the CPU it took all the same."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import grpc.aio

from trt.perf.genai import endpoints
from trt.perf.genai.grpc_stream import GrpcGenerateStream, RequestBuilder, open_channel
from trt.perf.genai.http_stream import HttpStreamConnection
from trt.perf.genai.options import GenAIOptions
from trt.perf.genai.prompts import Prompt
from trt.perf.genai.records import RequestRecord
from trt.perf.genai.sse import EventParser, EventStreamError
from trt.perf.options import Distribution, LoadKind
from trt.perf.transport import RequestFailed


class Client(Protocol):
    async def run(self, record: RequestRecord) -> None: ...

    def close(self) -> None: ...


class HttpClient:
    """OpenAI routes and ``generate``/``generate_stream`` over one keep-alive connection."""

    def __init__(self, options: GenAIOptions) -> None:
        host, port = options.host_port
        self.options = options
        self.connection = HttpStreamConnection(host, port, options.http_headers)

    async def run(self, record: RequestRecord) -> None:
        options = self.options
        kind = options.endpoint_type
        body = endpoints.http_body(options, record.prompt)
        parser = EventParser()
        buffered = bytearray()
        done = False

        def on_bytes(data: bytes, at_ns: int) -> None:
            nonlocal done
            if not options.streaming or self.connection.status != 200:
                buffered.extend(data)
                return
            for event in parser.feed(data):
                if event.name == "error":
                    raise RequestFailed(f"error event: {event.data[:200]}")
                text = endpoints.event_text(kind, event.data)
                if text is None:
                    done = True
                else:
                    record.received(text, at_ns)

        record.start_ns = time.perf_counter_ns()
        accept = "text/event-stream" if options.streaming else "application/json"
        status = await self.connection.post(options.route, body, on_bytes, accept)
        record.end_ns = time.perf_counter_ns()
        if status != 200:
            raise RequestFailed(endpoints.error_message(status, bytes(buffered)))
        if not kind.generates:
            endpoints.check_embeddings(bytes(buffered), record.prompt.texts)
            record.answered(record.end_ns)
        elif not options.streaming:
            record.received(endpoints.body_text(kind, bytes(buffered)), record.end_ns)
        elif kind.openai and not done:
            raise RequestFailed("the event stream ended without data: [DONE]")

    def close(self) -> None:
        self.connection.close()


class GrpcClient:
    def __init__(self, stream: GrpcGenerateStream, builder: RequestBuilder) -> None:
        self.stream, self.builder = stream, builder
        self.sent = 0

    async def run(self, record: RequestRecord) -> None:
        self.sent += 1
        payload = self.builder.build(record.prompt, str(self.sent))
        record.start_ns = time.perf_counter_ns()
        await self.stream.generate(payload, record.received)
        record.end_ns = time.perf_counter_ns()

    def close(self) -> None:
        self.stream.close()


@dataclass
class LevelRun:
    records: list[RequestRecord]  # the measured requests, in the order they were sent
    cpu_s: float  # the load generator's CPU time over the level
    wall_s: float
    delayed: int  # open loop: arrivals sent late because max_inflight requests were in flight


class ClientFactory(Protocol):
    """Makes a level's clients inside its event loop, and closes what they share when it ends."""

    def make(self) -> Client: ...

    async def close(self) -> None: ...


class HttpClients:
    def __init__(self, options: GenAIOptions) -> None:
        self.options = options

    def make(self) -> Client:
        return HttpClient(self.options)

    async def close(self) -> None:
        return None


class GrpcClients:
    """One channel (one HTTP/2 connection) per level, a stream per slot on it."""

    def __init__(self, options: GenAIOptions, builder: RequestBuilder) -> None:
        self.options, self.builder = options, builder
        self.channel: grpc.aio.Channel | None = None

    def make(self) -> Client:
        if self.channel is None:
            self.channel = open_channel(*self.options.host_port)
        return GrpcClient(GrpcGenerateStream(self.channel), self.builder)

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
            self.channel = None


async def _one(client: Client, record: RequestRecord, timeout: float) -> None:
    try:
        await asyncio.wait_for(client.run(record), timeout)
    except TimeoutError:
        record.error = f"no answer within --request-timeout {timeout:g} s"
        client.close()
    except (RequestFailed, EventStreamError) as error:
        record.error = str(error)
    if not record.end_ns:
        record.end_ns = time.perf_counter_ns()


async def _closed_loop(
    make: ClientFactory, prompts: list[Prompt], concurrency: int, warmup: int, count: int, timeout: float
) -> tuple[list[RequestRecord], int]:
    """The warm-up requests run (and end) first, so that the measured ones start together: a warm-up
    request still running would make the measured phase start short of ``concurrency``."""
    clients = [make.make() for _ in range(concurrency)]
    offset = 0

    async def phase(total: int) -> list[RequestRecord]:
        nonlocal offset
        records: list[RequestRecord] = []

        async def slot(client: Client) -> None:
            while len(records) < total:
                record = RequestRecord(prompts[(offset + len(records)) % len(prompts)])
                records.append(record)
                await _one(client, record, timeout)

        await asyncio.gather(*(slot(client) for client in clients))
        offset += total
        return records

    try:
        if warmup:
            await phase(warmup)
        return await phase(count), 0
    finally:
        for client in clients:
            client.close()


async def _open_loop(
    make: ClientFactory,
    prompts: list[Prompt],
    rate: float,
    distribution: Distribution,
    seed: int,
    warmup: int,
    count: int,
    timeout: float,
    max_inflight: int,
) -> tuple[list[RequestRecord], int]:
    rng = random.Random(seed)
    idle: list[Client] = []
    delayed = 0
    free = asyncio.Semaphore(max_inflight)
    tasks: list[asyncio.Task[None]] = []
    records: list[RequestRecord] = []

    async def send(record: RequestRecord) -> None:
        client = idle.pop() if idle else make.make()
        try:
            await _one(client, record, timeout)
        finally:
            idle.append(client)
            free.release()

    start, at = time.perf_counter(), 0.0
    for index in range(warmup + count):
        at += (
            rng.expovariate(rate) if distribution is Distribution.POISSON else (1.0 / rate if index else 0.0)
        )
        pause = start + at - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        if free.locked():
            delayed += 1
        await free.acquire()
        record = RequestRecord(prompts[index % len(prompts)])
        if index >= warmup:
            records.append(record)
        tasks.append(asyncio.ensure_future(send(record)))
    await asyncio.gather(*tasks)
    for client in idle:
        client.close()
    return records, delayed


def run_level(options: GenAIOptions, level: float, prompts: list[Prompt], make: ClientFactory) -> LevelRun:
    """Measure one level: ``options.requests_for(level)`` requests after the warm-up ones."""
    count = options.requests_for(level)

    async def main() -> tuple[list[RequestRecord], int]:
        try:
            if options.load is LoadKind.CONCURRENCY:
                return await _closed_loop(
                    make, prompts, int(level), options.warmup_request_count, count, options.request_timeout_s
                )
            return await _open_loop(
                make,
                prompts,
                level,
                options.distribution,
                options.seed,
                options.warmup_request_count,
                count,
                options.request_timeout_s,
                options.max_inflight,
            )
        finally:
            await make.close()

    before, clock = os.times(), time.perf_counter()
    records, delayed = _run(main)
    after = os.times()
    cpu = (after.user + after.system) - (before.user + before.system)
    return LevelRun(records, cpu, time.perf_counter() - clock, delayed)


def _run(main: Callable[[], Awaitable[tuple[list[RequestRecord], int]]]) -> tuple[list[RequestRecord], int]:
    async def wrapped() -> tuple[list[RequestRecord], int]:
        return await main()

    with contextlib.suppress(ImportError):
        import uvloop

        return uvloop.run(wrapped())
    return asyncio.run(wrapped())

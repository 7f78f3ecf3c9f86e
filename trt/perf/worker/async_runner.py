"""The asyncio worker (``--async``, the default for sequence models): one event loop per process, uvloop
when installed; the parent's commands arrive on a pipe watched with ``loop.add_reader``."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from trt.perf.options import LoadKind, Protocol
from trt.perf.schedule import arrivals
from trt.perf.transport import ConnectionLost, RequestFailed
from trt.perf.worker.grpc_callbacks import CallbackLoop
from trt.perf.worker.plan import LoadAssignment, SourceFactory, WorkerPlan
from trt.perf.worker.records import Recorder
from trt.perf.worker.sources import RequestCycle, SequenceSource

Source = RequestCycle | SequenceSource
LATE_S = 0.002  # an arrival sent more than this after its scheduled time counts as delayed
MAX_OPEN_LOOP_LANES = 4096


class AsyncRunner:
    def __init__(self, plan: WorkerPlan, conn: Connection) -> None:
        self.plan, self.conn = plan, conn
        # Closed-loop gRPC records from the callbacks' threads while the loop takes windows.
        self.recorder = Recorder(plan.index, threaded=self._chains_callbacks())
        self.sources = SourceFactory(plan)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.stopping = False
        self.channel: Any = None
        self.callbacks: CallbackLoop | None = None  # closed-loop gRPC unary: see perf.worker.grpc_callbacks
        self.sources_lock = threading.Lock()  # callbacks draw sequence steps from two threads
        self.done: asyncio.Future[None] | None = None
        self.fatal: str | None = None  # an unexpected client error, reported at the next flush

    def run(self) -> None:
        try:
            import uvloop

            uvloop.run(self._main())
        except ImportError:
            asyncio.run(self._main())

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        if self.plan.protocol is Protocol.GRPC:
            import grpc.aio

            from trt.perf.transport.grpc_clients import CHANNEL_OPTIONS

            self.channel = grpc.aio.insecure_channel(
                f"{self.plan.host}:{self.plan.port}", options=CHANNEL_OPTIONS
            )
        loop.add_reader(self.conn.fileno(), self._on_command)
        self.conn.send(("ready", None))
        await self.done
        loop.remove_reader(self.conn.fileno())
        if self.channel is not None:
            await self.channel.close()

    def _on_command(self) -> None:
        try:
            command, argument = self.conn.recv()
        except EOFError:
            command, argument = "stop", None
        if command == "flush":
            fatal = self.fatal or (self.callbacks.fatal if self.callbacks is not None else None)
            if fatal is not None:
                self.conn.send(("error", fatal))
            else:
                self.conn.send(("part", self.recorder.take()))
        elif command == "load":
            self._spawn(self._apply(argument))
        elif command == "stop":
            self._spawn(self._stop())

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self.fatal is None:
            error = task.exception()
            self.fatal = f"{type(error).__name__}: {error}"

    def _client(self) -> Any:
        plan = self.plan
        if plan.protocol is Protocol.HTTP:
            from trt.perf.transport.http_async import AsyncHttpConnection

            return AsyncHttpConnection(plan.host, plan.port)
        from trt.perf.transport.grpc_clients import AsyncGrpcStream, AsyncGrpcUnary

        if plan.streaming:
            return AsyncGrpcStream(self.channel, plan.decoupled)
        return AsyncGrpcUnary(self.channel, plan.timeout_s)

    async def _send(self, client: Any, payload: bytes, ended: bool) -> None:
        start = time.perf_counter_ns()
        try:
            try:
                responses = await client.infer(payload)
            except ConnectionLost:
                responses = await client.infer(payload)  # a keep-alive connection the server had closed
        except RequestFailed as error:
            self.recorder.failure(str(error))
            await asyncio.sleep(0.001)  # a server that refuses everything must not spin the loop
            return
        self.recorder.success(
            time.perf_counter_ns() - start, client.last_send_ns, client.last_recv_ns, responses, ended
        )

    async def _closed_slot(self, slot: int, lanes: list[tuple[Any, Source]]) -> None:
        client, source = self._client(), self.sources.source(slot)
        lanes.append((client, source))
        with contextlib.suppress(RequestFailed):
            await client.connect()
        while not self.stopping:
            payload = source.next()
            await self._send(client, payload, source.ended)

    async def _open_loop(self, assignment: LoadAssignment, lanes: list[tuple[Any, Source]]) -> None:
        assert assignment.schedule is not None
        idle: asyncio.Queue[tuple[Any, Source]] = asyncio.Queue()
        sequences = self.plan.sequence is not None
        initial = max(1, self.plan.sequence.num_sequences // self.plan.count) if self.plan.sequence else 4
        for _ in range(initial):
            lanes.append((self._client(), self.sources.source(len(lanes))))
            idle.put_nowait(lanes[-1])
        start = time.perf_counter()
        for offset in arrivals(assignment.schedule):
            if self.stopping:
                break
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
                if self.stopping:
                    break
            late = delay < -LATE_S
            if idle.empty() and not sequences and len(lanes) < MAX_OPEN_LOOP_LANES:
                lanes.append((self._client(), self.sources.source(len(lanes))))
                idle.put_nowait(lanes[-1])
            elif idle.empty():
                late = True
            lane = await idle.get()
            if late:
                self.recorder.late()
            self._spawn(self._one(lane, idle))

    async def _one(self, lane: tuple[Any, Source], idle: asyncio.Queue[tuple[Any, Source]]) -> None:
        client, source = lane
        try:
            payload = source.next()
            await self._send(client, payload, source.ended)
        finally:
            idle.put_nowait(lane)

    async def _apply(self, assignment: LoadAssignment) -> None:
        await self._wind_down()
        self.stopping = False
        self.lanes: list[tuple[Any, Source]] = []
        self.load_tasks: list[asyncio.Task[Any]] = []
        if assignment.kind is LoadKind.CONCURRENCY and self._chains_callbacks():
            self.callbacks = CallbackLoop(
                self.plan.host, self.plan.port, self.plan.timeout_s, self.recorder, self._next_locked
            )
            slots = range(assignment.slot_offset, assignment.slot_offset + assignment.slots)
            self.lanes = [(self._client(), self.sources.source(slot)) for slot in slots]
            self.callbacks.start([source for _, source in self.lanes])
        elif assignment.kind is LoadKind.CONCURRENCY:
            for slot in range(assignment.slots):
                self.load_tasks.append(
                    self._spawn(self._closed_slot(assignment.slot_offset + slot, self.lanes))
                )
        elif assignment.schedule is not None and assignment.schedule.rate + sum(
            assignment.schedule.intervals_us
        ):
            self.load_tasks.append(self._spawn(self._open_loop(assignment, self.lanes)))
        await asyncio.sleep(0)
        self.conn.send(("loaded", None))

    def _chains_callbacks(self) -> bool:
        return self.plan.protocol is Protocol.GRPC and not self.plan.streaming

    def _next_locked(self, source: Source) -> bytes:
        with self.sources_lock:
            return source.next()

    async def _wind_down(self) -> None:
        """Stop the current level: let in-flight requests finish, end open sequences, close clients."""
        self.stopping = True
        if self.callbacks is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self.callbacks.stop, self.plan.timeout_s)
            self.callbacks = None
        tasks = [t for t in self.tasks if t is not asyncio.current_task()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.plan.timeout_s)
            for task in pending:
                task.cancel()
        for client, source in getattr(self, "lanes", []):
            if isinstance(source, SequenceSource):
                payload = source.finish()
                if payload is not None:
                    with contextlib.suppress(RequestFailed):
                        await client.infer(payload)
                self.sources.release(source)
            client.close()
        self.lanes, self.load_tasks = [], []
        self.recorder.take()  # what completed while winding down belongs to no window

    async def _stop(self) -> None:
        await self._wind_down()
        self.conn.send(("stopped", None))
        assert self.done is not None
        self.done.set_result(None)

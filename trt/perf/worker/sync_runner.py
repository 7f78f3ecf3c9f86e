"""The blocking worker (``--sync``, perf_analyzer's default): one thread per concurrency slot, each with
one request in flight; open loop: a pool of ``--max-threads`` threads sharing the arrival schedule.
Closed-loop gRPC unary slots chain completion callbacks instead of blocking a thread each
(``perf.worker.grpc_callbacks``): the same load, at a fraction of the client's CPU."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from trt.perf.options import LoadKind, Protocol
from trt.perf.schedule import arrivals
from trt.perf.transport import ConnectionLost, RequestFailed
from trt.perf.worker.async_runner import LATE_S
from trt.perf.worker.grpc_callbacks import CallbackLoop
from trt.perf.worker.plan import LoadAssignment, SourceFactory, WorkerPlan
from trt.perf.worker.records import Recorder
from trt.perf.worker.sources import RequestCycle, SequenceSource


class SyncRunner:
    def __init__(self, plan: WorkerPlan, conn: Connection) -> None:
        self.plan, self.conn = plan, conn
        self.recorder = Recorder(plan.index, threaded=True)
        self.sources = SourceFactory(plan)
        self.ids_lock = threading.Lock()  # sequence ids are shared by the threads of this worker
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.callbacks: CallbackLoop | None = None
        self.channel: Any = None
        self.fatal: str | None = None
        if plan.protocol is Protocol.GRPC:
            import grpc

            from trt.perf.transport.grpc_clients import CHANNEL_OPTIONS

            self.channel = grpc.insecure_channel(f"{plan.host}:{plan.port}", options=CHANNEL_OPTIONS)

    def run(self) -> None:
        self.conn.send(("ready", None))
        while True:
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
                self._apply(argument)
                self.conn.send(("loaded", None))
            elif command == "stop":
                self._wind_down()
                if self.channel is not None:
                    self.channel.close()
                self.conn.send(("stopped", None))
                return

    def _client(self) -> Any:
        plan = self.plan
        if plan.protocol is Protocol.HTTP:
            from trt.perf.transport.http_sync import SyncHttpConnection

            return SyncHttpConnection(plan.host, plan.port, plan.timeout_s)
        from trt.perf.transport.grpc_clients import SyncGrpcStream, SyncGrpcUnary

        if plan.streaming:
            return SyncGrpcStream(self.channel, plan.decoupled)
        return SyncGrpcUnary(self.channel, plan.timeout_s)

    def _source(self, slot: int) -> RequestCycle | SequenceSource:
        with self.ids_lock:
            return self.sources.source(slot)

    def _next(self, source: RequestCycle | SequenceSource) -> bytes:
        if isinstance(source, SequenceSource):
            with self.ids_lock:
                return source.next()
        return source.next()

    def _send(self, client: Any, payload: bytes, ended: bool) -> None:
        start = time.perf_counter_ns()
        try:
            try:
                responses = client.infer(payload)
            except ConnectionLost:
                responses = client.infer(payload)
        except RequestFailed as error:
            self.recorder.failure(str(error))
            time.sleep(0.001)
            return
        self.recorder.success(
            time.perf_counter_ns() - start, client.last_send_ns, client.last_recv_ns, responses, ended
        )

    def _finish(self, client: Any, source: RequestCycle | SequenceSource) -> None:
        if isinstance(source, SequenceSource):
            with self.ids_lock:
                payload = source.finish()
            if payload is not None:
                with contextlib.suppress(RequestFailed):
                    client.infer(payload)
            with self.ids_lock:
                self.sources.release(source)
        client.close()

    def _closed_slot(self, slot: int) -> None:
        client, source = self._client(), self._source(slot)
        while not self.stop_event.is_set():
            payload = self._next(source)
            self._send(client, payload, source.ended)
        self._finish(client, source)

    def _open_lane(self, lane: int, schedule: Iterator[float], lock: threading.Lock, start: float) -> None:
        client, source = self._client(), self._source(lane)
        while not self.stop_event.is_set():
            with lock:
                offset = next(schedule)
            delay = start + offset - time.perf_counter()
            if delay > 0 and self.stop_event.wait(delay):
                break
            if delay < -LATE_S:
                self.recorder.late()
            payload = self._next(source)
            self._send(client, payload, source.ended)
        self._finish(client, source)

    def _apply(self, assignment: LoadAssignment) -> None:
        self._wind_down()
        self.stop_event = threading.Event()
        targets: list[tuple[Callable[..., None], tuple[Any, ...]]]
        if assignment.kind is LoadKind.CONCURRENCY and self._chains_callbacks():
            self.callbacks = CallbackLoop(
                self.plan.host, self.plan.port, self.plan.timeout_s, self.recorder, self._next
            )
            slots = range(assignment.slot_offset, assignment.slot_offset + assignment.slots)
            self.callbacks.start([self._source(slot) for slot in slots])
            targets = []
        elif assignment.kind is LoadKind.CONCURRENCY:
            targets = [(self._closed_slot, (assignment.slot_offset + s,)) for s in range(assignment.slots)]
        elif assignment.schedule is None:
            targets = []
        else:
            schedule, lock, start = arrivals(assignment.schedule), threading.Lock(), time.perf_counter()
            lanes = self.plan.max_threads
            if self.plan.sequence is not None:
                lanes = max(1, self.plan.sequence.num_sequences // self.plan.count)
            targets = [(self._open_lane, (lane, schedule, lock, start)) for lane in range(lanes)]
        self.threads = [threading.Thread(target=self._guard, args=(t, a), daemon=True) for t, a in targets]
        for thread in self.threads:
            thread.start()

    def _guard(self, target: Any, args: tuple[Any, ...]) -> None:
        try:
            target(*args)
        except Exception as error:  # reported to the parent at the next flush
            if self.fatal is None:
                self.fatal = f"{type(error).__name__}: {error}"

    def _chains_callbacks(self) -> bool:
        return self.plan.protocol is Protocol.GRPC and not self.plan.streaming

    def _wind_down(self) -> None:
        self.stop_event.set()
        if self.callbacks is not None:
            self.callbacks.stop(self.plan.timeout_s)
            client = self._client()
            for slot in self.callbacks.slots:
                self._finish(client, slot.source)
            self.callbacks = None
        for thread in self.threads:
            thread.join(self.plan.timeout_s)
        self.threads = []
        self.recorder.take()

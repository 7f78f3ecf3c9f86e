"""Closed-loop gRPC unary load without a thread per slot: each slot's completion callback (run on the
connection's reader thread) records the request and sends the slot's next one.

grpcio costs 80-130 us of client CPU per call whichever way it is driven (a blocking stub per thread,
``future()`` callbacks or ``grpc.aio``), against perf_analyzer's 50-90 us; the hand-framed HTTP/2 client
(``perf.transport.grpc_h2``) with chained callbacks costs about 40 (benchmarks/perf_vs_perf_analyzer.py)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from trt.perf.transport import ConnectionLost, RequestFailed
from trt.perf.transport.grpc_clients import INFER
from trt.perf.transport.grpc_h2 import H2GrpcClient
from trt.perf.worker.records import Recorder
from trt.perf.worker.sources import RequestCycle, SequenceSource

Source = RequestCycle | SequenceSource
FAILURE_PAUSE_S = 0.001  # a server that refuses everything must not spin the client
# perf_analyzer's gRPC clients share a channel (one TCP connection) six at a time: so do the slots here,
# so that the server sees the same number of connections from either tool.
SLOTS_PER_CONNECTION = 6


class _Slot:
    """One request in flight at a time; ``done`` chains the next one."""

    __slots__ = ("client", "loop", "payload", "retried", "source", "start_ns")

    def __init__(self, loop: CallbackLoop, source: Source, client: H2GrpcClient) -> None:
        self.loop, self.source, self.client = loop, source, client
        self.payload = b""
        self.start_ns = 0
        self.retried = False

    def send(self, retry: bool = False) -> None:
        loop = self.loop
        if loop.stopping:
            loop.slot_finished()
            return
        if not retry:
            self.payload = loop.next_payload(self.source)
        self.retried = retry
        inline = loop.inline
        inline.depth = getattr(inline, "depth", 0) + 1
        try:
            self.start_ns = time.perf_counter_ns()
            self.client.call(self.payload, self.done)
        finally:
            inline.depth -= 1

    def done(self, problem: RequestFailed | None) -> None:
        try:
            self._done(problem)
        except Exception as error:  # a bug or an exhausted id pool: the runner reports it at the next flush
            self.loop.crashed(error)

    def _done(self, problem: RequestFailed | None) -> None:
        loop = self.loop
        latency_ns = time.perf_counter_ns() - self.start_ns
        if problem is None:
            loop.recorder.success(latency_ns, 0, 0, 1, self.source.ended)
            delay = 0.0
        else:
            if isinstance(problem, ConnectionLost) and not self.retried and not loop.stopping:
                loop.later(self, 0.0, retry=True)  # as the blocking clients do: once more on a new connection
                return
            loop.recorder.failure(str(problem))
            delay = FAILURE_PAUSE_S
        if delay or getattr(loop.inline, "depth", 0):
            # Called from inside client.call (no connection could be opened): hand the next request
            # to the helper thread rather than recurse.
            loop.later(self, delay)
        else:
            self.send()


class CallbackLoop:
    """``start(sources)`` puts one request per source in flight; ``stop()`` waits for them to finish."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float,
        recorder: Recorder,
        next_payload: Callable[[Source], bytes],
    ) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.clients: list[H2GrpcClient] = []
        self.recorder = recorder
        self.next_payload = next_payload
        self.inline = threading.local()
        self.stopping = False
        self.fatal: str | None = None  # an unexpected error in a callback, for the runner to report
        self.slots: list[_Slot] = []
        self._active = 0
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._deferred: queue.SimpleQueue[tuple[float, _Slot, bool] | None] = queue.SimpleQueue()
        self._helper: threading.Thread | None = None

    def start(self, sources: list[Source]) -> None:
        connections = -(-len(sources) // SLOTS_PER_CONNECTION)
        self.clients = [H2GrpcClient(self.host, self.port, INFER, self.timeout) for _ in range(connections)]
        self.slots = [
            _Slot(self, source, self.clients[index // SLOTS_PER_CONNECTION])
            for index, source in enumerate(sources)
        ]
        self._active = len(self.slots)
        if not self.slots:
            self._idle.set()
            return
        self._helper = threading.Thread(target=self._run_deferred, name="trt-perf-grpc-later", daemon=True)
        self._helper.start()
        for slot in self.slots:
            slot.send()

    def later(self, slot: _Slot, delay: float, retry: bool = False) -> None:
        self._deferred.put((time.perf_counter() + delay, slot, retry))

    def _run_deferred(self) -> None:
        while (item := self._deferred.get()) is not None:
            due, slot, retry = item
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            try:
                slot.send(retry)
            except Exception as error:
                self.crashed(error)

    def crashed(self, error: Exception) -> None:
        """A slot stops on an unexpected error; the first one is kept for the runner to report."""
        if self.fatal is None:
            self.fatal = f"{type(error).__name__}: {error}"
        self.slot_finished()

    def slot_finished(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    def stop(self, timeout: float) -> bool:
        """Send no more; True when every slot's last request completed within ``timeout`` seconds."""
        self.stopping = True
        finished = self._idle.wait(timeout)
        self._deferred.put(None)
        if self._helper is not None:
            self._helper.join(timeout)
        for client in self.clients:
            client.close()
        return finished

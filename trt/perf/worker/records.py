"""What a worker records per request, and the part of a window it hands to the parent."""

from __future__ import annotations

import os
import threading
import time
from array import array
from dataclasses import dataclass


@dataclass(frozen=True)
class WindowPart:
    """Requests that completed in one worker between two flushes."""

    worker: int
    flushed_ns: int  # time.monotonic_ns() at the flush (system-wide clock, comparable across processes)
    latencies_us: array[int]  # typecode "q", one per successful request
    errors: int
    responses: int
    send_ns: int
    recv_ns: int
    delayed: int  # open loop: sent late (no free connection, or the generator fell behind)
    sequences_ended: int
    error_samples: tuple[str, ...]
    cpu_s: float  # the worker process' CPU time so far (user + system)


class Recorder:
    """Accumulates one window's completions; ``lock`` is only needed when threads share it."""

    def __init__(self, worker: int, threaded: bool) -> None:
        self.worker = worker
        self._lock = threading.Lock() if threaded else None
        self._reset()

    def _reset(self) -> None:
        self.latencies_us = array("q")
        self.errors = self.responses = self.send_ns = self.recv_ns = 0
        self.delayed = self.sequences_ended = 0
        self.error_samples: list[str] = []

    def success(self, latency_ns: int, send_ns: int, recv_ns: int, responses: int, ended: bool) -> None:
        if self._lock is not None:
            with self._lock:
                self._success(latency_ns, send_ns, recv_ns, responses, ended)
        else:
            self._success(latency_ns, send_ns, recv_ns, responses, ended)

    def _success(self, latency_ns: int, send_ns: int, recv_ns: int, responses: int, ended: bool) -> None:
        self.latencies_us.append(latency_ns // 1000)
        self.responses += responses
        self.send_ns += send_ns
        self.recv_ns += recv_ns
        self.sequences_ended += ended

    def failure(self, message: str) -> None:
        if self._lock is not None:
            with self._lock:
                self._failure(message)
        else:
            self._failure(message)

    def _failure(self, message: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 3 and message not in self.error_samples:
            self.error_samples.append(message)

    def late(self) -> None:
        self.delayed += 1

    def take(self) -> WindowPart:
        if self._lock is not None:
            with self._lock:
                return self._take()
        return self._take()

    def _take(self) -> WindowPart:
        times = os.times()
        part = WindowPart(
            self.worker,
            time.monotonic_ns(),
            self.latencies_us,
            self.errors,
            self.responses,
            self.send_ns,
            self.recv_ns,
            self.delayed,
            self.sequences_ended,
            tuple(self.error_samples),
            times.user + times.system,
        )
        self._reset()
        return part

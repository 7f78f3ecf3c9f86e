"""What handing a request to another process and its answer back would cost: the shared-memory rings
and eventfd wake-ups the Python backend already uses (``trt.server.backends.python.stub._ipc``),
measured between two real processes with a request-sized message (the ``simple`` model's two INT32
[1,16] tensors and their names).

A front-end worker process would pay one ``put`` + wake for the request and one wait + ``get`` for
the answer; the core process the mirror image. With ``in_flight`` messages outstanding, one wake-up
can announce several messages (the reader drains the ring), as under concurrent load.
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import resource
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

import numpy as np

from trt.server.backends.python.stub import _ipc

_CAPACITY = 1 << 20


def _request_message(sequence: int) -> tuple[object, ...]:
    tensors = np.arange(16, dtype=np.int32).reshape(1, 16)
    return (sequence, "simple", "", (("INPUT0", "INT32", (1, 16), tensors.tobytes()),
                                     ("INPUT1", "INT32", (1, 16), tensors.tobytes())))  # fmt: skip


def _drain_and_answer(
    ring_in: _ipc.Ring, ring_out: _ipc.Ring, wake_in: int, wake_out: int, count: int
) -> None:
    """The core's side: take what arrived, answer each message with one of the same size."""
    answered = 0
    while answered < count:
        _ipc.wait(wake_in)
        replies = 0
        while (message := ring_in.get()) is not _ipc.EMPTY:
            while not ring_out.put(message):
                time.sleep(0)
            replies += 1
        if replies:
            _ipc.wake(wake_out)
            answered += replies


def _core_side(segment: str, size: int, wake_in: int, wake_out: int, count: int, report: Connection) -> None:
    buffer = _ipc.map_segment(segment, size)
    to_core, to_worker = _ipc.ring_pair(buffer, _CAPACITY, f"{segment}-")
    start = resource.getrusage(resource.RUSAGE_SELF)
    _drain_and_answer(to_core, to_worker, wake_in, wake_out, count)
    end = resource.getrusage(resource.RUSAGE_SELF)
    report.send((end.ru_utime + end.ru_stime) - (start.ru_utime + start.ru_stime))
    to_core.close()
    to_worker.close()
    buffer.close()


@dataclass(frozen=True)
class HandoffCost:
    in_flight: int
    messages_per_s: float
    worker_us: float  # per request, the sending side (put + wake, wait + get of the answer)
    core_us: float  # per request, the receiving side


def measure_handoff(in_flight: int, count: int = 40_000) -> HandoffCost:
    """Round trips of ``count`` request-sized messages with ``in_flight`` outstanding."""
    segment = f"trt-bench-handoff-{os.getpid()}-{in_flight}"
    size = 2 * _ipc.Ring.bytes_needed(_CAPACITY)
    fd = os.open(f"/dev/shm/{segment}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
        buffer = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    to_core_wake, to_worker_wake = os.eventfd(0), os.eventfd(0)
    receive, send = mp.Pipe(duplex=False)
    core = mp.get_context("fork").Process(
        target=_core_side, args=(segment, size, to_core_wake, to_worker_wake, count, send)
    )
    core.start()
    to_core, to_worker = _ipc.ring_pair(buffer, _CAPACITY, f"{segment}-")
    try:
        start_cpu = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        sent = answered = 0
        while answered < count:
            burst = 0
            while sent < count and sent - answered < in_flight:
                while not to_core.put(_request_message(sent)):
                    time.sleep(0)
                sent += 1
                burst += 1
            if burst:
                _ipc.wake(to_core_wake)
            _ipc.wait(to_worker_wake)
            while to_worker.get() is not _ipc.EMPTY:
                answered += 1
        elapsed = time.perf_counter() - started
        end_cpu = resource.getrusage(resource.RUSAGE_SELF)
        core_cpu = float(receive.recv())
        core.join(30)
    finally:
        to_core.close()
        to_worker.close()
        buffer.close()
        os.unlink(f"/dev/shm/{segment}")
        os.close(to_core_wake)
        os.close(to_worker_wake)
    worker_cpu = (end_cpu.ru_utime + end_cpu.ru_stime) - (start_cpu.ru_utime + start_cpu.ru_stime)
    return HandoffCost(in_flight, count / elapsed, worker_cpu / count * 1e6, core_cpu / count * 1e6)

"""What handing a request to another process and its answer back would cost: the shared-memory rings
and eventfd wake-ups the Python backend already uses (``trt.server.backends.python.stub._ipc``),
measured between two real processes with a request-sized message (the ``simple`` model's two INT32
[1,16] tensors and their names).

A front-end worker process would pay one ``put`` + wake for the request and one wait + ``get`` for
the answer; the core process the mirror image. With ``in_flight`` messages outstanding, one wake-up
can announce several messages (the reader drains the ring), as under concurrent load.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

import numpy as np

from trt.server.backends.python.stub import _ipc, trt_pb_wire

_CAPACITY = 1 << 20
_CODEC = trt_pb_wire.Codec("5b1c0f7e9a2d4c6b8e0f1a3c5d7e9f1b")  # the Python backend's rings' codec


def _request_message(sequence: int) -> tuple[object, ...]:
    tensors = np.arange(16, dtype=np.int32).reshape(1, 16)
    return (sequence, "simple", "", (("INPUT0", "INT32", (1, 16), tensors.tobytes()),
                                     ("INPUT1", "INT32", (1, 16), tensors.tobytes())))  # fmt: skip


def _drain_and_answer(
    ring_in: _ipc.Ring, ring_out: _ipc.Ring, wake_in: int, wake_out: int, count: int,
    reply: Callable[[object], object],
) -> None:  # fmt: skip
    """The core's side: take what arrived, answer each message with ``reply(message)``, wake once."""
    answered = 0
    while answered < count:
        _ipc.wait(wake_in)
        replies = 0
        while (message := ring_in.get()) is not _ipc.EMPTY:
            answer = reply(message)
            while not ring_out.put(answer):
                time.sleep(0)
            replies += 1
        if replies:
            _ipc.wake(wake_out)
            answered += replies


def _core_side(
    segment: int, size: int, spills: tuple[int, int], wake_in: int, wake_out: int, count: int,
    report: Connection, reply: Callable[[object], object],
) -> None:  # fmt: skip
    buffer = _ipc.map_segment(segment, size)
    to_core, to_worker = _ipc.ring_pair(buffer, _CAPACITY, spills, _CODEC)
    start = resource.getrusage(resource.RUSAGE_SELF)
    _drain_and_answer(to_core, to_worker, wake_in, wake_out, count, reply)
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


def _measure_rings(
    label: str, in_flight: int, count: int, request: Callable[[int], object],
    reply: Callable[[object], object], answers_in: Callable[[object], int],
) -> HandoffCost:  # fmt: skip
    """Round trips of ``count`` messages ``request(n)`` through the rings with ``in_flight``
    outstanding; the core answers each with ``reply(message)``; ``answers_in`` counts the answers an
    item taken from the ring completes."""
    name = f"trt-bench-{label}-{os.getpid()}-{in_flight}"
    size = _ipc.control_bytes(_CAPACITY)
    segment = _ipc.new_segment(name, size)  # memfds, as the backend's: the forked side inherits them
    spills = (_ipc.new_segment(f"{name}-s", 0), _ipc.new_segment(f"{name}-m", 0))
    buffer = _ipc.map_segment(segment, size)
    to_core_wake, to_worker_wake = os.eventfd(0), os.eventfd(0)
    receive, send = mp.Pipe(duplex=False)
    core = mp.get_context("fork").Process(
        target=_core_side,
        args=(segment, size, spills, to_core_wake, to_worker_wake, count, send, reply),
    )
    core.start()
    to_core, to_worker = _ipc.ring_pair(buffer, _CAPACITY, spills, _CODEC)
    try:
        start_cpu = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        sent = answered = 0
        while answered < count:
            burst = 0
            while sent < count and sent - answered < in_flight:
                while not to_core.put(request(sent)):
                    time.sleep(0)
                sent += 1
                burst += 1
            if burst:
                _ipc.wake(to_core_wake)
            _ipc.wait(to_worker_wake)
            while (item := to_worker.get()) is not _ipc.EMPTY:
                answered += answers_in(item)
        elapsed = time.perf_counter() - started
        end_cpu = resource.getrusage(resource.RUSAGE_SELF)
        core_cpu = float(receive.recv())
        core.join(30)
    finally:
        to_core.close()
        to_worker.close()
        buffer.close()
        for fd in (segment, *spills):
            os.close(fd)
        os.close(to_core_wake)
        os.close(to_worker_wake)
    worker_cpu = (end_cpu.ru_utime + end_cpu.ru_stime) - (start_cpu.ru_utime + start_cpu.ru_stime)
    return HandoffCost(in_flight, count / elapsed, worker_cpu / count * 1e6, core_cpu / count * 1e6)


def measure_handoff(in_flight: int, count: int = 40_000) -> HandoffCost:
    """Round trips of ``count`` request-sized messages with ``in_flight`` outstanding, each answered
    with itself."""
    return _measure_rings("handoff", in_flight, count, _request_message, lambda message: message, lambda _: 1)


# -- the channel --frontend-workers uses: a Unix socket pair, and the rings, carrying the same frames --


def _frame(sequence: int) -> bytes:
    """A request-sized frame of the front end's codec (a gRPC ``simple`` request's bytes)."""
    from trt.server.frontend import codec
    from trt.server.frontend import messages as m

    tensors = np.arange(16, dtype=np.int32).tobytes()
    payload = b"\n\x06simple" + (b"\x22\x1a\n\x06INPUT0\x12\x05INT32\x1a\x02\x01\x10" + tensors) * 2
    return codec.encode(m.GrpcUnary(sequence, "/inference.GRPCInferenceService/ModelInfer", payload, []))


def _socket_core_side(sock: object, count: int, report: Connection) -> None:
    """The core's side over the socket: read what arrived, decode, answer each with a frame, one write."""
    import socket as socket_module

    from trt.server.frontend import codec

    assert isinstance(sock, socket_module.socket)
    reader = codec.FrameReader(1 << 20)
    start = resource.getrusage(resource.RUSAGE_SELF)
    answered = 0
    while answered < count:
        messages = reader.feed(sock.recv(1 << 18))
        if messages:
            sock.sendall(b"".join(_frame(message.call) for message in messages))  # type: ignore[union-attr]
            answered += len(messages)
    end = resource.getrusage(resource.RUSAGE_SELF)
    report.send((end.ru_utime + end.ru_stime) - (start.ru_utime + start.ru_stime))


def measure_socket_handoff(in_flight: int, count: int = 40_000) -> HandoffCost:
    """As ``measure_handoff``, over a Unix socket pair with the front end's frames (encoded and
    decoded on both sides): the channel ``--frontend-workers`` uses."""
    import socket as socket_module

    from trt.server.frontend import codec

    ours, theirs = socket_module.socketpair(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    receive, send = mp.Pipe(duplex=False)
    core = mp.get_context("fork").Process(target=_socket_core_side, args=(theirs, count, send))
    core.start()
    theirs.close()
    reader = codec.FrameReader(1 << 20)
    start_cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    sent = answered = 0
    while answered < count:
        burst = []
        while sent < count and sent - answered < in_flight:
            burst.append(_frame(sent))
            sent += 1
        if burst:
            ours.sendall(b"".join(burst))
        answered += len(reader.feed(ours.recv(1 << 18)))
    elapsed = time.perf_counter() - started
    end_cpu = resource.getrusage(resource.RUSAGE_SELF)
    core_cpu = float(receive.recv())
    core.join(30)
    ours.close()
    worker_cpu = (end_cpu.ru_utime + end_cpu.ru_stime) - (start_cpu.ru_utime + start_cpu.ru_stime)
    return HandoffCost(in_flight, count / elapsed, worker_cpu / count * 1e6, core_cpu / count * 1e6)


def measure_ring_frames(in_flight: int, count: int = 40_000) -> HandoffCost:
    """As ``measure_socket_handoff``, the same frames (encoded and decoded the same way) through the
    Python backend's rings and eventfds: the two differ only in how the bytes travel."""
    from trt.server.frontend import codec

    def reply(frame: object) -> bytes:  # in the core: decode the request, answer with a new frame
        (message,) = codec.FrameReader(1 << 20).feed(frame)  # type: ignore[arg-type]
        return _frame(message.call)  # type: ignore[union-attr]

    reader = codec.FrameReader(1 << 20)
    return _measure_rings(
        "frames",
        in_flight,
        count,
        _frame,
        reply,
        lambda frame: len(reader.feed(frame)),  # type: ignore[arg-type]
    )

"""The parent's side of the worker processes: start them, hand out load, collect window parts.

Workers are forked before the parent opens any gRPC channel or starts a display thread (both are unsafe
to fork over), and receive their plan over the pipe afterwards."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from multiprocessing.connection import Connection
from typing import Any

from trt.parent_death import end_with_parent
from trt.perf.errors import MeasurementError
from trt.perf.worker.plan import LoadAssignment, WorkerPlan
from trt.perf.worker.records import WindowPart

REPLY_TIMEOUT_S = 120.0


def _bootstrap(conn: Connection, parent: int) -> None:
    # Killed with the parent, whatever ends it: a worker outliving ``trt perf`` sent load for good
    # (it holds the parent's end of its own pipe, forked with it, so it never reads an EOF there).
    end_with_parent(signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before that took
        return
    try:
        message, plan = conn.recv()
    except (EOFError, KeyboardInterrupt):
        return
    if message == "plan":
        from trt.perf.worker.process import worker_main

        worker_main(plan, conn)


class WorkerPool:
    def __init__(self, count: int) -> None:
        context = mp.get_context("fork")
        self.conns: list[Connection] = []
        self.processes: list[Any] = []
        for index in range(count):
            parent_end, child_end = context.Pipe()
            process = context.Process(
                target=_bootstrap, args=(child_end, os.getpid()), name=f"trt-perf-{index}", daemon=True
            )
            process.start()
            child_end.close()
            self.conns.append(parent_end)
            self.processes.append(process)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    def _reply(self, index: int, expected: str, timeout: float = REPLY_TIMEOUT_S) -> Any:
        conn = self.conns[index]
        if not conn.poll(timeout):
            raise MeasurementError(f"load-generator worker {index} did not answer within {timeout:.0f}s")
        try:
            kind, value = conn.recv()
        except EOFError:
            raise MeasurementError(f"load-generator worker {index} exited unexpectedly") from None
        if kind == "error":
            raise MeasurementError(f"load-generator worker {index} failed: {value}")
        if kind != expected:
            raise MeasurementError(f"load-generator worker {index}: expected '{expected}', got '{kind}'")
        return value

    def start(self, plans: list[WorkerPlan]) -> None:
        for conn, plan in zip(self.conns, plans, strict=True):
            conn.send(("plan", plan))
        for index in range(len(self.conns)):
            self._reply(index, "ready")

    def assign(self, assignments: list[LoadAssignment]) -> None:
        for conn, assignment in zip(self.conns, assignments, strict=True):
            conn.send(("load", assignment))
        for index in range(len(self.conns)):
            self._reply(index, "loaded")

    def flush(self) -> list[WindowPart]:
        for conn in self.conns:
            conn.send(("flush", None))
        return [self._reply(index, "part") for index in range(len(self.conns))]

    def stop(self) -> None:
        for index, conn in enumerate(self.conns):
            try:
                conn.send(("stop", None))
                self._reply(index, "stopped", timeout=30)
            except (OSError, MeasurementError):
                pass
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
                process.join(5)
        for conn in self.conns:
            conn.close()

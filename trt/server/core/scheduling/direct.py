"""Requests without batching: each runs on the next idle instance, one execution per request (a
ragged-batching config's inputs made and outputs cut for a batch of one, ``ragged``)."""

from __future__ import annotations

import asyncio
import time

from trt.server.core.backends.base import BackendRequest, BackendResponse
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.scheduling.instance_pool import InstancePool
from trt.server.core.scheduling.ragged import RaggedBatching
from trt.server.core.scheduling.timing import ExecutionTimes


class DirectScheduler:
    def __init__(
        self, pool: InstancePool, stats: ModelStatistics, ragged: RaggedBatching | None = None
    ) -> None:
        self._pool = pool
        self._stats = stats
        self._ragged = ragged

    async def schedule(
        self, request: BackendRequest, batch_size: int
    ) -> tuple[BackendResponse, ExecutionTimes]:
        queued = time.perf_counter_ns()
        pool = self._pool
        instance = pool.take_idle()
        if instance is None:  # every instance is busy: the request waits, counted as pending
            self._stats.pending += 1
            try:
                instance = await pool.acquire()
            finally:
                self._stats.pending -= 1
        started = time.perf_counter_ns()
        ragged = self._ragged
        if ragged is None:
            outputs, compute_ns = await pool.run(instance, request.inputs, request.requested_outputs)
        else:
            feeds = ragged.feeds([request.inputs])
            batched, compute_ns = await pool.run(instance, feeds, request.requested_outputs)
            (outputs,) = ragged.split(batched, [(request.inputs, batch_size, request.requested_outputs)])
        self._stats.record_execution(max(batch_size, 1), 0, compute_ns, 0)
        return BackendResponse(outputs), ExecutionTimes(started - queued, 0, compute_ns, 0)

    async def close(self) -> None:
        await asyncio.to_thread(self._pool.shutdown)

"""Triton's dynamic batcher for tensor backends (``dynamic_batching { ... }`` in config.pbtxt).

Requests queue in arrival order. When an instance is free, the batcher takes the oldest request and
the following ones whose non-batch shapes match it, up to ``max_batch_size``. If that reaches a
preferred size, the largest preferred batch goes now; otherwise it goes when it is full, when
``max_queue_delay_microseconds`` has passed since the oldest request arrived, or at once when the
delay is 0. Inputs are concatenated once; each request's outputs are views of the batch's.

Not yet: priority levels, queue policies (timeouts, max_queue_size) and preserve_ordering beyond
arrival order; they come with the scheduling issue.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from server.core.instance_pool import InstancePool
from server.core.statistics import ModelStatistics
from server.core.timing import ExecutionTimes


@dataclass(slots=True, eq=False)
class _Pending:
    feeds: Mapping[str, np.ndarray]
    output_names: Sequence[str]
    batch_size: int
    key: tuple[tuple[str, tuple[int, ...], str], ...]
    queued_ns: int
    future: asyncio.Future[tuple[dict[str, np.ndarray], ExecutionTimes]] = field(repr=False)


def _shape_key(feeds: Mapping[str, np.ndarray]) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    return tuple((name, array.shape[1:], array.dtype.str) for name, array in sorted(feeds.items()))


class DynamicBatcher:
    def __init__(
        self,
        pool: InstancePool,
        stats: ModelStatistics,
        max_batch_size: int,
        preferred_batch_sizes: Sequence[int] = (),
        max_queue_delay_us: int = 0,
    ) -> None:
        self._pool = pool
        self._stats = stats
        self._max_batch = max_batch_size
        self._preferred = sorted({size for size in preferred_batch_sizes if 0 < size <= max_batch_size})
        self._max_delay_ns = max_queue_delay_us * 1000
        self._queue: deque[_Pending] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._running: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    async def execute(
        self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str], batch_size: int
    ) -> tuple[dict[str, np.ndarray], ExecutionTimes]:
        loop = asyncio.get_running_loop()
        pending = _Pending(
            feeds, output_names, batch_size, _shape_key(feeds), time.perf_counter_ns(), loop.create_future()
        )
        self._queue.append(pending)
        self._stats.pending += 1
        self._dispatch()
        return await pending.future

    def _dispatch(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._queue:
            batch, wait_ns = self._next_batch()
            if batch is None:
                if wait_ns is not None:
                    loop = asyncio.get_running_loop()
                    self._timer = loop.call_later(wait_ns / 1e9, self._dispatch)
                return
            instance = self._pool.take_idle()
            if instance is None:
                return  # the next instance to come free calls _dispatch again
            for item in batch:
                self._queue.remove(item)
            self._stats.pending -= len(batch)
            task = asyncio.ensure_future(self._execute(instance, batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    def _next_batch(self) -> tuple[list[_Pending] | None, int | None]:
        """The batch to send now, or (None, nanoseconds to wait for more requests)."""
        head = self._queue[0]
        batch, total = [head], head.batch_size
        for item in list(self._queue)[1:]:
            if item.key == head.key and total + item.batch_size <= self._max_batch:
                batch.append(item)
                total += item.batch_size
        reachable = [size for size in self._preferred if size <= total]
        if reachable:
            return _trim(batch, reachable[-1]), None
        waited = time.perf_counter_ns() - head.queued_ns
        if total >= self._max_batch or self._max_delay_ns == 0 or waited >= self._max_delay_ns:
            return batch, None
        return None, self._max_delay_ns - waited

    async def _execute(self, instance: object, batch: list[_Pending]) -> None:
        started = time.perf_counter_ns()
        try:
            names = list(dict.fromkeys(name for item in batch for name in item.output_names))
            if len(batch) == 1:
                feeds = batch[0].feeds
            else:
                feeds = {
                    name: np.concatenate([item.feeds[name] for item in batch]) for name in batch[0].feeds
                }
            concatenated = time.perf_counter_ns()
            outputs, compute_ns = await self._pool.run(instance, feeds, names)  # type: ignore[arg-type]
            split_started = time.perf_counter_ns()
            offset = 0
            results = []
            for item in batch:
                end = offset + item.batch_size
                results.append({name: outputs[name][offset:end] for name in item.output_names})
                offset = end
            done = time.perf_counter_ns()
        except Exception as exc:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        finally:
            self._dispatch()
        total = sum(item.batch_size for item in batch)
        self._stats.record_execution(total, concatenated - started, compute_ns, done - split_started)
        for item, result in zip(batch, results, strict=True):
            if not item.future.done():
                times = ExecutionTimes(
                    started - item.queued_ns, concatenated - started, compute_ns, done - split_started
                )
                item.future.set_result((result, times))


def _trim(batch: list[_Pending], size: int) -> list[_Pending]:
    """The leading requests that make up exactly ``size`` items (or as close as they fit)."""
    kept, total = [], 0
    for item in batch:
        if total + item.batch_size > size:
            break
        kept.append(item)
        total += item.batch_size
    return kept or batch[:1]

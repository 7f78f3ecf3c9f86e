"""Triton's dynamic batcher for tensor backends (``dynamic_batching { ... }`` in config.pbtxt).

Requests queue in arrival order. When an instance is free, the batcher takes the oldest request and
the following ones whose non-batch shapes match it, up to ``max_batch_size``. If that reaches a
preferred size, the largest preferred batch goes now; otherwise it goes when it is full, when
``max_queue_delay_microseconds`` has passed since the oldest request arrived, or at once when the
delay is 0. Inputs are concatenated once; each request's outputs are views of the batch's.

Where the delay counts from is Triton's by default: the oldest request's arrival. The model config
parameter ``queue_delay_from: "instance_free"`` (an extension Triton lacks) counts it instead from
when an instance could take the batch: a request queued while every instance was busy counts it from
when one came free. With one instance, an execution longer than the delay and a closed loop of
clients, arrival's rule splits the clients for good into two batches that each wait the other's
execution (the delay has always passed when the instance comes free), which costs a memory-bound
model nearly a full batch's time per split; counted from availability the first split heals. Its
price, and why it is not the default: a request that waited for a busy instance may wait up to the
delay again, where Triton would send it at once, so the delay is no longer a bound on queueing.

Queue policies as Triton's: ``max_queue_size`` refuses a request at once when its queue is full
(UNAVAILABLE), ``default_timeout_microseconds`` (lowered per request with ``timeout`` when
``allow_timeout_override``) rejects one that waits too long, or with ``timeout_action: DELAY`` lets
it wait on. ``priority_levels``: level 1 is served first; a request's ``priority`` parameter picks its
level (0 or none: ``default_priority_level``). Batches form within one level. As in Triton, a level
has a queue only while requests wait in it (or while it has a policy of its own, or is the default):
``priority_levels`` may be any uint64 without costing memory.

``preserve_ordering``: with several instances a later batch can finish first; its responses are
then held until every request taken into a batch before it has its response, as Triton does.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.backends.base import BackendRequest, BackendResponse, ModelInstance
from trt.server.core.errors import InvalidInput, ModelConfigError, Unavailable
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.scheduling.instance_pool import InstancePool
from trt.server.core.scheduling.ragged import RaggedBatching
from trt.server.core.scheduling.timers import PreciseDeadlineTimer
from trt.server.core.scheduling.timing import ExecutionTimes


@dataclass(slots=True, eq=False)
class _Pending:
    feeds: Mapping[str, np.ndarray]
    output_names: Sequence[str]
    batch_size: int
    key: tuple[tuple[str, tuple[int, ...], str], ...]
    queued_ns: int
    future: asyncio.Future[tuple[dict[str, np.ndarray], ExecutionTimes]] = field(repr=False)
    level: int = 1
    expiry: asyncio.TimerHandle | None = None
    # preserve_ordering: the finished result (or error), held until the earlier requests have theirs.
    outcome: tuple[dict[str, np.ndarray], ExecutionTimes] | BaseException | None = None


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    max_queue_size: int = 0  # 0: unbounded
    timeout_us: int = 0  # 0: no timeout
    reject_on_timeout: bool = True
    allow_timeout_override: bool = False

    @classmethod
    def from_config(cls, policy: model_config_pb2.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            max_queue_size=policy.max_queue_size,
            timeout_us=int(policy.default_timeout_microseconds),
            reject_on_timeout=policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT,
            allow_timeout_override=policy.allow_timeout_override,
        )

    def timeout_for(self, requested_us: int) -> int:
        if self.allow_timeout_override and requested_us > 0:
            return min(requested_us, self.timeout_us) if self.timeout_us else requested_us
        return self.timeout_us


_NO_POLICY = QueuePolicy()


def _shape_key(feeds: Mapping[str, np.ndarray]) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    # A list comprehension: one call, where a generator is resumed once per input.
    return tuple([(name, array.shape[1:], array.dtype.str) for name, array in sorted(feeds.items())])


class DynamicBatcher:
    def __init__(
        self,
        pool: InstancePool,
        stats: ModelStatistics,
        max_batch_size: int,
        preferred_batch_sizes: Sequence[int] = (),
        max_queue_delay_us: int = 0,
        priority_levels: int = 0,
        default_priority_level: int = 0,
        policies: dict[int, QueuePolicy] | None = None,
        default_policy: QueuePolicy | None = None,
        preserve_ordering: bool = False,
        delay_from_instance_free: bool = False,
        ragged: RaggedBatching | None = None,
    ) -> None:
        self._pool = pool
        self._ragged = ragged  # allow_ragged_batch, batch_input, batch_output (``ragged``)
        self._stats = stats
        self._max_batch = max_batch_size
        self._preferred = sorted({size for size in preferred_batch_sizes if 0 < size <= max_batch_size})
        self._max_delay_ns = max_queue_delay_us * 1000
        self._delay_from_instance_free = delay_from_instance_free
        self._levels = max(priority_levels, 1)
        self._default_level = min(max(default_priority_level, 1), self._levels)
        self._policies = policies or {}  # levels with a policy of their own
        self._default_policy = default_policy or _NO_POLICY
        # Queues by level (the lowest with requests is served first). The default level's and those
        # with a policy stay; another level's is made by its first request and dropped once empty,
        # so that clients choosing many levels leave nothing behind.
        self._kept = {self._default_level, *self._policies}
        self._queues: dict[int, deque[_Pending]] = {level: deque() for level in sorted(self._kept)}
        self._wake = PreciseDeadlineTimer(self._dispatch)  # when the oldest request's queue delay ends
        self._preserve_ordering = preserve_ordering
        self._completion: deque[_Pending] = deque()  # dispatched, in dispatch order (preserve_ordering)
        self._running: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self._loop: asyncio.AbstractEventLoop | None = None  # the serving loop, from the first request

    @classmethod
    def from_config(
        cls, pool: InstancePool, stats: ModelStatistics, config: model_config_pb2.ModelConfig
    ) -> DynamicBatcher:
        batching = config.dynamic_batching
        policies = {level: QueuePolicy.from_config(p) for level, p in batching.priority_queue_policy.items()}
        default_policy = QueuePolicy.from_config(batching.default_queue_policy)
        return cls(
            pool,
            stats,
            config.max_batch_size,
            list(batching.preferred_batch_size),
            int(batching.max_queue_delay_microseconds),
            int(batching.priority_levels),
            int(batching.default_priority_level),
            policies,
            default_policy,
            batching.preserve_ordering,
            _delay_from_instance_free(config),
            RaggedBatching.from_config(config),
        )

    async def execute(
        self,
        feeds: Mapping[str, np.ndarray],
        output_names: Sequence[str],
        batch_size: int,
        priority: int = 0,
        timeout_us: int = 0,
    ) -> tuple[dict[str, np.ndarray], ExecutionTimes]:
        level = priority if priority > 0 else self._default_level
        if level > self._levels:
            raise InvalidInput(
                f"priority {priority} is outside 1..{self._levels} (priority_levels of the model)"
            )
        policy = self._policies.get(level, self._default_policy)
        queue = self._queues.get(level)
        if queue is None:
            queue = self._queues[level] = deque()
        if policy.max_queue_size and len(queue) >= policy.max_queue_size:
            raise Unavailable("Exceeds maximum queue size")
        loop = self._loop
        if loop is None:  # asked once: on Python 3.11 each call is a getpid() system call
            loop = self._loop = asyncio.get_running_loop()
        pending = _Pending(
            feeds,
            output_names,
            batch_size,
            _shape_key(feeds) if self._ragged is None else self._ragged.shape_key(feeds),
            time.perf_counter_ns(),
            loop.create_future(),
            level,
        )
        timeout = policy.timeout_for(timeout_us) if policy.timeout_us or timeout_us else 0
        if timeout and policy.reject_on_timeout:
            pending.expiry = loop.call_later(timeout / 1e6, self._expire, pending)
        queue.append(pending)
        self._stats.pending += 1
        self._dispatch()
        return await pending.future

    async def schedule(
        self, request: BackendRequest, batch_size: int
    ) -> tuple[BackendResponse, ExecutionTimes]:
        outputs, times = await self.execute(
            request.inputs, request.requested_outputs, batch_size, request.priority, request.timeout_us
        )
        return BackendResponse(outputs), times

    async def close(self) -> None:
        """Release the queue-delay timer and the instance threads (the version is retired; nothing is
        queued any more)."""
        self._wake.close()
        await asyncio.to_thread(self._pool.shutdown)

    def _expire(self, pending: _Pending) -> None:
        queue = self._queues.get(pending.level)
        if queue is not None and pending in queue:
            queue.remove(pending)
            self._drop_if_drained(pending.level, queue)
            self._stats.pending -= 1
            if not pending.future.done():
                pending.future.set_exception(Unavailable("Request timeout expired"))

    def _dispatch(self) -> None:
        """Form batches while an instance is idle. With none idle nothing is examined: the next
        instance to come free calls this again, so an arriving request costs O(1) while all are busy."""
        idle = self._pool.idle
        while idle:
            if self._levels == 1:
                level = 1
                queue = self._queues[1]
                if not queue:
                    return
            else:  # the highest priority with work
                level = min((n for n, waiting in self._queues.items() if waiting), default=0)
                if not level:
                    return
                queue = self._queues[level]
            batch, wait_ns = self._next_batch(queue)
            if batch is None:
                self._wake.arm_in(wait_ns / 1e9)
                return
            instance = self._pool.take_idle()
            assert instance is not None
            if len(batch) == 1 or all(a is b for a, b in zip(queue, batch, strict=False)):  # the head
                for _ in batch:
                    queue.popleft()
            else:
                for item in batch:
                    queue.remove(item)
            self._drop_if_drained(level, queue)
            for item in batch:
                if item.expiry is not None:
                    item.expiry.cancel()
            self._stats.pending -= len(batch)
            if self._preserve_ordering:
                self._completion.extend(batch)
            task = asyncio.ensure_future(self._execute(instance, batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    def _drop_if_drained(self, level: int, queue: deque[_Pending]) -> None:
        if not queue and level not in self._kept:
            del self._queues[level]

    def _next_batch(self, queue: deque[_Pending]) -> tuple[list[_Pending] | None, int]:
        """The batch to send now, or (None, nanoseconds to wait for more requests)."""
        head = queue[0]
        batch, total, limit = [head], head.batch_size, self._max_batch
        if total < limit:
            for item in itertools.islice(queue, 1, None):
                if item.key == head.key and total + item.batch_size <= limit:
                    batch.append(item)
                    total += item.batch_size
                    if total == limit:
                        break
        if self._preferred:
            reachable = [size for size in self._preferred if size <= total]
            if reachable:
                return _trim(batch, reachable[-1]), 0
        if total >= limit or self._max_delay_ns == 0:
            return batch, 0
        counted_from = head.queued_ns
        if self._delay_from_instance_free:
            counted_from = max(counted_from, self._pool.available_since_ns)
        waited = time.perf_counter_ns() - counted_from
        if waited >= self._max_delay_ns:
            return batch, 0
        return None, self._max_delay_ns - waited

    async def _execute(self, instance: ModelInstance, batch: list[_Pending]) -> None:
        started = time.perf_counter_ns()
        handed_over = False  # the pool gives the instance back once the execution has ended
        try:
            ragged = self._ragged
            names: Sequence[str]
            feeds: Mapping[str, np.ndarray]
            if ragged is None and len(batch) == 1:
                names = batch[0].output_names
                feeds = batch[0].feeds
            else:
                names = list(dict.fromkeys(name for item in batch for name in item.output_names))
                if ragged is not None:  # ragged inputs flat, and the batch inputs (even for one)
                    feeds = ragged.feeds([item.feeds for item in batch])
                else:
                    feeds = {
                        name: np.concatenate([item.feeds[name] for item in batch]) for name in batch[0].feeds
                    }
            concatenated = time.perf_counter_ns()
            handed_over = True
            outputs, compute_ns = await self._pool.run(instance, feeds, names)
            split_started = time.perf_counter_ns()
            if ragged is not None:
                results = ragged.split(outputs, [(i.feeds, i.batch_size, i.output_names) for i in batch])
            else:
                offset = 0
                results = []
                for item in batch:
                    end = offset + item.batch_size
                    results.append({name: outputs[name][offset:end] for name in item.output_names})
                    offset = end
            done = time.perf_counter_ns()
        except Exception as exc:
            if not handed_over:
                self._pool.give_back(instance)
            for item in batch:
                self._deliver(item, exc)
            return
        finally:
            self._dispatch()
        total = batch[0].batch_size if len(batch) == 1 else sum(item.batch_size for item in batch)
        self._stats.record_execution(total, concatenated - started, compute_ns, done - split_started)
        for item, result in zip(batch, results, strict=True):
            times = ExecutionTimes(
                started - item.queued_ns, concatenated - started, compute_ns, done - split_started
            )
            self._deliver(item, (result, times))

    def _deliver(
        self, item: _Pending, outcome: tuple[dict[str, np.ndarray], ExecutionTimes] | BaseException
    ) -> None:
        if not self._preserve_ordering:
            _settle(item, outcome)
            return
        item.outcome = outcome
        completion = self._completion
        while completion and completion[0].outcome is not None:
            head = completion.popleft()
            assert head.outcome is not None
            _settle(head, head.outcome)
            head.outcome = None


def _settle(item: _Pending, outcome: tuple[dict[str, np.ndarray], ExecutionTimes] | BaseException) -> None:
    if item.future.done():  # the client went away
        return
    if isinstance(outcome, BaseException):
        item.future.set_exception(outcome)
    else:
        item.future.set_result(outcome)


def _trim(batch: list[_Pending], size: int) -> list[_Pending]:
    """The leading requests that make up exactly ``size`` items (or as close as they fit)."""
    kept, total = [], 0
    for item in batch:
        if total + item.batch_size > size:
            break
        kept.append(item)
        total += item.batch_size
    return kept or batch[:1]


QUEUE_DELAY_FROM = "queue_delay_from"


def _delay_from_instance_free(config: model_config_pb2.ModelConfig) -> bool:
    """The ``queue_delay_from`` parameter: ``arrival`` (Triton's rule, the default) or ``instance_free``."""
    if QUEUE_DELAY_FROM not in config.parameters:
        return False
    value: str = config.parameters[QUEUE_DELAY_FROM].string_value.strip()
    if value not in ("arrival", "instance_free"):
        raise ModelConfigError(
            f"parameter {QUEUE_DELAY_FROM} '{value}': expected 'arrival' (the default) or 'instance_free'"
        )
    return value == "instance_free"

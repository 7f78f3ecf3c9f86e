"""Triton's sequence batcher for tensor backends (``sequence_batching { ... }``): stateful models.

A request carries ``sequence_id`` (an integer or a string), ``sequence_start`` and ``sequence_end``.
Each instance has sequence slots: ``max_batch_size`` of them for ``direct`` (one when the model does
not batch), ``max_candidate_sequences`` for ``oldest``. A sequence takes a free slot when it starts
(the lowest slot number first, so sequences spread over the instances) and keeps it until its END
request has been taken for execution or it stays idle longer than ``max_sequence_idle_microseconds``
(default 1 s); while every slot is taken, new sequences wait in a backlog, in arrival order, and a
freed slot goes to the oldest of them. A request for an unknown sequence without START is refused.
With ``iterative_sequence: true`` a request without a sequence id is given one and is a sequence of
its own (START and END): a tensor backend cannot reschedule it, which is what would make it iterate.

An instance runs one execution at a time, so a sequence's requests run in order, one per execution,
each with its own implicit ``state`` and its own row of control values (START, END, READY, CORRID).

- ``direct``: an execution takes the next request of every slot that has one. The batch covers slots
  0 up to the highest ready slot; a slot in between without a request is a padding row with
  READY=false. It goes at once, or, with ``minimum_slot_utilization`` set, when that share of the
  slots is ready or the oldest request has waited ``max_queue_delay_microseconds``.
- ``oldest``: an execution takes the oldest next-requests among the instance's candidate sequences,
  at most one per sequence, up to ``max_batch_size``: the largest ``preferred_batch_size`` that forms,
  or all of them once the batch is full or the oldest has waited ``max_queue_delay_microseconds``.

Requests batch only with requests whose input and state shapes match; one that does not waits for
a later execution. Statistics count one execution per batch and one inference per request.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.backends.base import (
    SEQUENCE_END,
    SEQUENCE_START,
    BackendRequest,
    BackendResponse,
    ModelInstance,
)
from trt.server.core.errors import InvalidInput
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.scheduling.instance_pool import InstancePool
from trt.server.core.scheduling.sequence_controls import (
    DEFAULT_IDLE_US,
    IterativeIds,
    Row,
    SequenceControls,
    backlog_timeout,
    batched_sequence_request,
    missing_sequence_id,
    slots_per_instance,
)
from trt.server.core.scheduling.timers import DeadlineTimer, IdleTimer
from trt.server.core.scheduling.timing import ExecutionTimes

Result = tuple[dict[str, np.ndarray], ExecutionTimes]
ShapeKey = tuple[tuple[str, tuple[int, ...], str], ...]


@dataclass(slots=True, eq=False)
class _Request:
    feeds: Mapping[str, np.ndarray]
    output_names: Sequence[str]
    start: bool
    end: bool
    queued_ns: int
    future: asyncio.Future[Result] = field(repr=False)


@dataclass(slots=True, eq=False)
class _Sequence:
    sequence_id: int | str
    state: dict[str, np.ndarray]
    queue: deque[_Request] = field(default_factory=deque)
    slot: _Slot | None = None
    running: bool = False  # a request of it is executing
    last_seen: float = field(default_factory=time.monotonic)
    expiry: DeadlineTimer | None = None  # in the backlog: when its requests' timeout runs out


@dataclass(slots=True, eq=False)
class _Slot:
    runner: _Runner
    index: int
    sequence: _Sequence | None = None


@dataclass(slots=True, eq=False)
class _Runner:
    """One instance and its slots; ``busy`` while an execution of it is under way."""

    number: int
    instance: ModelInstance
    slots: list[_Slot] = field(default_factory=list)
    busy: bool = False
    timer: asyncio.Handle | None = None


@dataclass(slots=True)
class _Row:
    sequence: _Sequence | None  # None: a padding row for a direct slot without a request
    request: _Request | None


def _shape_key(feeds: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray]) -> ShapeKey:
    return tuple(
        (name, array.shape[1:], array.dtype.str) for name, array in sorted({**feeds, **state}.items())
    )


class SequenceBatcher:
    def __init__(
        self,
        model_name: str,
        pool: InstancePool,
        instances: Sequence[ModelInstance],
        stats: ModelStatistics,
        config: model_config_pb2.ModelConfig,
        model_dir: Path | None = None,
    ) -> None:
        self._name = model_name
        self._pool = pool
        self._stats = stats
        self._controls = SequenceControls(config, model_dir)
        self._batching = config.max_batch_size > 0
        settings = config.sequence_batching
        self._oldest = settings.WhichOneof("strategy_choice") == "oldest"
        self._max_rows = max(config.max_batch_size, 1)
        if self._oldest:
            self._delay_ns = int(settings.oldest.max_queue_delay_microseconds) * 1000
            self._preferred = sorted(
                {s for s in settings.oldest.preferred_batch_size if 0 < s <= self._max_rows}
            )
            self._min_utilization = 0.0
        else:
            self._delay_ns = int(settings.direct.max_queue_delay_microseconds) * 1000
            self._preferred = []
            self._min_utilization = settings.direct.minimum_slot_utilization
        self._idle_s = (settings.max_sequence_idle_microseconds or DEFAULT_IDLE_US) / 1e6
        self._iterative = settings.iterative_sequence
        self._ids = IterativeIds()
        self._runners = [_Runner(number, instance) for number, instance in enumerate(instances)]
        for runner in self._runners:
            runner.slots = [_Slot(runner, index) for index in range(slots_per_instance(config))]
        self._free = [slot for runner in self._runners for slot in runner.slots]
        self._backlog: deque[_Sequence] = deque()
        # Sequences that can still take requests: started, not yet sent their END, not released.
        self._open: dict[int | str, _Sequence] = {}
        self._running: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self._reaper = IdleTimer(max(self._idle_s / 4, 0.01), self._release_idle)

    async def execute(
        self,
        feeds: Mapping[str, np.ndarray],
        output_names: Sequence[str],
        batch_size: int,
        sequence_id: int | str,
        start: bool,
        end: bool,
        timeout_us: int = 0,
        request_id: str = "",
    ) -> Result:
        if self._batching and batch_size > 1:  # checked first, as Triton does
            raise batched_sequence_request(self._name)
        if sequence_id in (0, "", None):
            if not self._iterative:
                raise missing_sequence_id(self._name)
            # A tensor backend cannot reschedule a request: its iterative sequence is this request.
            sequence_id, start, end = self._ids.take(self._open), True, True
        sequence = self._open.get(sequence_id)
        if sequence is None:
            if not start:
                raise InvalidInput(
                    f"inference request for sequence {sequence_id} to model '{self._name}' must specify "
                    "the START flag on the first request of the sequence"
                )
            self._controls.check_id(sequence_id, self._name, request_id)
            sequence = self._open[sequence_id] = _Sequence(sequence_id, self._controls.initial_state())
            self._place(sequence)
        request = _Request(
            feeds,
            output_names,
            start,
            end,
            time.perf_counter_ns(),
            asyncio.get_running_loop().create_future(),
        )
        sequence.queue.append(request)
        sequence.last_seen = time.monotonic()
        if end:  # a later request with this id starts a new sequence
            del self._open[sequence_id]
        self._stats.pending += 1
        self._reaper.arm()
        if sequence.slot is not None:
            self._schedule(sequence.slot.runner)
        elif timeout_us > 0:
            self._expire_in(sequence, timeout_us)
        return await request.future

    # Slots and the backlog

    def _place(self, sequence: _Sequence) -> None:
        if not self._free:
            self._backlog.append(sequence)
            return
        slot = min(self._free, key=lambda s: (s.index, s.runner.number))
        self._free.remove(slot)
        self._bind(slot, sequence)

    def _bind(self, slot: _Slot, sequence: _Sequence) -> None:
        slot.sequence, sequence.slot = sequence, slot
        sequence.last_seen = time.monotonic()
        if sequence.expiry is not None:
            sequence.expiry.cancel()

    def _expire_in(self, sequence: _Sequence, timeout_us: int) -> None:
        """A backlogged sequence whose request ``timeout`` runs out before it gets a slot is dropped
        with all its requests (Triton: the earliest timeout of its requests counts)."""
        if sequence.expiry is None:
            sequence.expiry = DeadlineTimer(partial(self._expire, sequence))
        sequence.expiry.arm_in(timeout_us / 1e6)

    def _expire(self, sequence: _Sequence) -> None:
        if sequence.slot is not None or sequence not in self._backlog:
            return
        self._backlog.remove(sequence)
        if self._open.get(sequence.sequence_id) is sequence:
            del self._open[sequence.sequence_id]
        self._stats.pending -= len(sequence.queue)
        for request in sequence.queue:
            if not request.future.done():
                request.future.set_exception(backlog_timeout())
        sequence.queue.clear()

    def _release(self, slot: _Slot) -> None:
        """Free ``slot`` for the oldest backlogged sequence, or for the next sequence to start."""
        if slot.sequence is not None:
            slot.sequence.slot = None
            slot.sequence = None
        if self._backlog:
            self._bind(slot, self._backlog.popleft())
            self._schedule(slot.runner)
        else:
            self._free.append(slot)

    def _release_idle(self) -> bool:
        """Release sequences idle past ``max_sequence_idle_microseconds``; whether any remain to watch."""
        cutoff = time.monotonic() - self._idle_s
        for runner in self._runners:
            for slot in runner.slots:
                sequence = slot.sequence
                if sequence is None or sequence.queue or sequence.running or sequence.last_seen > cutoff:
                    continue
                if self._open.get(sequence.sequence_id) is sequence:
                    del self._open[sequence.sequence_id]
                self._release(slot)
        return bool(self._open or self._backlog or any(s.sequence for r in self._runners for s in r.slots))

    # Forming executions

    def _schedule(self, runner: _Runner) -> None:
        if runner.busy:
            return  # the running execution schedules the next when it ends
        if runner.timer is not None:
            runner.timer.cancel()
            runner.timer = None
        rows, wait_ns = self._oldest_rows(runner) if self._oldest else self._direct_rows(runner)
        if rows is None:
            if wait_ns is not None:
                runner.timer = asyncio.get_running_loop().call_later(wait_ns / 1e9, self._schedule, runner)
            return
        runner.busy = True
        for row in rows:
            if row.sequence is not None and row.request is not None:
                sequence, request = row.sequence, row.request
                sequence.queue.popleft()
                sequence.running = True
                if request.start:
                    sequence.state = self._controls.initial_state()
                if request.end and sequence.slot is not None:
                    self._release(sequence.slot)
        task = asyncio.ensure_future(self._run(runner, rows))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def _ready(self, runner: _Runner) -> list[_Slot]:
        return [slot for slot in runner.slots if slot.sequence is not None and slot.sequence.queue]

    def _direct_rows(self, runner: _Runner) -> tuple[list[_Row] | None, int | None]:
        ready = self._ready(runner)
        if not ready:
            return None, None
        if self._min_utilization > 0 and self._delay_ns > 0:
            oldest = min(slot.sequence.queue[0].queued_ns for slot in ready if slot.sequence)
            waited = time.perf_counter_ns() - oldest
            if len(ready) / len(runner.slots) < self._min_utilization and waited < self._delay_ns:
                return None, self._delay_ns - waited
        first = ready[0].sequence
        assert first is not None
        key = _shape_key(first.queue[0].feeds, first.state)
        chosen = {
            slot.index
            for slot in ready
            if slot.sequence is not None
            and _shape_key(slot.sequence.queue[0].feeds, slot.sequence.state) == key
        }
        rows = []
        for slot in runner.slots[: max(chosen) + 1]:
            if slot.index in chosen and slot.sequence is not None:
                rows.append(_Row(slot.sequence, slot.sequence.queue[0]))
            else:
                rows.append(_Row(None, None))
        return rows, None

    def _oldest_rows(self, runner: _Runner) -> tuple[list[_Row] | None, int | None]:
        heads = [slot.sequence for slot in self._ready(runner) if slot.sequence is not None]
        if not heads:
            return None, None
        heads.sort(key=lambda sequence: sequence.queue[0].queued_ns)
        key = _shape_key(heads[0].queue[0].feeds, heads[0].state)
        batch = [s for s in heads if _shape_key(s.queue[0].feeds, s.state) == key][: self._max_rows]
        reachable = [size for size in self._preferred if size <= len(batch)]
        if reachable:
            batch = batch[: reachable[-1]]
        elif len(batch) < self._max_rows and self._delay_ns:
            waited = time.perf_counter_ns() - heads[0].queue[0].queued_ns
            if waited < self._delay_ns:
                return None, self._delay_ns - waited
        return [_Row(sequence, sequence.queue[0]) for sequence in batch], None

    # Running one execution

    def _assemble(self, rows: list[_Row]) -> tuple[dict[str, np.ndarray], list[str]]:
        real = [row for row in rows if row.request is not None]
        model_rows = [
            Row(row.sequence.sequence_id, row.request.start, row.request.end)
            if row.sequence is not None and row.request is not None
            else Row(None)
            for row in rows
        ]
        first = real[0]
        assert first.request is not None and first.sequence is not None
        template, template_state = first.request.feeds, first.sequence.state
        if len(rows) == 1:
            feeds = dict(template)
            feeds.update(template_state)
        else:
            feeds = {
                name: np.concatenate(
                    [row.request.feeds[name] if row.request is not None else array for row in rows]
                )
                for name, array in template.items()
            }
            for name, array in template_state.items():
                padding = np.zeros_like(array)
                feeds[name] = np.concatenate(
                    [row.sequence.state[name] if row.sequence is not None else padding for row in rows]
                )
        feeds.update(self._controls.columns(model_rows))
        names = list(
            dict.fromkeys(
                [name for row in real if row.request is not None for name in row.request.output_names]
                + self._controls.state_outputs
            )
        )
        return feeds, names

    async def _run(self, runner: _Runner, rows: list[_Row]) -> None:
        started = time.perf_counter_ns()
        real = [
            (index, row.sequence, row.request) for index, row in enumerate(rows) if row.request is not None
        ]
        self._stats.pending -= len(real)
        try:
            feeds, names = self._assemble(rows)
            assembled = time.perf_counter_ns()
            outputs, compute_ns = await self._pool.run_held(runner.instance, feeds, names)
            split_started = time.perf_counter_ns()
            results = []
            for index, sequence, request in real:
                assert sequence is not None and request is not None
                if self._batching:
                    results.append({n: outputs[n][index : index + 1] for n in request.output_names})
                    for entry in self._controls.states:
                        sequence.state[entry.input_name] = outputs[entry.output_name][
                            index : index + 1
                        ].copy()
                else:
                    results.append({n: outputs[n] for n in request.output_names})
                    for entry in self._controls.states:
                        sequence.state[entry.input_name] = outputs[entry.output_name]
            done = time.perf_counter_ns()
        except Exception as exc:
            for _, _, request in real:
                if request is not None and not request.future.done():
                    request.future.set_exception(exc)
            return
        finally:
            now = time.monotonic()
            for _, sequence, _ in real:
                if sequence is not None:
                    sequence.running = False
                    sequence.last_seen = now
            runner.busy = False
            self._schedule(runner)
        self._stats.record_execution(len(real), assembled - started, compute_ns, done - split_started)
        for (_, _, request), result in zip(real, results, strict=True):
            if request is not None and not request.future.done():
                times = ExecutionTimes(
                    started - request.queued_ns, assembled - started, compute_ns, done - split_started
                )
                request.future.set_result((result, times))

    async def schedule(
        self, request: BackendRequest, batch_size: int
    ) -> tuple[BackendResponse, ExecutionTimes]:
        outputs, times = await self.execute(
            request.inputs,
            request.requested_outputs,
            batch_size,
            request.correlation_id,
            bool(request.flags & SEQUENCE_START),
            bool(request.flags & SEQUENCE_END),
            request.timeout_us,
            request.id,
        )
        return BackendResponse(outputs), times

    async def close(self) -> None:
        self.stop()
        await asyncio.to_thread(self._pool.shutdown)

    def stop(self) -> None:
        self._reaper.stop()
        for runner in self._runners:
            if runner.timer is not None:
                runner.timer.cancel()

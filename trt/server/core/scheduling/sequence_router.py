"""Sequence affinity for request-level backends (Python models with ``sequence_batching``).

A Python model keeps a sequence's state in its own process, so every request of a sequence must
reach the instance the sequence started on. Each instance gets its own request queue and, as in
Triton's sequence batcher, a number of sequence slots: ``max_batch_size`` (one when the model does not
batch) for ``direct``, ``max_candidate_sequences`` for ``oldest``. A sequence takes a slot, when it
starts, on the instance with the most free ones, and keeps it until its END request has run or it
stays idle longer than ``max_sequence_idle_microseconds`` (default 1 s); while every slot is taken, new
sequences wait in a backlog, in arrival order (a model written for Triton may keep one sequence's
state per slot, so more at once would mix them), and one whose request ``timeout`` runs out there is
dropped with its requests. A sequence has at most one request in an instance's queue at a time, so
its requests run in arrival order and never in the same ``execute`` call; requests of different
sequences on one instance go to ``execute`` together (up to ``max_batch_size``) when the model
batches. A request for an unknown sequence without START is refused.

As in Triton, the ``control_input`` tensors (START, END, READY, CORRID) are added to each request's
inputs, so ``pb_utils.get_input_tensor_by_name(request, "START")`` works in ``execute``. Implicit
``state`` is not kept for Python models here: the model keeps its state itself.

``iterative_sequence: true`` (Triton's iterative sequences, for models that generate step by step):
a request without a sequence id is given one, and START. Each time ``execute`` releases it with
``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` it queues again on its instance, with neither START nor
END, behind the requests already waiting there, so the steps of many such requests share executions;
a decoupled model streams each step's responses to the same client. The sequence ends when the model
releases the request for good.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trt.protos import model_config_pb2
from trt.server.core.backends.base import (
    SEQUENCE_END,
    SEQUENCE_START,
    BackendRequest,
    BackendResponse,
    RequestLevelInstance,
)
from trt.server.core.errors import InvalidInput
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.scheduling.rate_limiter import Needs, RateLimiter
from trt.server.core.scheduling.request_scheduler import RequestScheduler
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
from trt.server.core.scheduling.timers import IdleTimer
from trt.server.core.scheduling.timing import ExecutionTimes


@dataclass(slots=True, eq=False)
class _Route:
    placed: asyncio.Future[int]  # the instance whose slot it holds, once it has one (the backlog)
    instance: int = -1
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)  # FIFO: the sequence's arrival order
    waiting: int = 0  # requests of the sequence not yet answered
    ended: bool = False
    last_seen: float = field(default_factory=time.monotonic)


class SequenceRouter:
    """Drop-in for ``RequestScheduler`` that keeps each sequence on one instance."""

    def __init__(
        self,
        model_name: str,
        instances: Sequence[RequestLevelInstance],
        stats: ModelStatistics,
        config: model_config_pb2.ModelConfig,
        model_dir: Path | None = None,
        limiter: RateLimiter | None = None,
        needs: Sequence[tuple[Needs, int]] = (),
    ) -> None:
        self._name = model_name
        self._controls = SequenceControls(config, model_dir)
        batching = config.max_batch_size > 0
        needs = list(needs) or [((), 0)] * len(instances)
        self._iterative = config.sequence_batching.iterative_sequence
        self._queues = [
            RequestScheduler([i], stats, config.max_batch_size, batching, limiter, [need], self._iterative)
            for i, need in zip(instances, needs, strict=True)
        ]
        self._ids = IterativeIds()
        self._free_slots = [slots_per_instance(config)] * len(instances)
        self._backlog: deque[_Route] = deque()  # sequences waiting for a slot, oldest first
        self._open: dict[int | str, _Route] = {}
        self._idle_s = (config.sequence_batching.max_sequence_idle_microseconds or DEFAULT_IDLE_US) / 1e6
        self._reaper = IdleTimer(max(self._idle_s / 4, 0.01), self._release_idle)

    def instance_of(self, sequence_id: int | str) -> int | None:
        """The instance an open sequence is bound to (for tests and logs; None: none yet)."""
        route = self._open.get(sequence_id)
        return None if route is None or route.instance < 0 else route.instance

    async def schedule(
        self, request: BackendRequest, batch_size: int
    ) -> tuple[BackendResponse, ExecutionTimes]:
        if batch_size > 1:  # checked first, as Triton does
            raise batched_sequence_request(self._name)
        sequence_id = request.correlation_id
        if sequence_id in (0, "", None):
            if not self._iterative:
                raise missing_sequence_id(self._name)
            sequence_id = request.correlation_id = self._ids.take(self._open)
            request.flags = SEQUENCE_START
        self._controls.check_id(sequence_id, self._name, request.id)
        route = self._open.get(sequence_id)
        if route is None:
            if not request.flags & SEQUENCE_START:
                raise InvalidInput(
                    f"inference request for sequence {sequence_id} to model '{self._name}' must specify "
                    "the START flag on the first request of the sequence"
                )
            route = self._open[sequence_id] = _Route(asyncio.get_running_loop().create_future())
            self._backlog.append(route)
            self._place()
        if request.flags & SEQUENCE_END:  # a later request with this id starts a new sequence
            self._end(sequence_id, route)
        route.waiting += 1
        route.last_seen = time.monotonic()
        self._reaper.arm()
        try:
            if not route.placed.done():  # in the backlog: every slot is taken
                await self._slot_for(sequence_id, route, request.timeout_us)
            queue = self._queues[route.instance]
            async with route.turn:
                steps = ExecutionTimes(0, 0, 0, 0)  # a rescheduled request's time is all its steps'
                while True:
                    self._add_controls(request)
                    response, times = await queue.schedule(request, batch_size)
                    steps.queue_ns += times.queue_ns
                    steps.input_ns += times.input_ns
                    steps.infer_ns += times.infer_ns
                    steps.output_ns += times.output_ns
                    if not response.rescheduled:
                        return response, steps
                    request.flags = 0  # a step of the sequence: neither its start nor its end
                    route.last_seen = time.monotonic()
        finally:
            if self._iterative:  # released for good: its sequence is over
                self._end(sequence_id, route)
            route.waiting -= 1
            route.last_seen = time.monotonic()
            if route.waiting == 0 and (route.ended or not route.placed.done()):
                self._release(sequence_id, route)  # over, or given up while in the backlog

    async def _slot_for(self, sequence_id: int | str, route: _Route, timeout_us: int) -> None:
        """Wait in the backlog for a slot. As Triton's sequence batcher, a sequence whose request
        ``timeout`` runs out first is dropped with all its waiting requests (the earliest counts)."""
        if timeout_us <= 0:
            await asyncio.shield(route.placed)
            return
        try:
            await asyncio.wait_for(asyncio.shield(route.placed), timeout_us / 1e6)
        except TimeoutError:
            if not route.placed.done():
                self._backlog.remove(route)
                self._end(sequence_id, route)
                route.placed.set_exception(backlog_timeout())
            route.placed.result()  # placed in the same instant, or dropped

    def _add_controls(self, request: BackendRequest) -> None:
        row = Row(
            request.correlation_id, bool(request.flags & SEQUENCE_START), bool(request.flags & SEQUENCE_END)
        )
        request.inputs = {**request.inputs, **self._controls.columns([row])}

    def _end(self, sequence_id: int | str, route: _Route) -> None:
        route.ended = True
        if self._open.get(sequence_id) is route:
            del self._open[sequence_id]

    def _place(self) -> None:
        """Give the backlog's oldest sequences the free slots, on the instance with the most."""
        while self._backlog:
            chosen = max(range(len(self._free_slots)), key=self._free_slots.__getitem__)
            if self._free_slots[chosen] == 0:
                return
            route = self._backlog.popleft()
            self._free_slots[chosen] -= 1
            route.instance = chosen
            route.placed.set_result(chosen)

    def _release(self, sequence_id: int | str, route: _Route) -> None:
        """A sequence is over (or left the backlog): its slot goes to the next one waiting."""
        self._end(sequence_id, route)
        if route.instance >= 0:
            self._free_slots[route.instance] += 1
            self._place()
        elif route in self._backlog:
            self._backlog.remove(route)
            route.placed.cancel()

    def _release_idle(self) -> bool:
        """Release sequences idle past ``max_sequence_idle_microseconds``; whether any remain to watch."""
        cutoff = time.monotonic() - self._idle_s
        for sequence_id, route in list(self._open.items()):
            if route.waiting == 0 and route.last_seen <= cutoff and route.instance >= 0:
                self._release(sequence_id, route)
        return bool(self._open)

    async def close(self) -> None:
        self._reaper.stop()

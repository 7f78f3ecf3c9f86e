"""Sequence affinity for request-level backends (Python models with ``sequence_batching``).

A Python model keeps a sequence's state in its own process, so every request of a sequence must
reach the instance the sequence started on. Each instance gets its own request queue; a sequence is
bound, when it starts, to the instance with the fewest open sequences, and stays there until its END
request has run or it stays idle longer than ``max_sequence_idle_microseconds`` (default 1 s). A
sequence has at most one request in an instance's queue at a time, so its requests run in arrival
order and never in the same ``execute`` call; requests of different sequences on one instance go to
``execute`` together (up to ``max_batch_size``) when the model batches. A request for an unknown
sequence without START is refused.

As in Triton, the ``control_input`` tensors (START, END, READY, CORRID) are added to each request's
inputs, so ``pb_utils.get_input_tensor_by_name(request, "START")`` works in ``execute``. Implicit
``state`` is not kept for Python models here: the model keeps its state itself.
"""

from __future__ import annotations

import asyncio
import time
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
from trt.server.core.scheduling.sequence_controls import Row, SequenceControls
from trt.server.core.scheduling.timers import IdleTimer
from trt.server.core.scheduling.timing import ExecutionTimes

DEFAULT_IDLE_US = 1_000_000


@dataclass(slots=True, eq=False)
class _Route:
    instance: int
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
        self._queues = [
            RequestScheduler([i], stats, config.max_batch_size, batching, limiter, [need])
            for i, need in zip(instances, needs, strict=True)
        ]
        self._open_count = [0] * len(instances)
        self._open: dict[int | str, _Route] = {}
        self._idle_s = (config.sequence_batching.max_sequence_idle_microseconds or DEFAULT_IDLE_US) / 1e6
        self._reaper = IdleTimer(max(self._idle_s / 4, 0.01), self._release_idle)

    def instance_of(self, sequence_id: int | str) -> int | None:
        """The instance an open sequence is bound to (for tests and logs)."""
        route = self._open.get(sequence_id)
        return None if route is None else route.instance

    async def schedule(
        self, request: BackendRequest, batch_size: int
    ) -> tuple[BackendResponse, ExecutionTimes]:
        sequence_id = request.correlation_id
        if sequence_id in (0, "", None):
            raise InvalidInput(f"model '{self._name}' is a sequence model: each request needs a sequence_id")
        self._controls.check_id(sequence_id)
        route = self._open.get(sequence_id)
        if route is None:
            if not request.flags & SEQUENCE_START:
                raise InvalidInput(
                    f"inference request for sequence {sequence_id} to model '{self._name}' must specify "
                    "the START flag on the first request of the sequence"
                )
            chosen = min(range(len(self._queues)), key=self._open_count.__getitem__)
            route = self._open[sequence_id] = _Route(chosen)
            self._open_count[chosen] += 1
        if request.flags & SEQUENCE_END:  # a later request with this id starts a new sequence
            route.ended = True
            del self._open[sequence_id]
        row = Row(sequence_id, bool(request.flags & SEQUENCE_START), bool(request.flags & SEQUENCE_END))
        request.inputs = {**request.inputs, **self._controls.columns([row])}
        route.waiting += 1
        route.last_seen = time.monotonic()
        self._reaper.arm()
        try:
            async with route.turn:
                return await self._queues[route.instance].schedule(request, batch_size)
        finally:
            route.waiting -= 1
            route.last_seen = time.monotonic()
            if route.ended and route.waiting == 0:
                self._open_count[route.instance] -= 1

    def _release_idle(self) -> bool:
        """Release sequences idle past ``max_sequence_idle_microseconds``; whether any remain to watch."""
        cutoff = time.monotonic() - self._idle_s
        for sequence_id, route in list(self._open.items()):
            if route.waiting == 0 and route.last_seen <= cutoff:
                del self._open[sequence_id]
                self._open_count[route.instance] -= 1
        return bool(self._open)

    async def close(self) -> None:
        self._reaper.stop()

"""Scheduling for request-level backends (Python models): whole requests, lists per execution.

A Python model's ``execute`` takes a list of requests. When an instance frees up, every request
waiting for it goes along (up to ``max_batch_size`` items) if the model batches, which is what
Triton's dynamic batcher hands a Python model; each request still gets its own response or error.
Under ``--rate-limit=execution_count`` an instance with ``rate_limiter`` resources executes only once
it holds them, as tensor-backend instances do.

An instance that declares ``execution_slots`` > 1 (the Python backend) is handed its next requests
while it still executes one, when requests do not go together (the model does not batch) and no rate
limiter counts executions: the model process then goes from one ``execute`` to the next at once,
instead of idling until the event loop has seen the result (a loop busy with other connections is
slow to). It runs them one at a time, in order, as before; a request counts as queued until its
``execute`` starts.

How many it is handed: every slot it has when it is the model's only instance, since the requests
run in arrival order either way, and a model process that finds several executions waiting runs
them without sleeping and waking between them (add_sub at concurrency 16 over HTTP took about a
third less CPU per request with 8 held than with 2). With several instances, at most
``SHARED_SLOTS`` each (one running, one next), so that no request waits behind a slow execution
while another instance could take it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from trt.server.core.backends.base import BackendRequest, BackendResponse, RequestLevelInstance
from trt.server.core.errors import InvalidArgument, ServerError
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.scheduling.rate_limiter import Needs, RateLimiter
from trt.server.core.scheduling.timing import ExecutionTimes

SHARED_SLOTS = 2  # executions handed to each of a model's several instances at once (see above)
# Triton core's words (infer_request.cc) for a request a model reschedules outside an iterative sequence.
RESCHEDULE_REFUSED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


@dataclass(slots=True)
class _Waiting:
    request: BackendRequest
    batch_size: int
    future: asyncio.Future[tuple[BackendResponse, ExecutionTimes]]
    queued_ns: int


class RequestScheduler:
    def __init__(
        self,
        instances: Sequence[RequestLevelInstance],
        stats: ModelStatistics,
        max_batch_size: int = 0,
        gather: bool = False,
        limiter: RateLimiter | None = None,
        needs: Sequence[tuple[Needs, int]] = (),
        reschedules: bool = False,
    ) -> None:
        # Whether a rescheduled request comes back as such (to an iterative sequence's router that
        # queues it again) rather than as Triton's refusal.
        self._reschedules = reschedules
        # An instance is here once per execution it may take now: with slots, round-robin first.
        slots = min((getattr(i, "execution_slots", 1) for i in instances), default=1)
        if gather or limiter:
            slots = 1
        elif len(instances) > 1:
            slots = min(slots, SHARED_SLOTS)
        self._idle: deque[RequestLevelInstance] = deque(list(instances) * slots)
        self._slots = slots
        # With slots: per instance, the request count of each execution it holds but has not
        # started (it runs another); they count as pending until it starts them.
        self._held: dict[int, deque[int]] = {id(i): deque() for i in instances} if slots > 1 else {}
        self._limiter = limiter
        # With a rate limiter: each limited instance's (resources, priority), in the order of ``instances``.
        self._needs = (
            {id(i): need for i, need in zip(instances, needs, strict=False) if need[0]} if limiter else {}
        )
        self._stats = stats
        self._waiting: deque[_Waiting] = deque()
        self._running: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self._gather = gather
        self._max_batch = max(max_batch_size, 1)
        self._loop: asyncio.AbstractEventLoop | None = None  # the serving loop, from the first request

    async def schedule(
        self, request: BackendRequest, batch_size: int
    ) -> tuple[BackendResponse, ExecutionTimes]:
        """For request-level instances (Python models): queue a whole request, get its response and
        its queue time. Requests waiting when an instance frees up go to it together, up to
        ``max_batch_size`` (the list a Python model's ``execute`` receives), when the model batches."""
        loop = self._loop
        if loop is None:  # asked once: on Python 3.11 each call is a getpid() system call
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[BackendResponse, ExecutionTimes]] = loop.create_future()
        self._waiting.append(_Waiting(request, max(batch_size, 1), future, time.perf_counter_ns()))
        self._stats.pending += 1
        self._dispatch()
        try:
            return await future
        except asyncio.CancelledError:
            request.cancel()  # still waiting: skipped; in execute: the model may ask
            raise

    async def close(self) -> None:
        """Nothing to release: the instances are closed by the version that owns them."""

    def _dispatch(self) -> None:
        waiting = self._waiting
        # _drop_abandoned() only when the head was cancelled (rare): this runs twice per request.
        while self._idle and waiting and (not waiting[0].future.cancelled() or self._drop_abandoned()):
            instance = self._idle.popleft()
            batch = [waiting.popleft()]
            total = batch[0].batch_size
            while (
                self._gather
                and waiting
                and (not waiting[0].future.cancelled() or self._drop_abandoned())
                and total + waiting[0].batch_size <= self._max_batch
            ):
                item = waiting.popleft()
                batch.append(item)
                total += item.batch_size
            # Each slot it has free is in ``_idle``: if not all the others are, it runs one already.
            if self._held and self._idle.count(instance) < self._slots - 1:
                self._held[id(instance)].append(len(batch))  # waits behind the running one
            else:
                self._stats.pending -= len(batch)
            limited = self._needs.get(id(instance))
            if limited is not None:
                self._track(self._run_limited(instance, batch, total, limited))
                continue
            start = getattr(instance, "start_requests", None)
            if start is not None:  # no task per execution: the instance calls back when it ends
                done = partial(self._finish, instance, batch, total, time.perf_counter_ns())
                start([item.request for item in batch], done)
                continue
            self._track(self._run_batch(instance, batch, total))

    def _drop_abandoned(self) -> bool:
        """Drop the requests at the head of the queue that nobody waits for any more (cancelled);
        whether one is left."""
        waiting = self._waiting
        while waiting and waiting[0].future.cancelled():
            waiting.popleft()
            self._stats.pending -= 1
        return bool(waiting)

    def _track(self, execution: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(execution)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run_limited(
        self, instance: RequestLevelInstance, batch: list[_Waiting], total: int, limited: tuple[Needs, int]
    ) -> None:
        """Wait for the instance's rate limiter resources, execute, and hand them back."""
        assert self._limiter is not None
        try:
            await self._limiter.acquire(*limited)
        except asyncio.CancelledError:
            self._idle.append(instance)
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(ServerError("the execution was cancelled (server stopping)"))
            raise
        try:
            await self._run_batch(instance, batch, total)
        finally:
            self._limiter.release(limited[0])

    def _finish(
        self,
        instance: RequestLevelInstance,
        batch: list[_Waiting],
        total: int,
        dispatched: int,
        responses: list[BackendResponse] | None,
        error: BaseException | None,
        started: int | None,
    ) -> None:
        held = self._held.get(id(instance))
        if held:  # the instance starts the next execution it holds now
            self._stats.pending -= held.popleft()
        self._idle.append(instance)
        self._dispatch()
        if error is not None or responses is None:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(error or ServerError("the execution ended without responses"))
            return
        self._record(batch, total, dispatched if started is None else max(started, dispatched), responses)

    async def _run_batch(self, instance: RequestLevelInstance, batch: list[_Waiting], total: int) -> None:
        started = time.perf_counter_ns()
        try:
            responses = await instance.execute_requests([item.request for item in batch])
        except Exception as exc:  # a process that died: every request of the batch hears why
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        except asyncio.CancelledError:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(ServerError("the execution was cancelled (server stopping)"))
            raise
        finally:
            # The instance is busy until its execution ends, whoever stopped waiting for it.
            self._idle.append(instance)
            self._dispatch()
        self._record(batch, total, started, responses)

    def _record(
        self, batch: list[_Waiting], total: int, started: int, responses: list[BackendResponse]
    ) -> None:
        elapsed = time.perf_counter_ns() - started
        self._stats.record_execution(total, 0, elapsed, 0)
        for item, response in zip(batch, responses, strict=True):
            if response.rescheduled and not self._reschedules:
                response = BackendResponse({}, error=InvalidArgument(RESCHEDULE_REFUSED))
            if not item.future.done():
                item.future.set_result((response, ExecutionTimes(started - item.queued_ns, 0, elapsed, 0)))

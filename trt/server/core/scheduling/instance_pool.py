"""A model version's instances, and how one execution runs on one of them.

Handing a call to a worker thread and back costs ~140 us of CPU on these machines, several times
what a tiny model computes. Models whose executions stay under ``INLINE_BUDGET_NS`` run on the
event loop; slower ones run in the instance threads (one per instance), so they overlap and never
stall the loop for long. The choice follows a moving average of execution time, so a model that
becomes slow (bigger batches) moves back to the threads.

A worker thread needs the GIL to start an execution, and the event loop holds it while it has work
(a finished batch's responses to encode, the next requests to parse): the worker used to wait for
the loop to go idle, up to the interpreter's 5 ms switch interval, with the instance idle meanwhile.
For executions long enough that it pays, the loop now waits for the worker to have started before it
goes on, which hands the GIL over at once (when no other execution of the pool is running, so that
a core is likely free for the worker).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from trt.server.core.backends.base import ModelInstance
from trt.server.core.scheduling.rate_limiter import Needs, RateLimiter

INLINE_BUDGET_NS = 100_000
# The loop waits for the worker to start (handing it the GIL) when executions average at least this:
# the wait costs the loop about 0.1 ms here, small beside such an execution. Bounded by HANDOFF_WAIT_S
# so that a worker the OS is slow to run never stalls the loop for long.
HANDOFF_ABOVE_NS = 1_000_000
HANDOFF_WAIT_S = 0.001
_WARMUP_EXECUTIONS = 20
_EWMA_WEIGHT = 0.05


def _timed(
    instance: ModelInstance, feeds: Mapping[str, np.ndarray], names: Sequence[str]
) -> tuple[dict[str, np.ndarray], int]:
    started = time.perf_counter_ns()
    outputs = instance.execute(feeds, names)
    return outputs, time.perf_counter_ns() - started


def _timed_after_signal(
    started: threading.Event,
    instance: ModelInstance,
    feeds: Mapping[str, np.ndarray],
    names: Sequence[str],
) -> tuple[dict[str, np.ndarray], int]:
    started.set()
    return _timed(instance, feeds, names)


class InstancePool:
    def __init__(
        self,
        name: str,
        instances: Sequence[ModelInstance],
        limiter: RateLimiter | None = None,
        needs: Sequence[tuple[Needs, int]] = (),
    ) -> None:
        # With a rate limiter: each instance's (resources, priority), in the order of ``instances``.
        self._limiter = limiter
        self._needs = {
            id(instance): need for instance, need in zip(instances, needs, strict=False) if need[0]
        }
        self._executor = ThreadPoolExecutor(max_workers=len(instances), thread_name_prefix=f"trt-{name}")
        # Idle instances, and whoever waits for one (asyncio.Queue's discipline, without its layers
        # of method calls: taking and giving back an instance happens on every execution).
        # ``idle`` is read by the schedulers (a test cheaper than a call); only the pool changes it.
        self.idle: deque[ModelInstance] = deque(instances)
        self._idle = self.idle
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._executions = 0
        self._average_ns = float(INLINE_BUDGET_NS * 10)
        self._inline = False  # runs_inline, kept up to date after each execution
        # When the pool last went from no idle instance to one (perf_counter_ns; 0: never busy).
        self.available_since_ns = 0
        self._in_threads = 0  # executions handed to the instance threads that have not ended

    @property
    def runs_inline(self) -> bool:
        return self._inline

    def give_back(self, instance: ModelInstance) -> None:
        """Return an instance taken with ``take_idle`` that did not run."""
        self._put_idle(instance)

    def _put_idle(self, instance: ModelInstance) -> None:
        idle = self._idle
        if not idle:
            self.available_since_ns = time.perf_counter_ns()
        idle.append(instance)
        self._wake_waiter()

    def _wake_waiter(self) -> None:
        """Wake the first one still waiting for an instance; it takes one if one is still idle when
        it runs (as asyncio.Queue: one taken meanwhile sends it back to wait)."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def has_idle(self) -> bool:
        return bool(self._idle)

    def take_idle(self) -> ModelInstance | None:
        idle = self._idle
        return idle.popleft() if idle else None

    async def acquire(self) -> ModelInstance:
        idle = self._idle
        while not idle:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                waiter.cancel()
                try:
                    self._waiters.remove(waiter)
                except ValueError:  # already woken: pass the wake-up on, or the instance sits idle
                    if idle:
                        self._wake_waiter()
                raise
        return idle.popleft()

    async def run(
        self, instance: ModelInstance, feeds: Mapping[str, np.ndarray], names: Sequence[str]
    ) -> tuple[dict[str, np.ndarray], int]:
        """Execute on ``instance`` (taken from this pool) and give it back; outputs and compute time."""
        if self._inline and self._limiter is None:  # the common case of a small model, in one frame
            started = time.perf_counter_ns()
            try:
                outputs = instance.execute(feeds, names)
                compute_ns = time.perf_counter_ns() - started
            finally:
                self._put_idle(instance)
            self._executed(compute_ns)
            return outputs, compute_ns
        return await self.run_held(instance, feeds, names, lambda: self._put_idle(instance))

    async def run_held(
        self,
        instance: ModelInstance,
        feeds: Mapping[str, np.ndarray],
        names: Sequence[str],
        finished: Callable[[], None] = lambda: None,
    ) -> tuple[dict[str, np.ndarray], int]:
        """Execute on ``instance``, which the caller holds; ``finished`` runs once it has really ended.

        Under a rate limiter the instance first waits for its resources. The resources (and the
        instance, through ``finished``) go back only when the execution has really ended, even if the
        waiting request is cancelled meanwhile: otherwise two executions could overlap where one is
        allowed.
        """
        limited = self._needs.get(id(instance)) if self._limiter is not None else None
        if limited is None:
            return await self.execute_on(instance, feeds, names, finished)
        limiter = self._limiter
        assert limiter is not None
        try:
            await limiter.acquire(*limited)
        except BaseException:
            finished()
            raise

        def released() -> None:
            limiter.release(limited[0])
            finished()

        return await self.execute_on(instance, feeds, names, released)

    async def execute_on(
        self,
        instance: ModelInstance,
        feeds: Mapping[str, np.ndarray],
        names: Sequence[str],
        finished: Callable[[], None],
    ) -> tuple[dict[str, np.ndarray], int]:
        """Execute on ``instance``, which the caller holds (from this pool, or by its own means:
        sequences keep one instance); ``finished`` runs when the execution has really ended."""
        if self._inline:
            try:
                outputs, compute_ns = _timed(instance, feeds, names)
            finally:
                finished()
        else:
            loop = asyncio.get_running_loop()
            started = threading.Event()
            future = loop.run_in_executor(
                self._executor, _timed_after_signal, started, instance, feeds, names
            )
            handoff = self._in_threads == 0 and self._average_ns >= HANDOFF_ABOVE_NS
            self._in_threads += 1

            def ended(_: object) -> None:
                self._in_threads -= 1
                finished()

            future.add_done_callback(ended)
            # Only when no other execution of this pool runs: then a core is likely free for the
            # worker at once, where with executions running the wait could last its whole bound.
            if handoff:
                started.wait(HANDOFF_WAIT_S)  # releases the GIL, which the worker takes
            outputs, compute_ns = await asyncio.shield(future)
        self._executed(compute_ns)
        return outputs, compute_ns

    def _executed(self, compute_ns: int) -> None:
        self._executions += 1
        self._average_ns += _EWMA_WEIGHT * (compute_ns - self._average_ns)
        self._inline = self._executions >= _WARMUP_EXECUTIONS and self._average_ns < INLINE_BUDGET_NS

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)

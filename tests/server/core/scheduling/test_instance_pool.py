"""The instance pool: how one execution is handed to its instance's thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from trt.server.core.scheduling import instance_pool
from trt.server.core.scheduling.instance_pool import InstancePool


class _EntryRecorder:
    """A real instance that notes when its execution began, then takes ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.entered_ns: list[int] = []

    def execute(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str]) -> dict[str, np.ndarray]:
        self.entered_ns.append(time.perf_counter_ns())
        time.sleep(self.seconds)
        return {"Y": np.asarray(inputs["X"])}

    def close(self) -> None:
        pass


def _entry_and_busy_loop(instance: _EntryRecorder) -> tuple[int, int]:
    """Start one execution, then keep the loop (and the GIL) busy for 30 ms in the same round of
    callbacks (no poll between, which would release the GIL): when the execution began, and when the
    busy spell began."""
    busy_started: list[int] = []

    def busy() -> None:
        busy_started.append(time.perf_counter_ns())
        until = time.perf_counter() + 0.03
        while time.perf_counter() < until:  # pure Python: holds the GIL but for forced switches
            pass

    async def scenario() -> None:
        pool = InstancePool("handoff-test", [instance])
        feeds = {"X": np.zeros((1, 1), np.float32)}
        for _ in range(2):  # the first starts the thread, which then waits for work as in a server
            taken = pool.take_idle()
            assert taken is instance
            execution = asyncio.ensure_future(pool.run(instance, feeds, ["Y"]))
            if not instance.entered_ns:
                await execution
        await asyncio.sleep(0)  # the execution task runs up to its hand-off, then this goes on
        busy()
        await execution
        pool.shutdown()

    asyncio.run(scenario())
    return instance.entered_ns[1], busy_started[0]


def test_a_long_execution_has_started_in_its_thread_before_the_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Generous here so that a slow CI machine's thread wake-up cannot fail it; 1 ms in the server.
    monkeypatch.setattr(instance_pool, "HANDOFF_WAIT_S", 5.0)
    entered, busy = _entry_and_busy_loop(_EntryRecorder(0.01))
    assert entered < busy


def test_without_the_handoff_a_busy_loop_delays_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the hand-off prevents: the worker waits for the loop's busy callback to give up the GIL.
    On a loaded machine the loop's thread can lose its CPU for over the 5 ms switch interval between
    the hand-off and the busy spell, and then gives the GIL up early: such a run is retried."""
    monkeypatch.setattr(instance_pool, "HANDOFF_ABOVE_NS", 10**18)
    runs = [_entry_and_busy_loop(_EntryRecorder(0.01)) for _ in range(3)]
    assert any(entered > busy for entered, busy in runs), runs


class _RecordedEvent(threading.Event):
    """threading.Event, noting each bounded wait (the loop's for a worker to start; a thread's start
    waits too, without a bound)."""

    waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            _RecordedEvent.waits.append(timeout)
        return super().wait(timeout)


def test_the_loop_waits_for_the_worker_only_while_no_other_execution_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With an execution running the cores are busy, and the wait could last its whole bound."""
    monkeypatch.setattr(instance_pool.threading, "Event", _RecordedEvent)
    monkeypatch.setattr(_RecordedEvent, "waits", [])
    running, other = _EntryRecorder(0.2), _EntryRecorder(0.01)
    waits_seen: list[int] = []

    async def scenario() -> None:
        pool = InstancePool("handoff-busy-test", [running, other])
        feeds = {"X": np.zeros((1, 1), np.float32)}
        assert pool.take_idle() is running
        first = asyncio.ensure_future(pool.run(running, feeds, ["Y"]))
        await asyncio.sleep(0.05)  # ``running`` executes, alone: the loop waited for it to start
        waits_seen.append(len(_RecordedEvent.waits))
        assert pool.take_idle() is other
        await pool.run(other, feeds, ["Y"])  # while ``running`` still runs: no wait
        waits_seen.append(len(_RecordedEvent.waits))
        await first
        assert pool.take_idle() is other
        await pool.run(other, feeds, ["Y"])  # alone again
        waits_seen.append(len(_RecordedEvent.waits))
        pool.shutdown()

    asyncio.run(scenario())
    assert waits_seen == [1, 1, 2]


def test_a_waiter_cancelled_after_its_wake_up_passes_the_instance_to_the_next_one() -> None:
    """Two requests wait for the one instance; it comes back, the first is woken and cancelled before
    it runs: the second must get the instance, not wait for ever beside an idle one."""
    instance = _EntryRecorder(0.0)

    async def scenario() -> None:
        pool = InstancePool("waiters-test", [instance])
        taken = pool.take_idle()
        assert taken is instance and not pool.has_idle()
        first = asyncio.ensure_future(pool.acquire())
        second = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)  # both now wait, in this order
        pool.give_back(instance)  # wakes the first
        first.cancel()
        assert await asyncio.wait_for(second, 1.0) is instance
        assert first.cancelled() and not pool.has_idle()
        pool.give_back(instance)
        pool.shutdown()

    asyncio.run(scenario())


def test_waiters_get_the_instance_in_the_order_they_asked() -> None:
    instance = _EntryRecorder(0.0)

    async def scenario() -> list[int]:
        pool = InstancePool("order-test", [instance])
        assert pool.take_idle() is instance
        served: list[int] = []

        async def wait(number: int) -> None:
            held = await pool.acquire()
            served.append(number)
            pool.give_back(held)

        waiting = [asyncio.ensure_future(wait(n)) for n in range(4)]
        await asyncio.sleep(0)
        pool.give_back(instance)
        await asyncio.wait_for(asyncio.gather(*waiting), 1.0)
        pool.shutdown()
        return served

    assert asyncio.run(scenario()) == [0, 1, 2, 3]

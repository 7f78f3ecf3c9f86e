"""The instance pool: how one execution is handed to its instance's thread."""

from __future__ import annotations

import asyncio
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
    """What the hand-off prevents: the worker waits for the loop's busy callback to give up the GIL."""
    monkeypatch.setattr(instance_pool, "HANDOFF_ABOVE_NS", 10**18)
    entered, busy = _entry_and_busy_loop(_EntryRecorder(0.01))
    assert entered > busy

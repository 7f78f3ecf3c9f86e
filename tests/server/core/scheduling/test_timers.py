"""The dynamic batcher's queue-delay timer: never early, once per deadline, and its descriptor freed.

uvloop's own timers work in whole milliseconds and can fire up to one early; a batcher that re-armed
for the rest of its delay then spun the loop until the deadline. These pin the precise timer that
replaced it, on the loop the server runs.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import uvloop

from trt.server.core.scheduling.timers import _TIMERFD, PreciseDeadlineTimer

pytestmark = pytest.mark.skipif(
    _TIMERFD is None, reason="timerfd is Linux-only; elsewhere the coarse timer runs"
)


def run(coroutine_function):  # type: ignore[no-untyped-def]
    return uvloop.run(coroutine_function())


def test_fires_once_and_never_before_its_deadline() -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        fired: list[int] = []
        timer = PreciseDeadlineTimer(lambda: fired.append(time.clock_gettime_ns(time.CLOCK_MONOTONIC)))
        deadlines = []
        for delay_us in (300, 1500, 2000, 2700):  # sub-millisecond and between whole milliseconds
            armed = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            timer.arm_in(delay_us / 1e6)
            deadlines.append(armed + delay_us * 1000)
            await asyncio.sleep(0.02)
        timer.close()
        return fired, deadlines

    fired, deadlines = run(scenario)
    assert len(fired) == len(deadlines)  # one call per deadline: no re-firing, no spinning
    assert all(at >= deadline for at, deadline in zip(fired, deadlines, strict=True))


def test_a_later_deadline_keeps_the_earlier_and_an_earlier_one_replaces_it() -> None:
    async def scenario() -> list[str]:
        fired: list[str] = []
        order = iter(["first", "second"])
        timer = PreciseDeadlineTimer(lambda: fired.append(next(order)))
        timer.arm_in(0.001)
        timer.arm_in(0.5)  # later: ignored, the 1 ms deadline stands
        await asyncio.sleep(0.05)
        timer.arm_in(0.5)
        timer.arm_in(0.001)  # earlier: replaces the 500 ms one
        await asyncio.sleep(0.05)
        timer.close()
        return fired

    assert run(scenario) == ["first", "second"]


def test_cancel_and_close() -> None:
    async def scenario() -> tuple[int, bool]:
        fired: list[int] = []
        timer = PreciseDeadlineTimer(lambda: fired.append(1))
        timer.arm_in(0.002)
        timer.cancel()
        await asyncio.sleep(0.02)
        timer.arm_in(0.002)
        descriptor = timer._fd
        timer.close()
        timer.arm_in(0.001)  # a closed timer stays closed: no descriptor opened again
        await asyncio.sleep(0.02)
        try:
            still_open = "timerfd" in os.readlink(f"/proc/self/fd/{descriptor}")
        except OSError:
            still_open = False
        return len(fired), still_open or timer._fd >= 0

    fired, open_after_close = run(scenario)
    assert fired == 0
    assert not open_after_close

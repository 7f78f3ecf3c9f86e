"""Event-loop timers the schedulers share: a periodic check that runs only while there is something to
check (sequence idle release), and a single timer kept at the earliest deadline asked for (the
dynamic batcher's queue delay, a backlogged sequence's timeout)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class IdleTimer:
    """Calls ``check`` every ``interval_s`` while armed; ``check`` returns whether to keep watching."""

    def __init__(self, interval_s: float, check: Callable[[], bool]) -> None:
        self._interval_s = interval_s
        self._check = check
        self._handle: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(self._interval_s, self._fire)

    def _fire(self) -> None:
        self._handle = None
        if self._check():
            self.arm()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class DeadlineTimer:
    """Calls ``callback`` once at the earliest deadline asked for since it last fired: arming it for
    a later time leaves an earlier one in place, an earlier time replaces it."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._handle: asyncio.Handle | None = None
        # Kept ourselves: uvloop answers call_at for a time already past with a Handle without when().
        self._deadline = 0.0

    def arm_in(self, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay_s
        if self._handle is not None:
            if self._deadline <= deadline:
                return
            self._handle.cancel()
        self._handle, self._deadline = loop.call_at(deadline, self._fire), deadline

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self._callback()

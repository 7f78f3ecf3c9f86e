"""A periodic check that runs only while there is something to check: sequence idle release."""

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

"""Event-loop timers the schedulers share: a periodic check that runs only while there is something to
check (sequence idle release), a single timer kept at the earliest deadline asked for (a backlogged
sequence's timeout), and a precise variant of it for the dynamic batcher's queue delay.

uvloop (libuv) keeps its clock and its timers in whole milliseconds: a 2 ms timer fires anywhere
from 1 to 2 ms after it was set, and one set for less than half a millisecond fires at once. A
batcher that re-armed for "the rest of its delay" after such an early fire spun the event loop
until the deadline; at concurrency 1 that cost more CPU than serving the request. The queue delay
therefore uses a timerfd on Linux (microsecond precision, one descriptor per batcher).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import time
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


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_TFD_TIMER_ABSTIME = 1


def _timerfd_functions() -> tuple[Callable[..., int], Callable[..., int]] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    settime.restype = ctypes.c_int
    return create, settime


_TIMERFD = _timerfd_functions()


class PreciseDeadlineTimer:
    """``DeadlineTimer`` with microsecond precision: a timerfd on the loop's CLOCK_MONOTONIC (the
    clock of ``time.perf_counter_ns`` here), falling back to ``DeadlineTimer`` where there is none.
    The descriptor is opened at the first ``arm_in`` and released by ``close``."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deadline_ns = 0  # 0: disarmed
        self._spec = _Itimerspec()
        self._fallback: DeadlineTimer | None = None if _TIMERFD is not None else DeadlineTimer(callback)
        self._closed = False

    def arm_in(self, delay_s: float) -> None:
        if self._closed:
            return
        if self._fallback is not None:
            self._fallback.arm_in(delay_s)
            return
        deadline = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + max(int(delay_s * 1e9), 1)
        if self._deadline_ns and self._deadline_ns <= deadline:
            return
        if self._fd < 0 and not self._open():
            assert self._fallback is not None
            self._fallback.arm_in(delay_s)
            return
        self._set(deadline)

    def cancel(self) -> None:
        if self._fallback is not None:
            self._fallback.cancel()
        elif self._deadline_ns:
            self._set(0)

    def close(self) -> None:
        self.cancel()
        self._closed = True
        if self._fd >= 0:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd, self._loop = -1, None

    def _open(self) -> bool:
        assert _TIMERFD is not None
        fd = _TIMERFD[0](time.CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:  # out of descriptors: the coarse timer still works
            self._fallback = DeadlineTimer(self._callback)
            return False
        self._fd, self._loop = fd, asyncio.get_running_loop()
        self._loop.add_reader(fd, self._on_ready)
        return True

    def _set(self, deadline_ns: int) -> None:
        assert _TIMERFD is not None
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if _TIMERFD[1](self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self._deadline_ns = deadline_ns

    def _on_ready(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # disarmed or re-armed after it expired: nothing is due
            return
        self._deadline_ns = 0
        self._callback()

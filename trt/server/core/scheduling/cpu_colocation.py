"""Keeping the event loop and the Python model processes on one CPU while the load is light.

A request to a Python model crosses processes twice: the event loop wakes the model's process, and
the model's process wakes the loop. When the woken side last ran on a CPU that is now idle, the
wake-up waits for that CPU to leave its idle state. On the virtual machines measured here that
costs 30-40 us each way, a fifth of a request at concurrency 1; on the CPU the waker is about to
leave, it is a context switch of a few us. One CPU caps throughput, though, so this pays only
while their work takes turns rather than running side by side. The server tries one CPU while its
load is light, and spreads over every CPU it may use again as soon as the loop and the models spend
much of their time runnable but waiting (for each other, or for another program on that CPU).

Only the loop thread and each model process's main thread are pinned. Threads the loop thread
starts while pinned inherit its single CPU; every sample hands them the server's CPUs back.
Linux only (``sched_setaffinity`` and ``/proc``); elsewhere, or with one CPU, it does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass

logger = logging.getLogger("trt.colocation")


@dataclass(frozen=True, slots=True)
class ColocationPolicy:
    interval_s: float = 0.2  # how often the load is sampled
    # Apart, a trial on one CPU is tried only while the server and its model processes use fewer
    # CPUs than this: above it their work clearly runs side by side.
    try_below: float = 1.2
    # Together, the share of time the loop and the model processes spent runnable but not running
    # (waiting for each other, or for someone else on that CPU) above which they spread. Taking
    # turns costs ~0.23 here at concurrency 1, two clients 0.3-0.4, work that runs side by side 0.6.
    spread_when_waiting: float = 0.3
    first_retry_s: float = 1.0  # after a trial that had to spread, the next waits this, doubling
    last_retry_s: float = 60.0


@dataclass(frozen=True, slots=True)
class LoadSample:
    """What one sampling interval saw, in CPUs (seconds per second)."""

    used: float  # CPU used by the server process (every thread) and its model processes
    waiting: float  # the loop thread and the model processes' main threads, runnable but not running


@dataclass(slots=True)
class ColocationState:
    """Where the decision stands; ``decide`` is the whole policy."""

    cpu: int | None = None  # the CPU shared while together
    retry_s: float = 0.0  # the wait before the next trial (0: none has failed yet)
    next_trial: float = 0.0  # monotonic seconds
    joined_at: float = 0.0


def decide(policy: ColocationPolicy, state: ColocationState, sample: LoadSample, now: float) -> str | None:
    """``"join"``, ``"spread"`` or None (stay as they are); updates ``state``'s trial schedule.

    Together they stay while they wait little for each other. Apart, they try one CPU again once the
    load is light enough and the back-off since the last failed trial has passed; a trial that
    stays together for good resets the back-off."""
    if state.cpu is not None:
        if sample.waiting > policy.spread_when_waiting:
            state.retry_s = min(max(state.retry_s * 2, policy.first_retry_s), policy.last_retry_s)
            state.next_trial = now + state.retry_s
            return "spread"
        if now - state.joined_at > policy.last_retry_s:
            state.retry_s = 0.0  # settled: a later change of load starts its trials afresh
        return None
    if sample.used < policy.try_below and now >= state.next_trial:
        state.joined_at = now
        return "join"
    return None


def _supported() -> bool:
    return hasattr(os, "sched_setaffinity") and os.path.exists("/proc/thread-self/schedstat")


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def _process_cpu_s(pid: int) -> float | None:
    """User and system CPU of every thread of ``pid`` (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime (fields 14 and 15)


def _wait_s(path: str) -> float:
    """Seconds a thread spent runnable but not running, from its ``schedstat``."""
    try:
        with open(path, "rb") as schedstat:
            return int(schedstat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _current_cpu() -> int | None:
    try:
        with open("/proc/thread-self/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[36])  # field 39: the CPU it last ran on
    except (OSError, IndexError, ValueError):
        return None


class CpuColocation:
    """Registers model processes (by pid) and samples the load on the event loop while any is
    registered. ``add`` and ``discard`` may be called from any thread."""

    def __init__(self, policy: ColocationPolicy | None = None, enabled: bool = True) -> None:
        self.policy = policy or ColocationPolicy()
        self._allowed: set[int] = set(os.sched_getaffinity(0)) if _supported() else set()
        self.enabled = enabled and len(self._allowed) > 1
        self.state = ColocationState()
        self._pids: set[int] = set()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_tid = 0
        self._timer: asyncio.TimerHandle | None = None
        self._last: tuple[float, float, float] | None = None  # wall, CPU used, waiting

    @property
    def together(self) -> bool:
        return self.state.cpu is not None

    def add(self, pid: int, loop: asyncio.AbstractEventLoop) -> None:
        """Watch model process ``pid``; sampling runs on ``loop`` (the serving loop)."""
        if not self.enabled:
            return
        with self._lock:
            self._pids.add(pid)
            cpu = self.state.cpu
        # Apart, it gets every CPU even if it was started from a thread that inherited the loop's one.
        self._set_affinity(pid, self._allowed if cpu is None else {cpu})
        loop.call_soon_threadsafe(self._start, loop)

    def discard(self, pid: int) -> None:
        with self._lock:
            self._pids.discard(pid)

    def stop(self) -> None:
        """Spread and stop sampling (server shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.together:
            self._spread()

    # -- on the loop -----------------------------------------------------------------------------

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            return
        self._loop, self._loop_tid = loop, threading.get_native_id()
        self._last = self._measure()
        self._timer = loop.call_later(self.policy.interval_s, self._sample)

    def _sample(self) -> None:
        self._timer = None
        with self._lock:
            watching = bool(self._pids)
        if not watching:
            if self.together:
                self._spread()
            self._last = None
            return  # started again by the next add
        now = self._measure()
        if self._last is not None and now[0] > self._last[0]:
            elapsed = now[0] - self._last[0]
            sample = LoadSample((now[1] - self._last[1]) / elapsed, (now[2] - self._last[2]) / elapsed)
            action = decide(self.policy, self.state, sample, now[0])
            if action == "join":
                self._join()
            elif action == "spread":
                self._spread()
        self._last = now
        if self.state.cpu is not None:
            self._release_inherited(self.state.cpu)
        assert self._loop is not None
        self._timer = self._loop.call_later(self.policy.interval_s, self._sample)

    def _measure(self) -> tuple[float, float, float]:
        times = os.times()
        used, waiting = times.user + times.system, _wait_s("/proc/thread-self/schedstat")
        with self._lock:
            pids = list(self._pids)
        for pid in pids:
            used += _process_cpu_s(pid) or 0.0
            waiting += _wait_s(f"/proc/{pid}/schedstat")
        return time.monotonic(), used, waiting

    def _join(self) -> None:
        cpu = _current_cpu()
        if cpu is None or cpu not in self._allowed:
            return
        try:
            os.sched_setaffinity(0, {cpu})  # the calling thread: the loop
        except OSError:  # the CPUs this process may use changed under it
            return
        self.state.cpu = cpu
        with self._lock:
            pids = list(self._pids)
        for pid in pids:
            self._set_affinity(pid, {cpu})
        logger.debug("light load: the event loop and %d model process(es) share CPU %d", len(pids), cpu)

    def _spread(self) -> None:
        cpu, self.state.cpu = self.state.cpu, None
        try:
            os.sched_setaffinity(self._loop_tid, self._allowed)
        except OSError:
            pass
        with self._lock:
            pids = list(self._pids)
        for pid in pids:
            self._set_affinity(pid, self._allowed)
        if cpu is not None:
            self._release_inherited(cpu)
        logger.debug("load rose: the event loop and the model processes use every CPU again")

    def _release_inherited(self, cpu: int) -> None:
        """Give the server's CPUs back to the threads that inherited the loop's single ``cpu`` (those
        it started while pinned); a thread pinned elsewhere on purpose is left as it is."""
        try:
            tids = [int(name) for name in os.listdir("/proc/self/task")]
        except OSError:
            return
        for tid in tids:
            if tid == self._loop_tid and self.state.cpu is not None:
                continue
            try:
                if os.sched_getaffinity(tid) == {cpu}:
                    os.sched_setaffinity(tid, self._allowed)
            except OSError:
                pass  # it ended meanwhile

    @staticmethod
    def _set_affinity(pid: int, cpus: set[int]) -> None:
        try:
            os.sched_setaffinity(pid, cpus)
        except OSError:
            pass  # it exited meanwhile

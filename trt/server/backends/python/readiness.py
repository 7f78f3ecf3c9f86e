"""A Python model's own readiness check: ``is_ready()`` in ``TritonPythonModel``, as Triton's Python
backend has it (a database or feature store the model needs, weights still loading, a drain).

Triton calls it on each readiness request (with a 5 s bound). trt's readiness answers are
synchronous, so the model process is asked once a second instead, from the event loop, while the
instance serves: the answer a readiness request gets is at most about a second old. The first
answer comes with the process's start-up, so a freshly loaded model is never reported ready before
its check has said so. A check that has not answered within 5 s counts as not ready, and no other
is asked meanwhile. Only models that define ``is_ready`` are asked anything.

The question travels on the process's socket (a byte), which a thread of the process watches, so
that a long ``execute`` does not hold the answer back; the answer comes back through the rings.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 5.0  # Triton's kUserModelReadinessTimeoutMs


class UserReadiness:
    def __init__(self, ask: Callable[[], None]) -> None:
        self.value = False  # what the model's is_ready() last answered (False until it has)
        self._ask = ask  # sends the question to the process
        self._asked_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def started(self, first: bool) -> None:
        """A (new) process answered its first check during start-up."""
        self.value = first
        self._asked_at = None

    def watch(self) -> None:
        """Ask once a second from now on (called on the event loop; once is enough)."""
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(PROBE_INTERVAL_S, self._tick)

    def answered(self, value: object) -> None:
        self.value = value is True
        self._asked_at = None

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        now = time.monotonic()
        if self._asked_at is None:
            self._asked_at = now
            self._ask()
        elif now - self._asked_at > PROBE_TIMEOUT_S:
            self.value = False  # it has not answered: not ready, until it does
        self._timer = asyncio.get_running_loop().call_later(PROBE_INTERVAL_S, self._tick)

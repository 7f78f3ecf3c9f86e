"""Triton's rate limiter (``--rate-limit=execution_count``): instances of any model execute only
while the resources their ``instance_group { rate_limiter { resources [...] } }`` names are free.

Counts come from ``--rate-limit-resource=NAME:COUNT[:DEVICE]``; a resource given no count gets the
largest count any single instance asks for, as Triton does, so one such instance fits at a time.
Waiting instances are granted in order of their group's ``priority`` (smaller first), then arrival.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

Needs = tuple[tuple[str, int], ...]


@dataclass(order=True)
class _Waiter:
    priority: int
    order: int
    needs: Needs = field(compare=False)
    future: asyncio.Future[None] = field(compare=False)


class RateLimiter:
    def __init__(self, counts: dict[str, int]) -> None:
        self._explicit = dict(counts)
        self._available = dict(counts)
        self._total = dict(counts)
        self._waiting: list[_Waiter] = []
        self._order = itertools.count()

    def register(self, needs: Sequence[tuple[str, int]]) -> None:
        """Size resources that the command line did not give a count to."""
        for name, count in needs:
            if name in self._explicit:
                if count > self._explicit[name]:
                    raise ValueError(
                        f"an instance needs {count} of rate limiter resource '{name}' but only "
                        f"{self._explicit[name]} exist (--rate-limit-resource)"
                    )
                continue
            extra = max(count - self._total.get(name, 0), 0)
            self._total[name] = self._total.get(name, 0) + extra
            self._available[name] = self._available.get(name, 0) + extra

    def _fits(self, needs: Needs) -> bool:
        return all(self._available.get(name, 0) >= count for name, count in needs)

    def _take(self, needs: Needs) -> None:
        for name, count in needs:
            self._available[name] -= count

    async def acquire(self, needs: Needs, priority: int = 0) -> None:
        if not self._waiting and self._fits(needs):
            self._take(needs)
            return
        waiter = _Waiter(priority, next(self._order), needs, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        self._waiting.sort()
        self._grant()
        await waiter.future

    def release(self, needs: Needs) -> None:
        for name, count in needs:
            self._available[name] += count
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self._fits(self._waiting[0].needs):
            waiter = self._waiting.pop(0)
            if waiter.future.done():  # its request was cancelled while waiting
                continue
            self._take(waiter.needs)
            waiter.future.set_result(None)

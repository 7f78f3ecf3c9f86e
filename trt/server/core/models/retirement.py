"""Versions that no longer take requests, finishing the ones they hold in the background.

An unload returns as soon as the model stops taking requests, as Triton's does: its in-flight
requests (a long stream, an ensemble holding it as a step) finish on their own time, and the index
lists the version UNLOADING until its instances are released. A reload's old versions retire the
same way, unlisted, because the new ones serve under the same numbers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from trt.server.core.models.table import ModelEntry
from trt.server.core.models.version import ModelVersion

logger = logging.getLogger("trt.lifecycle")


class Retirements:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    def start(self, entry: ModelEntry, number: int, model: ModelVersion, listed: bool) -> None:
        """Retire ``model``; with ``listed``, ``entry`` shows version ``number`` UNLOADING until it is
        gone (unless a newer copy of that version has taken its place in the listing since)."""
        if listed:
            entry.unloading[number] = model
        task = asyncio.create_task(model.retire(), name=f"trt-retire-{model.name}-{model.version}")
        self._tasks.add(task)

        def retired(done: asyncio.Task[None]) -> None:
            self._tasks.discard(done)
            if entry.unloading.get(number) is model:
                del entry.unloading[number]
            if done.cancelled():
                return
            if done.exception() is not None:
                logger.error("retiring '%s' version %d failed", model.name, number, exc_info=done.exception())
            elif listed:
                logger.info("unloaded '%s' version %d", model.name, number)

        task.add_done_callback(retired)

    async def current(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) for the retirements under way now; whether they ended."""
        under_way = set(self._tasks)
        if not under_way:
            return True
        _, pending = await asyncio.wait(under_way, timeout=timeout)
        return not pending

    def after_current(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the retirements under way now have ended (at once if there are none)."""
        under_way = set(self._tasks)  # taken now: the task below joins the set, and must not wait on itself
        if not under_way:
            callback()
            return

        async def when_retired() -> None:
            await asyncio.wait(under_way)
            callback()

        task = asyncio.create_task(when_retired(), name="trt-after-retirements")
        self._tasks.add(task)  # finish() waits for it too
        task.add_done_callback(self._tasks.discard)

    async def finish(self) -> None:
        """Wait for every retirement under way (the server is stopping)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

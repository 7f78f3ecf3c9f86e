"""Streams that run side by side and are read one after another, in the order they began.

Each answer of an ensemble's decoupled step runs the steps after it. Run one answer at a time, a
slow step after it (a detokenizer, say) holds back every later answer even while that step has
instances to spare; run freely, answers would overtake each other, and a stream of tokens must not
be reordered. ``in_order`` starts each stream it is given at once, at most ``window`` at a time
(counting those finished but not yet read, whose items wait in memory), and hands on their items
stream by stream, in the order the streams were given.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

T = TypeVar("T")

# Items a stream may produce ahead of its reader before it waits. Small: a stream that is itself fed
# by a decoupled step (an ensemble's second one) leaves the rest in that step's answer queue, which
# counts their bytes against --max-unread-response-bytes and --max-queued-bytes; here they would not.
ITEMS_AHEAD = 4


@dataclass(frozen=True, slots=True)
class _Failure:
    """A stream (or the source of streams) raised: the reader raises it again in its place."""

    error: Exception


_END = object()  # a stream, or the source of streams, ended


class _Run(Generic[T]):
    """One stream, running in a task of its own, and the items it produced that nobody read yet."""

    def __init__(self, stream: AsyncGenerator[T, None]) -> None:
        self.items: asyncio.Queue[T | _Failure | object] = asyncio.Queue(ITEMS_AHEAD)
        self.task = asyncio.ensure_future(self._drain(stream))

    async def _drain(self, stream: AsyncGenerator[T, None]) -> None:
        try:
            async with aclosing(stream):
                async for item in stream:
                    await self.items.put(item)
        except Exception as exc:
            await self.items.put(_Failure(exc))
            return
        await self.items.put(_END)


async def in_order(
    streams: AsyncGenerator[AsyncGenerator[T, None], None], window: int
) -> AsyncGenerator[T, None]:
    """Every item of every stream ``streams`` gives, stream after stream in the order given, while
    up to ``window`` of them run at once. A stream that raises ends the whole after the items of the
    streams before it; so does ``streams`` itself. Leaving early (an error, a cancelled reader, or
    ``aclose()``) cancels the streams still running and closes ``streams``."""
    slots = asyncio.Semaphore(window)
    runs: asyncio.Queue[_Run[T] | _Failure | object] = asyncio.Queue()  # at most window + 1 in it
    live: set[_Run[T]] = set()

    async def start_each() -> None:
        try:
            async with aclosing(streams):
                async for stream in streams:
                    await slots.acquire()
                    run = _Run(stream)
                    live.add(run)
                    runs.put_nowait(run)
        except Exception as exc:
            runs.put_nowait(_Failure(exc))
            return
        runs.put_nowait(_END)

    starter = asyncio.ensure_future(start_each())
    try:
        while True:
            run = await runs.get()
            if run is _END:
                return
            if isinstance(run, _Failure):
                raise run.error
            assert isinstance(run, _Run)
            while (item := await run.items.get()) is not _END:
                if isinstance(item, _Failure):
                    raise item.error
                yield cast(T, item)
            live.discard(run)
            slots.release()
    finally:
        starter.cancel()
        for left in live:
            left.task.cancel()
        await asyncio.gather(starter, *(left.task for left in live), return_exceptions=True)

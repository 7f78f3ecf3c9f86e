"""Streams run side by side and read in the order they were given (in_order)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

from trt.server.core.scheduling.ordered_streams import in_order


class Boom(Exception):
    pass


async def _collect(streams: AsyncGenerator[AsyncGenerator[str, None], None], window: int) -> list[str]:
    return [item async for item in in_order(streams, window)]


def test_items_come_stream_by_stream_in_the_order_given_while_the_streams_run_at_once() -> None:
    async def scenario() -> list[str]:
        all_started = asyncio.Event()
        started = 0

        async def stream(name: str, delay: float) -> AsyncGenerator[str, None]:
            nonlocal started
            started += 1
            if started == 3:
                all_started.set()
            # Run one at a time, the first would wait here for ever: the others never start.
            await asyncio.wait_for(all_started.wait(), 2)
            await asyncio.sleep(delay)  # the last given ends first
            yield f"{name}1"
            yield f"{name}2"

        async def streams() -> AsyncGenerator[AsyncGenerator[str, None], None]:
            for name, delay in (("a", 0.06), ("b", 0.03), ("c", 0.0)):
                yield stream(name, delay)

        return await _collect(streams(), window=3)

    assert asyncio.run(scenario()) == ["a1", "a2", "b1", "b2", "c1", "c2"]


def test_no_more_than_the_window_run_at_once() -> None:
    async def scenario() -> tuple[list[str], int]:
        running, most = 0, 0

        async def stream(index: int) -> AsyncGenerator[str, None]:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.01)
            running -= 1
            yield str(index)

        async def streams() -> AsyncGenerator[AsyncGenerator[str, None], None]:
            for index in range(10):
                yield stream(index)

        return await _collect(streams(), window=3), most

    items, most = asyncio.run(scenario())
    assert items == [str(i) for i in range(10)]
    assert most == 3


def test_a_failing_stream_ends_the_whole_after_the_streams_before_it_and_cancels_the_rest() -> None:
    async def scenario() -> tuple[list[str], BaseException | None, list[str]]:
        closed: list[str] = []

        async def good(name: str) -> AsyncGenerator[str, None]:
            yield name

        async def bad() -> AsyncGenerator[str, None]:
            await asyncio.sleep(0.02)
            raise Boom("step failed")
            yield "never"  # pragma: no cover

        async def endless() -> AsyncGenerator[str, None]:
            try:
                while True:
                    await asyncio.sleep(0.01)
                    yield "more"
            finally:
                closed.append("endless")

        async def streams() -> AsyncGenerator[AsyncGenerator[str, None], None]:
            yield good("first")
            yield bad()
            yield endless()

        items: list[str] = []
        error = None
        try:
            async for item in in_order(streams(), 4):
                items.append(item)
        except Boom as exc:
            error = exc
        return items, error, closed

    items, error, closed = asyncio.run(scenario())
    assert items == ["first"]
    assert isinstance(error, Boom)
    assert closed == ["endless"]


def test_a_failing_source_ends_the_whole_after_the_streams_it_gave() -> None:
    async def scenario() -> tuple[list[str], BaseException | None]:
        async def slow(name: str) -> AsyncGenerator[str, None]:
            await asyncio.sleep(0.03)
            yield name

        async def streams() -> AsyncGenerator[AsyncGenerator[str, None], None]:
            yield slow("a")
            yield slow("b")
            raise Boom("the decoupled step failed")

        items: list[str] = []
        try:
            async for item in in_order(streams(), 4):
                items.append(item)
        except Boom as exc:
            return items, exc
        return items, None

    items, error = asyncio.run(scenario())
    assert items == ["a", "b"]
    assert isinstance(error, Boom)


def test_leaving_early_cancels_the_running_streams_and_closes_the_source() -> None:
    async def scenario() -> list[str]:
        closed: list[str] = []

        async def ticking(name: str) -> AsyncGenerator[str, None]:
            try:
                while True:
                    yield name
                    await asyncio.sleep(0.01)
            finally:
                closed.append(name)

        async def streams() -> AsyncGenerator[AsyncGenerator[str, None], None]:
            try:
                yield ticking("a")
                yield ticking("b")
                await asyncio.sleep(10)
            finally:
                closed.append("source")

        reader = in_order(streams(), 4)
        assert await reader.__anext__() == "a"
        await asyncio.sleep(0.03)  # b has started and is waiting for its reader
        await reader.aclose()
        return sorted(closed)

    assert asyncio.run(scenario()) == ["a", "b", "source"]


@pytest.mark.parametrize("window", [1, 2])
def test_a_stream_that_yields_nothing_is_passed_over(window: int) -> None:
    async def scenario() -> list[str]:
        async def empty() -> AsyncGenerator[str, None]:
            return
            yield "never"  # pragma: no cover

        async def one(name: str) -> AsyncGenerator[str, None]:
            yield name

        async def streams() -> AsyncGenerator[AsyncGenerator[str, None], None]:
            yield one("a")
            yield empty()
            yield one("b")

        return await _collect(streams(), window)

    assert asyncio.run(scenario()) == ["a", "b"]

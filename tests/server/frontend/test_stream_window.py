"""The core's side of a worker's ``ModelStreamInfer`` call: its requests wait together for the worker
to write pieces (``STREAM_WINDOW`` unwritten at most). A written piece wakes every one of them, and
one cancelled while it waits leaves the others waiting rather than failing them."""

from __future__ import annotations

import asyncio

from trt.server.frontend.serving import STREAM_WINDOW, _Window


def test_one_waiter_cancelled_leaves_the_others_to_be_woken_by_a_written_piece() -> None:
    async def scenario() -> tuple[list[str], int]:
        window = _Window()
        for _ in range(STREAM_WINDOW):
            await window.wait()  # the window fills: the worker has written none of them
        outcomes: list[str] = []

        async def piece(name: str) -> None:
            try:
                await window.wait()
                outcomes.append(f"{name} sent")
            except asyncio.CancelledError:
                outcomes.append(f"{name} cancelled")
                raise

        waiters = [asyncio.create_task(piece(name)) for name in ("first", "second", "third")]
        await asyncio.sleep(0)
        waiters[0].cancel()
        await asyncio.sleep(0)
        assert not waiters[1].done() and not waiters[2].done()  # before: cancelled with the first
        window.written()
        window.written()  # two pieces out: room for the two still waiting
        await asyncio.wait(waiters[1:], timeout=5)
        return outcomes, window.unwritten

    outcomes, unwritten = asyncio.run(scenario())
    assert sorted(outcomes) == ["first cancelled", "second sent", "third sent"]
    assert unwritten == STREAM_WINDOW

"""Requests that share one ``ModelStreamInfer`` call wait for room together in
``GrpcCall.writable``: a drain wakes every one of them, and one that is cancelled while it waits
leaves the others waiting rather than failing them."""

from __future__ import annotations

import asyncio

from trt.server.grpc.app import GrpcApp
from trt.server.grpc.call import GrpcCall
from trt.server.grpc.h2.outbound import Outbound
from trt.server.grpc.h2.settings import H2Settings
from trt.server.grpc.options import GrpcOptions


class _Transport(asyncio.Transport):
    """Takes every write: the peer reads at once (what it has credit for)."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def writelines(self, list_of_data: object) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def _blocked_call() -> tuple[GrpcCall, Outbound]:
    """A call whose client has read nothing: 4 KiB wait unsent, the call's bound."""
    app = GrpcApp(GrpcOptions(max_unsent_bytes=4096), {}, None)
    streams: dict[int, GrpcCall] = {}
    outbound = Outbound(_Transport(), H2Settings(), lambda stream, reset: None, streams)  # type: ignore[arg-type]
    call = streams[1] = GrpcCall(app, outbound, 1)
    call.send_window = 0
    call.send_message(b"x" * 4096)
    assert call.outbox_bytes >= 4096
    return call, outbound


def test_one_waiter_cancelled_leaves_the_others_to_be_woken_by_the_drain() -> None:
    async def scenario() -> list[str]:
        call, outbound = await _blocked_call()
        outcomes: list[str] = []

        async def request(name: str) -> None:
            try:
                await call.writable()
                outcomes.append(f"{name} written")
            except asyncio.CancelledError:
                outcomes.append(f"{name} cancelled")
                raise

        waiters = [asyncio.create_task(request(name)) for name in ("first", "second", "third")]
        await asyncio.sleep(0)
        waiters[0].cancel()
        await asyncio.sleep(0)
        assert not waiters[1].done() and not waiters[2].done()  # before: cancelled with the first
        outbound.send_window = 1 << 30
        outbound.stream_credit(call, 1 << 20)  # the client reads: everything goes
        await asyncio.wait(waiters[1:], timeout=5)
        return outcomes

    assert sorted(asyncio.run(scenario())) == ["first cancelled", "second written", "third written"]

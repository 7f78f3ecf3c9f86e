"""The HTTP/2 sender tells a stream's writer each time its waiting data goes out, whichever write
carried it: a writer waiting for room (``GrpcCall.writable``) is woken only that way."""

from __future__ import annotations

import asyncio

from trt.server.grpc.h2.outbound import WRITE_BATCH, Outbound
from trt.server.grpc.h2.settings import H2Settings
from trt.server.grpc.h2.stream import H2Stream


class _Transport(asyncio.Transport):
    """Takes every write: the peer reads at once."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += len(data)

    def writelines(self, list_of_data: object) -> None:
        for data in list_of_data:  # type: ignore[attr-defined]
            self.write(data)

    def get_write_buffer_size(self) -> int:
        return 0


class _Stream(H2Stream):
    def __init__(self, outbound: Outbound, stream_id: int) -> None:
        super().__init__(outbound, stream_id)
        self.drained = 0

    def on_drained(self) -> None:
        self.drained += 1


def test_data_that_waited_is_announced_when_its_last_batch_empties_the_outbox() -> None:
    async def drain_exactly_one_batch() -> tuple[int, int]:
        streams: dict[int, H2Stream] = {}
        outbound = Outbound(_Transport(), H2Settings(), lambda stream, reset: None, streams)
        outbound.peer_max_frame = 1 << 20
        stream = streams[1] = _Stream(outbound, 1)
        stream.send_window = 0  # no credit yet: the data waits in the outbox
        outbound.send_data(stream, b"x" * WRITE_BATCH, end_stream=False)
        assert stream.outbox_bytes == WRITE_BATCH
        outbound.send_window = 1 << 30
        outbound.stream_credit(stream, WRITE_BATCH)  # all of it goes, in one batch that empties the outbox
        return stream.outbox_bytes, stream.drained

    left, announced = asyncio.run(drain_exactly_one_batch())
    assert left == 0
    assert announced == 1  # 0 before: the writer waiting for room was never woken

"""A header block split over CONTINUATION frames must end within ``header_block_timeout_s`` of its
HEADERS frame: nothing else may come on the connection meanwhile, so a block trickled a frame at a time
would hold it. Past the deadline: GOAWAY ENHANCE_YOUR_CALM, and no stream is opened. A block that ends
in time opens its stream, and its deadline, cancelled, never fires afterwards.

The connection runs in-process over a recording transport (``serve``), with the client's pauses between
frames real, so that the deadline's timer runs on the loop as it would in the server."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.fuzz.connection_harness import serve
from tests.server.grpc.h2_peer import SERVICE, frame_bytes, request_block, written_frames
from trt.http2.frames import END_HEADERS, PREFACE, ErrorCode, FrameType
from trt.server.grpc.h2.connection import H2ServerConnection
from trt.server.grpc.h2.outbound import Outbound
from trt.server.grpc.h2.settings import H2Settings, KeepaliveOptions


class _OpenedStream:
    content_length: int | None = None
    remote_closed = False
    closed = False

    def on_open(self, head: Any, end_stream: bool) -> None:
        pass

    def on_reset(self, code: ErrorCode) -> None:
        pass


class _RecordingApplication:
    def __init__(self) -> None:
        self.opened: list[int] = []

    def open_stream(self, outbound: Outbound, stream_id: int) -> _OpenedStream:
        self.opened.append(stream_id)
        return _OpenedStream()

    def refuse_headers(self, outbound: Outbound, stream_id: int, message: str) -> None:
        raise AssertionError(message)


def _trickled_block(fragments: int) -> list[bytes]:
    """The handshake and a HEADERS frame, then the rest of its block in ``fragments`` CONTINUATIONs."""
    block = request_block(SERVICE + "ServerLive")
    size = -(-(len(block) - 4) // fragments)
    pieces = [
        PREFACE + frame_bytes(FrameType.SETTINGS, 0, 0) + frame_bytes(FrameType.HEADERS, 0, 1, block[:4])
    ]
    for start in range(4, len(block), size):
        last = start + size >= len(block)
        pieces.append(
            frame_bytes(FrameType.CONTINUATION, END_HEADERS if last else 0, 1, block[start : start + size])
        )
    return pieces


def _goaways(written: bytes) -> list[tuple[int, bytes]]:
    """The error code and debug data of each GOAWAY written."""
    return [(f.error_code, f.payload[8:]) for f in written_frames(written) if f.kind == FrameType.GOAWAY]


def _run(timeout_s: float, pieces: list[bytes], delays: list[float]) -> tuple[list[int], bytes, bool]:
    application = _RecordingApplication()

    async def served() -> tuple[bytes, bool]:
        settings = H2Settings(header_block_timeout_s=timeout_s)
        connection = H2ServerConnection(application, settings, KeepaliveOptions(), set())
        transport = await serve(connection, pieces, delays=delays)
        return bytes(transport.written), transport.ended

    written, ended = asyncio.run(served())
    return application.opened, written, ended


def test_a_block_trickled_past_its_deadline_ends_the_connection_and_opens_no_stream() -> None:
    pieces = _trickled_block(fragments=6)
    opened, written, ended = _run(0.3, pieces, delays=[0.0] + [0.15] * (len(pieces) - 1) + [0.1])
    assert _goaways(written) == [(ErrorCode.ENHANCE_YOUR_CALM, b"a header block not ended in time")]
    assert ended and opened == []


def test_a_block_ended_in_time_opens_its_stream_and_its_deadline_never_fires() -> None:
    pieces = _trickled_block(fragments=3)
    # The client stays three deadlines after its block ended: a timer left running would fail it.
    opened, written, ended = _run(0.2, pieces, delays=[0.0] + [0.02] * (len(pieces) - 1) + [0.6])
    assert opened == [1]
    assert _goaways(written) == [] and not ended

"""A fault of the server's own while it handles a client's frames (here, an application whose
``open_stream`` raises) ends that connection alone, with GOAWAY INTERNAL_ERROR and the traceback in
the log, rather than escaping ``data_received`` for the event loop to report and cut the connection."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from tests.fuzz.connection_harness import serve
from tests.server.grpc.h2_peer import SERVICE, frame_bytes, request_block, written_frames
from trt.http2.frames import END_HEADERS, PREFACE, ErrorCode, FrameType
from trt.server.grpc.h2.connection import H2ServerConnection
from trt.server.grpc.h2.outbound import Outbound
from trt.server.grpc.h2.settings import H2Settings, KeepaliveOptions
from trt.server.grpc.h2.stream import H2Stream


class _BrokenApplication:
    def open_stream(self, outbound: Outbound, stream_id: int) -> H2Stream:
        raise RuntimeError("planted fault in open_stream")

    def refuse_headers(self, outbound: Outbound, stream_id: int, message: str) -> None:
        raise RuntimeError("planted fault in refuse_headers")


async def _served(client: bytes) -> tuple[bytes, bool]:
    connection = H2ServerConnection(_BrokenApplication(), H2Settings(), KeepaliveOptions(), set())
    transport = await serve(connection, [client])
    return bytes(transport.written), transport.ended


def test_a_fault_of_ours_ends_the_connection_with_goaway_internal_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = (
        PREFACE
        + frame_bytes(FrameType.SETTINGS, 0, 0)
        + frame_bytes(FrameType.HEADERS, END_HEADERS, 1, request_block(SERVICE + "ServerLive"))
    )
    with caplog.at_level(logging.ERROR, logger="trt.grpc"):
        written, ended = asyncio.run(_served(client))
    last = written_frames(written)[-1]
    kind, stream, payload = last.kind, last.stream, last.payload
    assert (kind, stream) == (FrameType.GOAWAY, 0)
    assert struct.unpack(">II", payload[:8]) == (1, ErrorCode.INTERNAL_ERROR)
    assert payload[8:] == b"internal error"  # no detail of ours goes to the client
    assert ended
    assert "planted fault in open_stream" in caplog.text

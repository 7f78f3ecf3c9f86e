"""What the server sends on one HTTP/2 connection, under the peer's flow control and frame size.

Data a stream cannot send yet (no credit on the stream or the connection, or the transport's buffer
above its high-water mark) waits in that stream's outbox, with the trailers behind it, and goes out
as WINDOW_UPDATEs arrive or the transport drains, streams in the order they became blocked; a large
payload goes to the transport ``WRITE_BATCH`` bytes at a time, so that the transport's buffer holds
little more than its high-water mark whatever credit the peer gives. While the connection handles
received bytes, writes are corked into one ``transport.write`` (up to ``WRITE_BATCH``). Control frames
(SETTINGS and PING acknowledgements) are refused once the transport holds ``max_write_buffer`` bytes
the peer has not read: a peer that floods them without reading ends its connection.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

from trt.http2.frames import (
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    MAX_WINDOW,
    MIN_MAX_FRAME_SIZE,
    ErrorCode,
    FrameType,
    frame_head,
)
from trt.server.grpc.h2.errors import ConnectionFailure, StreamFailure
from trt.server.grpc.h2.settings import H2Settings
from trt.server.grpc.h2.stream import H2Stream

_DATA, _HEADERS, _CONTINUATION = FrameType.DATA, FrameType.HEADERS, FrameType.CONTINUATION
_RST, _WINDOW = FrameType.RST_STREAM, FrameType.WINDOW_UPDATE
_U32 = struct.Struct(">I")
WRITE_BATCH = 256 << 10  # data handed to the transport at a time while a stream drains


class Outbound:
    def __init__(
        self,
        transport: asyncio.Transport,
        settings: H2Settings,
        on_closed: Callable[[H2Stream, bool], None],
        streams: dict[int, H2Stream],
    ) -> None:
        self.transport = transport
        self._streams = streams  # the connection's open streams
        self.send_window = DEFAULT_WINDOW  # the connection's
        self.initial_send_window = DEFAULT_WINDOW  # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self.initial_receive_window = settings.initial_window_size
        self.peer_max_frame = MIN_MAX_FRAME_SIZE
        self.max_write_buffer = settings.max_write_buffer
        self.paused = False
        self.closed = False  # the connection ended: what is still written is dropped
        self.data_frames = 0  # DATA and HEADERS sends so far (the ping rules reset on them)
        self.blocked: dict[int, H2Stream] = {}
        self._on_closed = on_closed  # (stream, reset_by_us)
        self._cork: list[bytes | memoryview] | None = None
        self._cork_bytes = 0
        self._loop = asyncio.get_running_loop()

    # -- writing ---------------------------------------------------------------------------------

    def cork(self) -> None:
        if self._cork is None:
            self._cork = []
            self._cork_bytes = 0

    def uncork(self) -> None:
        corked, self._cork = self._cork, None
        if corked:
            self._send(corked)

    def _defer(self) -> bool:
        """Cork until the end of this turn of the event loop when other streams are in flight: their
        answers, often due in the same turn, then share one write (one system call)."""
        if len(self._streams) < 2:
            return False
        self._cork = []
        self._cork_bytes = 0
        self._loop.call_soon(self.uncork)
        return True

    def write(self, data: bytes) -> None:
        if self._cork is not None or self._defer():
            assert self._cork is not None
            self._cork.append(data)
            self._cork_bytes += len(data)
        elif not self.closed:
            self.transport.write(data)

    def _write_all(self, parts: list[bytes | memoryview]) -> None:
        if self._cork is None:
            self._defer()
        corked = self._cork
        if corked is not None:
            corked.extend(parts)
            self._cork_bytes += sum(len(part) for part in parts)
            if self._cork_bytes < WRITE_BATCH:
                return
            # Enough to write now, in order, so that the transport can say it is full (pause_writing).
            self._cork, self._cork_bytes = [], 0
            parts = corked
        self._send(parts)

    def _send(self, parts: list[bytes | memoryview]) -> None:
        if self.closed:
            return
        if len(parts) > 8 or any(len(part) > 65536 for part in parts):
            self.transport.writelines(parts)  # large payloads: no joined copy
        else:
            self.transport.write(b"".join(parts))

    def control(self, data: bytes) -> None:
        """A frame the peer's own frames made us owe it (acknowledgements)."""
        if self.transport.get_write_buffer_size() > self.max_write_buffer:
            raise ConnectionFailure(ErrorCode.ENHANCE_YOUR_CALM, "control frames pile up unread by the peer")
        self.write(data)

    # -- headers, data, trailers ---------------------------------------------------------------------

    def _header_frames(self, stream_id: int, block: bytes, end_stream: bool) -> list[bytes | memoryview]:
        flags = END_STREAM if end_stream else 0
        limit = self.peer_max_frame
        if len(block) <= limit:
            return [frame_head(len(block), _HEADERS, flags | END_HEADERS, stream_id), block]
        parts: list[bytes | memoryview] = []
        view = memoryview(block)
        kind = _HEADERS
        while view:
            piece, view = view[:limit], view[limit:]
            last = END_HEADERS if not view else 0
            parts += [
                frame_head(len(piece), kind, (flags if kind == _HEADERS else 0) | last, stream_id),
                piece,
            ]
            kind = _CONTINUATION
        return parts

    def send_headers(self, stream: H2Stream, block: bytes, end_stream: bool) -> None:
        if stream.local_closed or stream.closed:
            return
        self.data_frames += 1
        self._write_all(self._header_frames(stream.id, block, end_stream))
        if end_stream:
            self._ended(stream)

    def send_data(self, stream: H2Stream, data: bytes | memoryview, end_stream: bool) -> None:
        if stream.local_closed or stream.closed:
            return
        view = data if isinstance(data, memoryview) else memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        size = len(view)
        if (
            not stream.outbox
            and not self.paused
            and size <= self.peer_max_frame
            and size <= self.send_window
            and size <= stream.send_window
        ):
            self.send_window -= size
            stream.send_window -= size
            self.data_frames += 1
            self._write_all([frame_head(size, _DATA, END_STREAM if end_stream else 0, stream.id), view])
            if end_stream:
                self._ended(stream)
            return
        stream.outbox.append(view)
        stream.outbox_bytes += size
        if end_stream:
            stream.outbox_end = True
            stream.local_closed = True
        self._drain(stream)

    def send_trailers(self, stream: H2Stream, block: bytes) -> None:
        if stream.local_closed or stream.closed:
            return
        if stream.outbox:
            stream.outbox_trailers = block
            stream.local_closed = True
            return
        self.send_headers(stream, block, end_stream=True)

    def send_response(self, stream: H2Stream, head: bytes, body: bytes, trailers: bytes) -> None:
        size = len(body)
        limit = self.peer_max_frame
        if (
            not stream.outbox
            and not self.paused
            and size <= limit
            and size <= self.send_window
            and size <= stream.send_window
            and len(head) <= limit
            and len(trailers) <= limit
            and not stream.local_closed
            and not stream.closed
        ):
            self.send_window -= size
            stream.send_window -= size
            self.data_frames += 1
            sid = stream.id
            frames = (
                frame_head(len(head), _HEADERS, END_HEADERS, sid), head,
                frame_head(size, _DATA, 0, sid), body,
                frame_head(len(trailers), _HEADERS, END_HEADERS | END_STREAM, sid), trailers,
            )  # fmt: skip
            self.write(b"".join(frames))
            self._ended(stream)
            return
        self.send_headers(stream, head, end_stream=False)
        self.send_data(stream, body, end_stream=False)
        self.send_trailers(stream, trailers)

    def reset(self, stream: H2Stream, code: int) -> None:
        if stream.closed:
            return
        self.write(frame_head(4, _RST, 0, stream.id) + _U32.pack(code))
        self._close(stream, True)

    def _ended(self, stream: H2Stream) -> None:
        """END_STREAM went out: the stream closes, now or (the peer still sending) with NO_ERROR."""
        stream.local_closed = True
        if stream.remote_closed:
            self._close(stream, False)
        else:
            self.reset(stream, ErrorCode.NO_ERROR)

    def _close(self, stream: H2Stream, reset: bool) -> None:
        stream.closed = True
        stream.outbox.clear()
        stream.outbox_bytes = 0
        self.blocked.pop(stream.id, None)
        self._on_closed(stream, reset)

    # -- flow control ------------------------------------------------------------------------------

    def _drain(self, stream: H2Stream) -> None:
        """Send what credit allows from the stream's outbox; the trailers once it is empty."""
        parts: list[bytes | memoryview] = []
        batch = 0
        wrote = False
        outbox = stream.outbox
        while outbox and not self.paused:
            view = outbox[0]
            size = min(len(view), self.peer_max_frame, self.send_window, stream.send_window)
            if size <= 0 and view:
                break
            if size == len(view):
                outbox.popleft()
            else:
                outbox[0] = view[size:]
                view = view[:size]
            self.send_window -= size
            stream.send_window -= size
            stream.outbox_bytes -= size
            end = END_STREAM if stream.outbox_end and not outbox and stream.outbox_trailers is None else 0
            parts += [frame_head(size, _DATA, end, stream.id), view]
            batch += size
            if batch >= WRITE_BATCH:  # write it: the transport may pause us (its buffer is full)
                self.data_frames += 1
                self._write_all(parts)
                parts, batch = [], 0
                wrote = True
        if parts:
            self.data_frames += 1
            self._write_all(parts)
            wrote = True
        if wrote:  # even when the last batch emptied the outbox: no later drain would say so
            stream.on_drained()
        if outbox:
            self.blocked[stream.id] = stream
            return
        self.blocked.pop(stream.id, None)
        if stream.outbox_trailers is not None:
            block, stream.outbox_trailers = stream.outbox_trailers, None
            stream.local_closed = False
            self.send_headers(stream, block, end_stream=True)
        elif stream.outbox_end and not stream.closed:
            self._ended(stream)

    def flush_blocked(self) -> None:
        for stream in list(self.blocked.values()):
            if self.paused or self.send_window <= 0:
                return
            self._drain(stream)

    def connection_credit(self, increment: int) -> None:
        self.send_window += increment
        if self.send_window > MAX_WINDOW:
            raise ConnectionFailure(ErrorCode.FLOW_CONTROL_ERROR, "the connection window passed 2^31-1")
        self.flush_blocked()

    def stream_credit(self, stream: H2Stream, increment: int) -> None:
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            raise StreamFailure(ErrorCode.FLOW_CONTROL_ERROR, "the stream window passed 2^31-1")
        if stream.outbox:
            self._drain(stream)

    def initial_window(self, value: int, streams: list[H2Stream]) -> None:
        """The peer's SETTINGS_INITIAL_WINDOW_SIZE changed: every open stream's window moves with it.
        What the larger windows let out is sent by the caller once the SETTINGS are acknowledged
        (``flush_blocked``): grpc-core checks DATA against the settings it has seen acknowledged, and
        reset the stream (PROTOCOL_ERROR) when the data came first."""
        delta = value - self.initial_send_window
        self.initial_send_window = value
        for stream in streams:
            stream.send_window += delta
            if stream.send_window > MAX_WINDOW:
                raise ConnectionFailure(ErrorCode.FLOW_CONTROL_ERROR, "a stream window passed 2^31-1")

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self.flush_blocked()

    # -- credit we give ------------------------------------------------------------------------------

    def credit_stream(self, stream: H2Stream, increment: int) -> None:
        if not stream.closed and not stream.remote_closed:
            stream.receive_window += increment
            self.write(frame_head(4, _WINDOW, 0, stream.id) + _U32.pack(increment))

    def credit_connection(self, increment: int) -> None:
        self.write(frame_head(4, _WINDOW, 0, 0) + _U32.pack(increment))

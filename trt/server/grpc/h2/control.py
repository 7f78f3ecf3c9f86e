"""The frames of an HTTP/2 connection that are not a request's: WINDOW_UPDATE, PING, SETTINGS,
RST_STREAM, PRIORITY, GOAWAY, PUSH_PROMISE; and the connection's memory of its streams (which closed,
which we reset, how many resets it has spent).

A mixin of ``H2ServerConnection``: the attributes below are the connection's.
"""

from __future__ import annotations

import asyncio
import struct

from trt.http2.frames import (
    ACK,
    MAX_MAX_FRAME_SIZE,
    MAX_WINDOW,
    MIN_MAX_FRAME_SIZE,
    ErrorCode,
    FrameType,
    Setting,
    frame_head,
)
from trt.server.grpc.h2.errors import ConnectionFailure, StreamFailure
from trt.server.grpc.h2.keepalive import Pinger, PingPolicy
from trt.server.grpc.h2.outbound import Outbound
from trt.server.grpc.h2.settings import H2Settings
from trt.server.grpc.h2.stream import H2Stream

_U32 = struct.Struct(">I")
_CLOSED_REMEMBERED = 1024


_RST, _PRIORITY, _SETTINGS = FrameType.RST_STREAM, FrameType.PRIORITY, FrameType.SETTINGS
_PUSH, _PING, _GOAWAY, _WINDOW = (
    FrameType.PUSH_PROMISE,
    FrameType.PING,
    FrameType.GOAWAY,
    FrameType.WINDOW_UPDATE,
)


class ControlFrames:
    out: Outbound
    streams: dict[int, H2Stream]
    _settings: H2Settings
    _loop: asyncio.AbstractEventLoop
    _transport: asyncio.Transport | None
    _closed: dict[int, bool]  # recently closed stream -> whether we reset it
    _last_stream_id: int
    _reset_tokens: float
    _reset_clock: float
    _goaway_sent: bool
    _ping_policy: PingPolicy
    _pinger: Pinger | None

    def shutdown(self) -> None:
        raise NotImplementedError

    def close_after_goaway(self) -> None:
        raise NotImplementedError

    def _stream_closed(self, stream: H2Stream, reset: bool) -> None:
        self.streams.pop(stream.id, None)
        self._remember_closed(stream.id, reset)
        if self._goaway_sent and not self.streams:
            self.close_after_goaway()

    def _remember_closed(self, stream_id: int, reset: bool) -> None:
        closed = self._closed
        closed[stream_id] = reset
        if len(closed) > _CLOSED_REMEMBERED:
            del closed[next(iter(closed))]

    def _spend_reset(self) -> None:
        """A stream ended by a reset: beyond the burst allowance, a rapid-reset flood."""
        settings = self._settings
        now = self._loop.time()
        self._reset_tokens = min(
            settings.reset_burst, self._reset_tokens + (now - self._reset_clock) * settings.resets_per_second
        )
        self._reset_clock = now
        self._reset_tokens -= 1
        if self._reset_tokens < 0:
            raise ConnectionFailure(ErrorCode.ENHANCE_YOUR_CALM, "too many streams reset")

    def _reset_unknown(self, stream_id: int, code: ErrorCode) -> None:
        """A stream error on a stream that has no object (refused, malformed, closed)."""
        self.out.write(frame_head(4, _RST, 0, stream_id) + _U32.pack(code))
        self._remember_closed(stream_id, True)
        self._spend_reset()

    def _control(self, data: bytes, start: int, length: int, kind: int, flags: int, stream_id: int) -> None:
        if kind == _WINDOW:
            self._window_update(data, start, length, stream_id)
        elif kind == _PING:
            self._ping(data, start, length, flags, stream_id)
        elif kind == _SETTINGS:
            self._apply_settings(data, start, length, flags, stream_id)
        elif kind == _RST:
            self._rst_stream(data, start, length, stream_id)
        elif kind == _PRIORITY:
            if stream_id == 0:
                raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0")
            if length != 5:
                raise StreamFailure(ErrorCode.FRAME_SIZE_ERROR, "PRIORITY of a size other than 5")
            if _U32.unpack_from(data, start)[0] & 0x7FFFFFFF == stream_id:
                raise StreamFailure(ErrorCode.PROTOCOL_ERROR, "a stream that depends on itself")
        elif kind == _GOAWAY:
            if stream_id != 0:
                raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream")
            if length < 8:
                raise ConnectionFailure(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")
            self.shutdown()  # the client leaves: finish what it started, then close
        elif kind == _PUSH:
            raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE from a client")

    def _window_update(self, data: bytes, start: int, length: int, stream_id: int) -> None:
        if length != 4:
            raise ConnectionFailure(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE of a size other than 4")
        increment = _U32.unpack_from(data, start)[0] & 0x7FFFFFFF
        if stream_id == 0:
            if increment == 0:
                raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.out.connection_credit(increment)
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id > self._last_stream_id:
                raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
            return  # closed: updates may cross our RST_STREAM or END_STREAM
        if increment == 0:
            raise StreamFailure(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
        self.out.stream_credit(stream, increment)

    def _ping(self, data: bytes, start: int, length: int, flags: int, stream_id: int) -> None:
        if stream_id != 0:
            raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "PING on a stream")
        if length != 8:
            raise ConnectionFailure(ErrorCode.FRAME_SIZE_ERROR, "PING of a size other than 8")
        opaque = data[start : start + 8]
        if flags & ACK:
            if self._pinger is not None:
                self._pinger.acknowledged(opaque)
            return
        if self._ping_policy.too_many(self._loop.time(), len(self.streams), self.out.data_frames):
            raise ConnectionFailure(ErrorCode.ENHANCE_YOUR_CALM, "too_many_pings")
        self.out.control(frame_head(8, _PING, ACK, 0) + opaque)

    def _apply_settings(self, data: bytes, start: int, length: int, flags: int, stream_id: int) -> None:
        if stream_id != 0:
            raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if length:
                raise ConnectionFailure(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if length % 6:
            raise ConnectionFailure(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes")
        out = self.out
        for offset in range(start, start + length, 6):
            key, value = struct.unpack_from(">HI", data, offset)
            if key == Setting.ENABLE_PUSH and value > 1:
                raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH other than 0 or 1")
            if key == Setting.INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ConnectionFailure(ErrorCode.FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE")
                out.initial_window(value, list(self.streams.values()))
            elif key == Setting.MAX_FRAME_SIZE:
                if not MIN_MAX_FRAME_SIZE <= value <= MAX_MAX_FRAME_SIZE:
                    raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range")
                out.peer_max_frame = value
        out.control(frame_head(0, _SETTINGS, ACK, 0))
        out.flush_blocked()  # after the ACK (see Outbound.initial_window)

    def _rst_stream(self, data: bytes, start: int, length: int, stream_id: int) -> None:
        if stream_id == 0:
            raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if length != 4:
            raise ConnectionFailure(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM of a size other than 4")
        if stream_id > self._last_stream_id:
            raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return
        code = _U32.unpack_from(data, start)[0]
        stream.closed = True
        stream.outbox.clear()
        self.out.blocked.pop(stream_id, None)
        self._remember_closed(stream_id, False)
        self._spend_reset()
        stream.on_reset(code)
        if self._goaway_sent and not self.streams:
            self.close_after_goaway()

"""One HTTP/2 server connection (RFC 9113) on asyncio: the frames a client sends, checked and acted on.

It keeps the rules a server facing the network must: the preface and a SETTINGS frame first; frame
sizes; stream identifiers (odd, increasing; idle and closed streams told apart); stream states
(data after END_STREAM, trailers without END_STREAM); header blocks continued only by CONTINUATION
frames of the same stream, bounded in bytes and frames; HPACK errors end the connection; malformed
requests (``request_head``) reset their stream; flow control both ways (``outbound``); PING, SETTINGS
and GOAWAY; MAX_CONCURRENT_STREAMS (streams beyond it are refused). Floods end the connection with
ENHANCE_YOUR_CALM: rapid resets, empty DATA frames, control frames the client never reads, PINGs
closer than the keepalive rules allow (``keepalive``).

The application sees only streams: ``StreamOpener.open_stream`` (``stream``) makes one per request
(a subclass of ``H2Stream``), whose callbacks get its data, trailers and reset. A fault of ours on a
client's frames ends that connection alone, with GOAWAY INTERNAL_ERROR.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import cast

from trt.http2.frames import (
    ACK,
    END_HEADERS,
    END_STREAM,
    PADDED,
    PREFACE,
    PRIORITY_FLAG,
    ErrorCode,
    FrameType,
    Setting,
    frame_head,
    settings_payload,
)
from trt.http2.hpack import HeaderListTooLarge, HpackDecoder, HpackError
from trt.server.grpc.h2.control import ControlFrames
from trt.server.grpc.h2.errors import ConnectionFailure, StreamFailure
from trt.server.grpc.h2.keepalive import Pinger, PingPolicy
from trt.server.grpc.h2.outbound import Outbound
from trt.server.grpc.h2.request_head import MalformedRequest, RequestHead, check_trailers, request_head
from trt.server.grpc.h2.settings import H2Settings, KeepaliveOptions
from trt.server.grpc.h2.stream import H2Stream, StreamOpener

logger = logging.getLogger("trt.grpc")

_HEAD = struct.Struct(">BHBBI")  # length (24 bits as 8 + 16), type, flags, stream id
_U32 = struct.Struct(">I")
_DATA, _HEADERS, _PRIORITY, _RST = FrameType.DATA, FrameType.HEADERS, FrameType.PRIORITY, FrameType.RST_STREAM
_SETTINGS, _PUSH, _PING, _GOAWAY = (
    FrameType.SETTINGS,
    FrameType.PUSH_PROMISE,
    FrameType.PING,
    FrameType.GOAWAY,
)
_WINDOW, _CONTINUATION = FrameType.WINDOW_UPDATE, FrameType.CONTINUATION
_EMPTY = memoryview(b"")
_CACHED_BLOCK_BYTES = 1024
LINGER_S = 1.0  # after a GOAWAY, how long the client's last bytes are read and dropped
_CACHED_BLOCKS = 64


class H2ServerConnection(ControlFrames, asyncio.Protocol):
    def __init__(
        self,
        opener: StreamOpener,
        settings: H2Settings,
        keepalive: KeepaliveOptions,
        registry: set[H2ServerConnection],
    ) -> None:
        self._opener = opener
        self._settings = settings
        self._keepalive = keepalive
        self._registry = registry  # the open connections of the endpoint (for its graceful stop)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self.out: Outbound
        self.streams: dict[int, H2Stream] = {}
        self._closed: dict[int, bool] = {}  # recently closed stream -> whether we reset it
        self._last_stream_id = 0
        self._decoder = HpackDecoder(settings.header_table_size, settings.max_header_list_size)
        self._heads: dict[bytes, tuple[int, RequestHead]] = {}
        self._parts: list[bytes] = []  # a partly received frame (or preface)
        self._parts_size = 0
        self._needed = len(PREFACE)
        self._preface_seen = False
        self._settings_seen = False
        self._block: list[bytes] | None = None  # a header block waiting for CONTINUATION frames
        self._block_timer: asyncio.TimerHandle | None = None  # its deadline (header_block_timeout_s)
        self._block_stream = self._block_flags = self._block_frames = self._block_size = 0
        self._block_self_dependent = False
        self._receive_window = settings.connection_window_size
        self._unacknowledged = 0
        self._stream_refill = settings.initial_window_size // 2
        self._reset_tokens = float(settings.reset_burst)
        self._reset_clock = self._loop.time()
        self._empty_frames = 0
        self._goaway_sent = False
        self._failed = False
        self._ping_policy = PingPolicy(keepalive)
        self._pinger: Pinger | None = None
        self._timers: list[asyncio.TimerHandle] = []

    # -- connection --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self._transport = transport
        self._registry.add(self)  # here, not when made: a failed TLS handshake never gets this far
        ssl_object = transport.get_extra_info("ssl_object")
        self.out = Outbound(transport, self._settings, self._stream_closed, self.streams)
        if ssl_object is not None and ssl_object.selected_alpn_protocol() != "h2":
            logger.debug("TLS client did not negotiate h2 (ALPN): closing")
            transport.close()
            return
        settings = self._settings
        ours = settings_payload(
            {
                Setting.ENABLE_PUSH: 0,
                Setting.MAX_CONCURRENT_STREAMS: settings.max_concurrent_streams,
                Setting.INITIAL_WINDOW_SIZE: settings.initial_window_size,
                Setting.MAX_FRAME_SIZE: settings.max_frame_size,
                Setting.MAX_HEADER_LIST_SIZE: settings.max_header_list_size,
            }
        )
        hello = frame_head(len(ours), _SETTINGS, 0, 0) + ours
        extra = settings.connection_window_size - 65535
        if extra > 0:
            hello += frame_head(4, _WINDOW, 0, 0) + _U32.pack(extra)
        transport.write(hello)
        self._timers.append(self._loop.call_later(settings.preface_timeout_s, self._preface_timeout))
        keepalive = self._keepalive
        self._pinger = Pinger(
            keepalive,
            self._send_ping,
            self._ping_timeout,
            lambda: len(self.streams),
            lambda: self.out.data_frames,
        )
        self._pinger.start()
        if keepalive.max_connection_age_ms:
            self._timers.append(self._loop.call_later(keepalive.max_connection_age_ms / 1000, self._too_old))

    def connection_lost(self, exc: Exception | None) -> None:
        self._failed = True
        self.out.closed = True
        for timer in self._timers:
            timer.cancel()
        if self._pinger is not None:
            self._pinger.stop()
        self._cancel_streams()
        self._registry.discard(self)

    def _cancel_streams(self) -> None:
        """The client can no longer read what its open calls would answer: they are cancelled."""
        streams, self.streams = list(self.streams.values()), {}
        for stream in streams:
            stream.closed = True
            stream.on_reset(ErrorCode.CANCEL)

    def pause_writing(self) -> None:
        self.out.pause()

    def resume_writing(self) -> None:
        try:
            self.out.resume()
        except ConnectionFailure as failure:
            self.fail(failure.code, failure.message)

    def eof_received(self) -> bool | None:
        if self._failed and self._transport is not None:
            self._transport.close()  # the client saw our GOAWAY and closed its side
        return False

    def _preface_timeout(self) -> None:
        if not self._settings_seen:
            self.fail(ErrorCode.SETTINGS_TIMEOUT, "no preface and SETTINGS in time")

    def _too_old(self) -> None:
        """--grpc-max-connection-age: GOAWAY, then (after the grace period, if set) close."""
        self.shutdown()
        grace = self._keepalive.max_connection_age_grace_ms
        if grace:
            self._timers.append(self._loop.call_later(grace / 1000, self.abort))

    def _send_ping(self, opaque: bytes) -> None:
        self.out.write(frame_head(8, _PING, 0, 0) + opaque)

    def _ping_timeout(self) -> None:
        logger.debug("keepalive PING not acknowledged in time: closing the connection")
        self.abort()

    # -- ending ------------------------------------------------------------------------------------

    def fail(self, code: ErrorCode, message: str) -> None:
        """A connection error: GOAWAY with the code, then close."""
        if self._failed or self._transport is None:
            return
        self._failed = True
        logger.debug("HTTP/2 connection error %s: %s", code.name, message)
        debug = message.encode("utf-8", "replace")[:256]
        goaway = frame_head(8 + len(debug), _GOAWAY, 0, 0) + struct.pack(">II", self._last_stream_id, code)
        self.out.write(goaway + debug)
        self.close_after_goaway()
        self._cancel_streams()

    def close_after_goaway(self) -> None:
        """Close so that the client reads our GOAWAY: stop writing, take (and drop) what it still sends
        for a moment, then close. Closing at once with its bytes unread would reset the connection,
        and the reset can overtake the GOAWAY."""
        transport = self._transport
        if transport is None:
            return
        if transport.is_closing():
            self.out.closed = True
            return
        self.out.uncork()
        self._failed = True  # nothing more is read
        self.out.closed = True  # nor written (by calls still running): the transport would raise
        if transport.can_write_eof():
            transport.write_eof()
            self._timers.append(self._loop.call_later(LINGER_S, transport.close))
        else:
            transport.close()

    def shutdown(self) -> None:
        """Graceful: GOAWAY naming the last stream taken; the connection closes once those finish."""
        if self._goaway_sent or self._failed or self._transport is None:
            return
        self._goaway_sent = True
        self.out.write(frame_head(8, _GOAWAY, 0, 0) + struct.pack(">II", self._last_stream_id, 0))
        if not self.streams:
            self.close_after_goaway()

    def abort(self) -> None:
        if self._transport is not None:
            self.out.closed = True
            self._transport.abort()

    # -- receiving ---------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._failed:
            return
        if self._parts:
            self._parts.append(data)
            self._parts_size += len(data)
            if self._parts_size < self._needed:
                return
            data = b"".join(self._parts)
            self._parts.clear()
        out = self.out
        out.cork()
        try:
            at = self._frames(data)
        except ConnectionFailure as failure:
            self.fail(failure.code, failure.message)
            return
        except Exception:  # a fault of ours on this client's frames: its connection alone ends, told why
            logger.exception("an HTTP/2 connection failed on the frames it was sent; closing it")
            self.fail(ErrorCode.INTERNAL_ERROR, "internal error")
            return
        finally:
            out.uncork()
        if at < len(data):
            rest = data[at:]
            self._parts = [rest]
            self._parts_size = len(rest)
            if not self._preface_seen:
                self._needed = len(PREFACE)
            elif len(rest) >= 9:
                self._needed = 9 + ((rest[0] << 16) | (rest[1] << 8) | rest[2])
            else:
                self._needed = 9

    def _frames(self, data: bytes) -> int:
        at, end = 0, len(data)
        if not self._preface_seen:
            if end < len(PREFACE):
                if not PREFACE.startswith(data):
                    raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "not the HTTP/2 client preface")
                return 0
            if not data.startswith(PREFACE):
                raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "not the HTTP/2 client preface")
            self._preface_seen = True
            at = len(PREFACE)
        view = memoryview(data)
        max_frame = self._settings.max_frame_size
        while end - at >= 9:
            high, low, kind, flags, stream_id = _HEAD.unpack_from(data, at)
            length = (high << 16) | low
            if length > max_frame:
                raise ConnectionFailure(ErrorCode.FRAME_SIZE_ERROR, f"a frame of {length} bytes")
            start = at + 9
            if start + length > end:
                break
            at = start + length
            stream_id &= 0x7FFFFFFF
            if not self._settings_seen:
                if kind != _SETTINGS or flags & ACK:
                    raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "the first frame must be SETTINGS")
                self._settings_seen = True
            if self._block is not None and kind != _CONTINUATION:
                raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "a header block left unfinished")
            try:
                if kind == _DATA:
                    self._data(view, start, length, flags, stream_id)
                elif kind == _HEADERS:
                    self._headers(data, start, length, flags, stream_id)
                elif kind == _CONTINUATION:
                    self._continuation(data, start, length, flags, stream_id)
                elif kind <= _CONTINUATION:
                    self._control(data, start, length, kind, flags, stream_id)
                # frames of unknown types are ignored (RFC 9113 4.1)
            except StreamFailure as failure:
                self._stream_error(stream_id, failure)
            if self._failed:
                return end
        return at

    def _stream_error(self, stream_id: int, failure: StreamFailure) -> None:
        logger.debug("HTTP/2 stream %d error %s: %s", stream_id, failure.code.name, failure.message)
        stream = self.streams.get(stream_id)
        if stream is None:
            self._reset_unknown(stream_id, failure.code)
            return
        self.out.reset(stream, failure.code)
        stream.on_reset(failure.code)
        self._spend_reset()

    def _data(self, view: memoryview, start: int, length: int, flags: int, stream_id: int) -> None:
        if stream_id == 0:
            raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")
        self._receive_window -= length
        if self._receive_window < 0:
            raise ConnectionFailure(ErrorCode.FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        self._unacknowledged += length
        if self._unacknowledged >= self._settings.connection_window_size // 2:
            self.out.credit_connection(self._unacknowledged)
            self._receive_window += self._unacknowledged
            self._unacknowledged = 0
        payload_start, payload_end = start, start + length
        if flags & PADDED:
            if length == 0 or view[start] >= length:
                raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "DATA padding as long as the frame")
            payload_start, payload_end = start + 1, start + length - view[start]
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id > self._last_stream_id:
                raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            if self._closed.get(stream_id):
                return  # we reset it: frames already in flight are dropped
            raise StreamFailure(ErrorCode.STREAM_CLOSED, f"DATA on closed stream {stream_id}")
        if stream.remote_closed:
            raise StreamFailure(ErrorCode.STREAM_CLOSED, "DATA after END_STREAM")
        stream.receive_window -= length
        if stream.receive_window < 0:
            raise StreamFailure(ErrorCode.FLOW_CONTROL_ERROR, "DATA beyond the stream window")
        end_stream = bool(flags & END_STREAM)
        size = payload_end - payload_start
        if size == 0 and not end_stream:
            self._empty_frames += 1
            if self._empty_frames > self._settings.max_empty_frames:
                raise ConnectionFailure(ErrorCode.ENHANCE_YOUR_CALM, "too many empty DATA frames")
        if stream.content_length is not None:
            stream.received_bytes += size
            if stream.received_bytes > stream.content_length or (
                end_stream and stream.received_bytes != stream.content_length
            ):
                raise StreamFailure(ErrorCode.PROTOCOL_ERROR, "DATA disagrees with content-length")
        if end_stream:
            stream.remote_closed = True
        elif stream.credit_held:
            stream.held_bytes += length
        else:
            stream.unacknowledged += length
            if stream.unacknowledged >= self._stream_refill:
                self.out.credit_stream(stream, stream.unacknowledged)
                stream.unacknowledged = 0
        stream.on_data(view[payload_start:payload_end] if size else _EMPTY, end_stream)

    def _headers(self, data: bytes, start: int, length: int, flags: int, stream_id: int) -> None:
        if stream_id == 0 or stream_id % 2 == 0:
            raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        position, end = start, start + length
        if flags & PADDED:
            if length == 0:
                raise ConnectionFailure(ErrorCode.FRAME_SIZE_ERROR, "padded HEADERS without a pad length")
            end -= data[start]
            position += 1
        self_dependent = False
        if flags & PRIORITY_FLAG:
            if position + 5 > end:
                raise ConnectionFailure(ErrorCode.FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            self_dependent = _U32.unpack_from(data, position)[0] & 0x7FFFFFFF == stream_id
            position += 5
        if position > end:
            raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "HEADERS padding longer than the frame")
        fragment = data[position:end]
        if flags & END_HEADERS:
            self._header_block(stream_id, flags, fragment, self_dependent)
            return
        self._block = [fragment]
        message = "a header block not ended in time"
        timeout = self._settings.header_block_timeout_s
        self._block_timer = self._loop.call_later(timeout, self.fail, ErrorCode.ENHANCE_YOUR_CALM, message)
        self._block_stream, self._block_flags, self._block_frames = stream_id, flags, 1
        self._block_size = len(fragment)
        self._block_self_dependent = self_dependent
        self._check_block_size()

    def _continuation(self, data: bytes, start: int, length: int, flags: int, stream_id: int) -> None:
        if self._block is None or stream_id != self._block_stream:
            raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without a header block open")
        self._block.append(data[start : start + length])
        self._block_frames += 1
        self._block_size += length
        self._check_block_size()
        if flags & END_HEADERS:
            block, self._block = b"".join(self._block), None
            if self._block_timer is not None:
                self._block_timer.cancel()
            self._header_block(self._block_stream, self._block_flags, block, self._block_self_dependent)

    def _check_block_size(self) -> None:
        settings = self._settings
        if self._block_size > settings.max_header_list_size + 1024:
            raise ConnectionFailure(ErrorCode.ENHANCE_YOUR_CALM, "a header block over the size limit")
        if self._block_frames > settings.max_header_block_frames:
            raise ConnectionFailure(ErrorCode.ENHANCE_YOUR_CALM, "a header block in too many frames")

    def _decode(self, block: bytes) -> list[tuple[str, str]]:
        try:
            return self._decoder.decode(block)
        except HpackError as error:
            raise ConnectionFailure(ErrorCode.COMPRESSION_ERROR, str(error)) from None

    def _head(self, block: bytes) -> RequestHead:
        """The validated head of a request; a small block that left the table unchanged is remembered."""
        decoder = self._decoder
        known = self._heads.get(block)
        if known is not None and known[0] == decoder.generation:
            return known[1]
        generation = decoder.generation
        head = request_head(self._decode(block))
        if decoder.generation == generation and len(block) <= _CACHED_BLOCK_BYTES:
            if len(self._heads) >= _CACHED_BLOCKS:
                self._heads.clear()
            self._heads[block] = (generation, head)
        return head

    def _header_block(self, stream_id: int, flags: int, block: bytes, self_dependent: bool) -> None:
        end_stream = bool(flags & END_STREAM)
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers
            try:
                fields = self._decode(block)
            except HeaderListTooLarge:
                raise StreamFailure(ErrorCode.PROTOCOL_ERROR, "trailers over the size limit") from None
            if stream.remote_closed:
                raise StreamFailure(ErrorCode.STREAM_CLOSED, "HEADERS after END_STREAM")
            if not end_stream:
                raise StreamFailure(ErrorCode.PROTOCOL_ERROR, "trailers without END_STREAM")
            try:
                check_trailers(fields)
            except MalformedRequest as error:
                raise StreamFailure(ErrorCode.PROTOCOL_ERROR, str(error)) from None
            if stream.content_length is not None and stream.received_bytes != stream.content_length:
                raise StreamFailure(ErrorCode.PROTOCOL_ERROR, "DATA disagrees with content-length")
            stream.remote_closed = True
            stream.on_trailers(fields)
            return
        if stream_id <= self._last_stream_id:
            if stream_id in self._closed:
                raise ConnectionFailure(ErrorCode.STREAM_CLOSED, f"HEADERS on closed stream {stream_id}")
            raise ConnectionFailure(ErrorCode.PROTOCOL_ERROR, f"stream {stream_id} is not above the last")
        self._last_stream_id = stream_id
        try:
            head = self._head(block)
        except HeaderListTooLarge as error:
            self._opener.refuse_headers(self.out, stream_id, str(error))
            self._remember_closed(stream_id, True)
            return
        except MalformedRequest as error:
            raise StreamFailure(ErrorCode.PROTOCOL_ERROR, str(error)) from None
        if self_dependent:
            raise StreamFailure(ErrorCode.PROTOCOL_ERROR, "a stream that depends on itself")
        if self._goaway_sent:
            return  # after our GOAWAY, new streams are not processed (the client retries them)
        if len(self.streams) >= self._settings.max_concurrent_streams:
            raise StreamFailure(ErrorCode.REFUSED_STREAM, "too many concurrent streams")
        if end_stream and head.content_length:
            raise StreamFailure(ErrorCode.PROTOCOL_ERROR, "END_STREAM before content-length bytes")
        stream = self._opener.open_stream(self.out, stream_id)
        stream.content_length = head.content_length
        self.streams[stream_id] = stream
        stream.remote_closed = end_stream
        stream.on_open(head, end_stream)

"""A raw HTTP/2 client for conformance cases: it writes frames exactly as a test says, right or wrong,
and reads back what the server sends, frame by frame (header blocks decoded with HPACK)."""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

from trt.http2.frames import ACK, END_HEADERS, END_STREAM, PREFACE, FrameType, frame_head
from trt.http2.hpack import HpackDecoder, encode_header

SERVICE = "/inference.GRPCInferenceService/"


@dataclass
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes

    @property
    def error_code(self) -> int:
        """GOAWAY's or RST_STREAM's error code."""
        offset = 4 if self.kind == FrameType.GOAWAY else 0
        return int(struct.unpack_from(">I", self.payload, offset)[0])


def written_frames(written: bytes) -> list[Frame]:
    """The frames in bytes a server wrote (to an in-process transport), in order."""
    frames, at = [], 0
    while at < len(written):
        length = int.from_bytes(written[at : at + 3], "big")
        stream = struct.unpack(">I", written[at + 5 : at + 9])[0] & 0x7FFFFFFF
        frames.append(Frame(written[at + 3], written[at + 4], stream, written[at + 9 : at + 9 + length]))
        at += 9 + length
    return frames


def request_block(path: str, *extra: tuple[str, str], method: str = "POST") -> bytes:
    fields = [
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *extra,
    ]
    return b"".join(encode_header(name, value) for name, value in fields)


def frame_bytes(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One whole frame, as bytes."""
    return frame_head(len(payload), kind, flags, stream) + payload


def grpc_message(payload: bytes, compressed: bool = False) -> bytes:
    return struct.pack(">BI", int(compressed), len(payload)) + payload


class H2Peer:
    def __init__(self, address: str, settings: dict[int, int] | None = None, handshake: bool = True) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = HpackDecoder()
        self.buffer = bytearray()
        self.server_settings: dict[int, int] = {}
        self.closed = False
        self.answer_pings = False  # acknowledge the server's keepalive PINGs as they come
        if handshake:
            self.send_raw(PREFACE)
            self.settings(settings or {})
            first = self.frame()
            assert first is not None and first.kind == FrameType.SETTINGS and not first.flags & ACK, first
            for offset in range(0, len(first.payload), 6):
                key, value = struct.unpack_from(">HI", first.payload, offset)
                self.server_settings[key] = value
            self.send(FrameType.SETTINGS, ACK, 0)

    def close(self) -> None:
        self.sock.close()

    # -- out ---------------------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, kind: int, flags: int, stream: int, payload: bytes = b"") -> None:
        self.send_raw(frame_bytes(kind, flags, stream, payload))

    def settings(self, values: dict[int, int]) -> None:
        payload = b"".join(struct.pack(">HI", key, value) for key, value in values.items())
        self.send(FrameType.SETTINGS, 0, 0, payload)

    def headers(self, stream: int, block: bytes, end_stream: bool = False) -> None:
        self.send(FrameType.HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), stream, block)

    def call(self, stream: int, method: str, message: bytes, *extra: tuple[str, str]) -> None:
        """A whole unary call: its headers, then its one message with END_STREAM."""
        self.headers(stream, request_block(SERVICE + method, *extra))
        self.send(FrameType.DATA, END_STREAM, stream, grpc_message(message))

    # -- in ----------------------------------------------------------------------------------------

    def frame(self, timeout: float = 10) -> Frame | None:
        """The next frame, or None once the server closed the connection."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) >= 9 + length:
                    head, payload = bytes(self.buffer[:9]), bytes(self.buffer[9 : 9 + length])
                    del self.buffer[: 9 + length]
                    stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
                    if self.answer_pings and head[3] == FrameType.PING and not head[4] & ACK:
                        self.send(FrameType.PING, ACK, 0, payload)
                        continue
                    return Frame(head[3], head[4], stream, payload)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame from the server in time")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.closed = True
                return None
            self.buffer += chunk

    def until(self, kinds: set[int], stream: int | None = None, timeout: float = 10) -> Frame | None:
        """The next frame of one of ``kinds`` (on ``stream``, if given); None if the connection closed."""
        while True:
            frame = self.frame(timeout)
            if frame is None:
                return None
            if frame.kind == FrameType.HEADERS:
                frame.payload = self.decode(frame)
            if frame.kind in kinds and (stream is None or frame.stream == stream):
                return frame

    def decode(self, frame: Frame) -> bytes:
        """A HEADERS frame's block, decoded into the table (CONTINUATIONs are not expected here)."""
        self.last_headers = self.decoder.decode(frame.payload)
        return frame.payload

    def connection_error(self, timeout: float = 10) -> int:
        """The GOAWAY's error code; the connection must then close."""
        frame = self.until({FrameType.GOAWAY}, timeout=timeout)
        assert frame is not None, "the server closed without GOAWAY"
        code = frame.error_code
        assert self.until(set(), timeout=timeout) is None, "the connection stayed open after GOAWAY"
        return code

    def stream_error(self, stream: int, timeout: float = 10) -> int:
        """The RST_STREAM's error code on ``stream``."""
        frame = self.until({FrameType.RST_STREAM, FrameType.GOAWAY}, stream=None, timeout=timeout)
        assert frame is not None, "the server closed the connection instead of resetting the stream"
        assert frame.kind == FrameType.RST_STREAM, f"a connection error instead: GOAWAY {frame.error_code}"
        assert frame.stream == stream
        return frame.error_code

    def response(self, stream: int, timeout: float = 10) -> tuple[dict[str, str], bytes, dict[str, str]]:
        """A call's answer: its headers, its DATA bytes and its trailers (empty for trailers-only)."""
        headers: dict[str, str] = {}
        trailers: dict[str, str] = {}
        data = bytearray()
        while True:
            frame = self.until({FrameType.HEADERS, FrameType.DATA, FrameType.RST_STREAM}, stream, timeout)
            assert frame is not None, "the connection closed before the response ended"
            assert frame.kind != FrameType.RST_STREAM, f"stream reset with {frame.error_code}"
            if frame.kind == FrameType.DATA:
                data += frame.payload
            elif not headers:
                headers = dict(self.last_headers)
            else:
                trailers = dict(self.last_headers)
            if frame.flags & END_STREAM:
                return headers, bytes(data), trailers

    def ping_works(self, opaque: bytes = b"12345678") -> bool:
        """The connection still answers: a PING comes back acknowledged."""
        self.send(FrameType.PING, 0, 0, opaque)
        frame = self.until({FrameType.PING})
        return frame is not None and frame.flags & ACK == ACK and frame.payload == opaque

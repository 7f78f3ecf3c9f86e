"""Unary gRPC calls over one HTTP/2 connection, framed by hand: the cheapest client Python can offer.

grpcio spends about 80-120 us of CPU per call in its Python layer; a unary call needs only a HEADERS
frame (constant, encoded once) and a DATA frame out, and the trailers' ``grpc-status`` back (the
response message is not parsed). A reader thread completes calls and runs their callbacks, which
usually send the next request from that same thread: no thread hop, no event loop.

What it does of HTTP/2 (RFC 9113): the preface and SETTINGS (push off, the largest windows, so the
client never has to grant flow-control credit per stream), connection WINDOW_UPDATEs as responses are
read, the server's flow control and frame size on what it sends (requests that do not fit wait for
credit), MAX_CONCURRENT_STREAMS (calls beyond it wait), PING and SETTINGS acknowledgements, RST_STREAM,
GOAWAY (calls the server did not take fail as ``ConnectionLost``, and the next call reconnects), and
HPACK decoding of whatever the server sends (``perf.transport.hpack``). No TLS."""

from __future__ import annotations

import socket
import struct
import threading
from collections import deque
from collections.abc import Callable
from urllib.parse import unquote

import grpc

from trt.perf.transport import ConnectionLost, RequestFailed
from trt.perf.transport.hpack import HpackDecoder, HpackError, encode_literal

OnDone = Callable[[RequestFailed | None], None]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 5, 6, 7, 8, 9
)  # fmt: skip
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
MAX_WINDOW = (1 << 31) - 1
MAX_FRAME = (1 << 24) - 1
MAX_STREAM_ID = (1 << 31) - 1
DEFAULT_WINDOW = 65535
RECV_BYTES = 256 * 1024
WINDOW_REFILL = 1 << 24  # bytes read before the connection window is topped up again
STATUS_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def frame_head(length: int, kind: int, flags: int, stream: int) -> bytes:
    return struct.pack(">IBBI", length, kind, flags, stream)[1:]


def grpc_timeout(seconds: float) -> str:
    """The ``grpc-timeout`` header value: at most 8 digits and a unit."""
    milliseconds = max(1, round(seconds * 1000))
    return f"{milliseconds}m" if milliseconds < 10**8 else f"{min(10**8 - 1, round(seconds))}S"


def grpc_message(data: bytes) -> bytes:
    """A length-prefixed, uncompressed gRPC message."""
    return b"\x00" + struct.pack(">I", len(data)) + data


class _Call:
    __slots__ = ("http_status", "message", "on_done", "pending", "status", "window")

    def __init__(self, on_done: OnDone, pending: memoryview, window: int) -> None:
        self.on_done = on_done
        self.pending = pending  # request bytes not yet sent for lack of flow-control credit
        self.window = window
        self.status: int | None = None
        self.message = ""
        self.http_status = ""


class H2GrpcClient:
    """``call(message, on_done)`` starts one unary call to ``method``; ``on_done(None)`` on grpc-status 0,
    else ``on_done(error)``. Callbacks run on a connection's reader thread (or on the caller's, when no
    connection can be opened) and may start further calls. A connection the server closes or sends
    GOAWAY on is replaced at the next call; its calls in flight finish on it."""

    def __init__(self, host: str, port: int, method: str, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.headers = b"".join(
            encode_literal(name, value)
            for name, value in (
                (":method", "POST"),
                (":scheme", "http"),
                (":path", method),
                (":authority", f"{host}:{port}"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("grpc-timeout", grpc_timeout(timeout)),
            )
        )
        self._lock = threading.Lock()
        self._connection: H2GrpcConnection | None = None
        self._framed: dict[int, tuple[bytes, bytes]] = {}  # id(message) -> (message, framed message)

    def _framed_message(self, message: bytes) -> bytes:
        cached = self._framed.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        framed = grpc_message(message)
        if len(self._framed) >= 64:  # sequence requests are new bytes each time: keep a few only
            self._framed.clear()
        self._framed[id(message)] = (message, framed)
        return framed

    def call(self, message: bytes, on_done: OnDone) -> None:
        body = memoryview(self._framed_message(message))
        connection = self._connection
        if connection is None or not connection.usable:
            with self._lock:
                connection = self._connection
                if connection is None or not connection.usable:
                    try:
                        connection = self._connection = H2GrpcConnection(self)
                    except ConnectionLost as error:
                        on_done(error)
                        return
        connection.call(body, on_done)

    def close(self) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


class H2GrpcConnection:
    """One socket and its reader thread."""

    def __init__(self, client: H2GrpcClient) -> None:
        self.host, self.port, self.timeout = client.host, client.port, client.timeout
        self._headers = client.headers
        self._lock = threading.Lock()  # stream ids must go out in order: allocate and send under it
        self._calls: dict[int, _Call] = {}
        self._blocked: deque[int] = deque()  # calls waiting for flow-control credit
        self._waiting: deque[tuple[memoryview, OnDone]] = deque()  # beyond MAX_CONCURRENT_STREAMS
        self._next_id = 1
        self._send_window = DEFAULT_WINDOW
        self._initial_window = DEFAULT_WINDOW
        self._max_frame = 16384
        self._max_streams = 1 << 31
        self.usable = True  # False once it broke or the server sent GOAWAY
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as error:
            raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: {error}") from error
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        settings = struct.pack(">HIHIHI", 0x2, 0, 0x4, MAX_WINDOW, 0x5, MAX_FRAME)  # no push, windows, frames
        hello = (
            PREFACE
            + frame_head(len(settings), SETTINGS, 0, 0)
            + settings
            + frame_head(4, WINDOW_UPDATE, 0, 0)
            + struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW)
        )
        try:
            sock.sendall(hello)
        except OSError as error:
            sock.close()
            raise ConnectionLost(f"connection to {self.host}:{self.port} failed: {error}") from error
        self._sock = sock
        threading.Thread(target=self._read, name="trt-perf-h2-reader", daemon=True).start()

    def close(self) -> None:
        """Abandon the connection: calls still in flight fail with ConnectionLost."""
        self.usable = False
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- sending ------------------------------------------------------------------------------------

    def call(self, body: memoryview, on_done: OnDone) -> None:
        with self._lock:
            if self._next_id > MAX_STREAM_ID:  # after 2**30 calls: a fresh connection takes over
                self.usable = False
            if not self.usable:
                failed: RequestFailed | None = ConnectionLost("the connection closed under the call")
            elif len(self._calls) >= self._max_streams:
                self._waiting.append((body, on_done))
                return
            else:
                try:
                    self._start(body, on_done, caller_fails_it=True)
                    return
                except RequestFailed as error:
                    failed = error
        on_done(failed)

    def _start(self, body: memoryview, on_done: OnDone, caller_fails_it: bool = False) -> None:
        """Under the lock: a HEADERS frame, then as much of the body as the server's credit allows. If
        the send fails, the caller reports it (``caller_fails_it``) or the reader does, with the rest."""
        assert self._sock is not None
        stream = self._next_id
        self._next_id += 2
        call = _Call(on_done, body, self._initial_window)
        out: list[bytes | memoryview] = [
            frame_head(len(self._headers), HEADERS, END_HEADERS, stream),
            self._headers,
        ]
        self._pump(stream, call, out)
        self._calls[stream] = call
        if call.pending:
            self._blocked.append(stream)
        try:
            self._send(b"".join(out))
        except ConnectionLost:
            if caller_fails_it:
                self._calls.pop(stream, None)
            raise

    def _pump(self, stream: int, call: _Call, out: list[bytes | memoryview]) -> None:
        pending = call.pending
        while pending:
            size = min(len(pending), self._max_frame, self._send_window, call.window)
            if size <= 0:
                break
            last = size == len(pending)
            out.append(frame_head(size, DATA, END_STREAM if last else 0, stream))
            out.append(pending[:size])
            pending = pending[size:]
            self._send_window -= size
            call.window -= size
        call.pending = pending

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as error:
            self.close()
            raise ConnectionLost(f"connection to {self.host}:{self.port} failed: {error}") from error

    def _unblock(self) -> None:
        """Under the lock: credit or a stream slot came back; send what waited for it."""
        out: list[bytes | memoryview] = []
        while self._blocked and self._send_window > 0:
            stream = self._blocked[0]
            call = self._calls.get(stream)
            if call is not None:
                self._pump(stream, call, out)
                if call.pending:
                    break
            self._blocked.popleft()
        if out:
            self._send(b"".join(out))
        while self._waiting and len(self._calls) < self._max_streams:
            self._start(*self._waiting.popleft())

    def _control(self, data: bytes) -> None:
        with self._lock:
            self._send(data)

    # -- receiving (reader thread) -----------------------------------------------------------------

    def _read(self) -> None:
        sock = self._sock
        decoder = HpackDecoder()
        buffer = bytearray()
        block = bytearray()  # a header block continued in CONTINUATION frames
        block_stream = block_flags = 0
        unacknowledged = 0
        try:
            while True:
                try:
                    chunk = sock.recv(RECV_BYTES)
                except TimeoutError:
                    if self._calls:
                        raise RequestFailed(
                            f"gRPC DEADLINE_EXCEEDED: no response within {self.timeout:g}s"
                        ) from None
                    continue
                if not chunk:
                    raise ConnectionLost("the server closed the connection")
                buffer += chunk
                at = 0
                while len(buffer) - at >= 9:
                    length = int.from_bytes(buffer[at : at + 3], "big")
                    if len(buffer) - at - 9 < length:
                        break
                    kind, flags = buffer[at + 3], buffer[at + 4]
                    stream = int.from_bytes(buffer[at + 5 : at + 9], "big") & 0x7FFFFFFF
                    start = at + 9
                    at = start + length
                    if kind == DATA:  # the response message itself: only its size matters
                        unacknowledged += length
                        if unacknowledged >= WINDOW_REFILL:
                            self._control(
                                frame_head(4, WINDOW_UPDATE, 0, 0) + struct.pack(">I", unacknowledged)
                            )
                            unacknowledged = 0
                        if flags & END_STREAM:
                            self._finish(stream, None, None)
                        continue
                    payload = bytes(buffer[start:at])
                    if kind == HEADERS:
                        payload = self._strip(payload, flags)
                        if flags & END_HEADERS:
                            self._headers_received(stream, flags, decoder.decode(payload))
                        else:
                            block, block_stream, block_flags = bytearray(payload), stream, flags
                    elif kind == CONTINUATION:
                        block += payload
                        if flags & END_HEADERS:
                            self._headers_received(block_stream, block_flags, decoder.decode(bytes(block)))
                            block = bytearray()
                    else:
                        self._frame(kind, flags, stream, payload)
                del buffer[:at]
                if not self.usable and not self._calls:
                    break  # GOAWAY and every call taken answered
        except (RequestFailed, OSError) as error:
            failure = error if isinstance(error, RequestFailed) else ConnectionLost(str(error))
            if isinstance(error, HpackError):
                failure = ConnectionLost(str(error))
            self._fail_all(failure)
        else:
            self._fail_all(ConnectionLost("the server closed the connection"))

    @staticmethod
    def _strip(payload: bytes, flags: int) -> bytes:
        if flags & PADDED:
            payload = payload[1 : len(payload) - payload[0]]
        if flags & PRIORITY:
            payload = payload[5:]
        return payload

    def _headers_received(self, stream: int, flags: int, headers: list[tuple[str, str]]) -> None:
        call = self._calls.get(stream)
        if call is None:
            return
        for name, value in headers:
            if name == "grpc-status":
                call.status = int(value) if value.isascii() and value.isdigit() and len(value) < 10 else 2
            elif name == "grpc-message":
                call.message = unquote(value)
            elif name == ":status":
                call.http_status = value
        if flags & END_STREAM:
            self._finish(stream, call.status, call.message)

    def _finish(self, stream: int, status: int | None, message: str | None) -> None:
        call = self._calls.pop(stream, None)
        if call is None:
            return
        if self._blocked or self._waiting:
            try:
                with self._lock:
                    self._unblock()
            except ConnectionLost:
                pass  # the socket is shut: the next read fails the other calls; this one is answered
        if call.http_status and call.http_status != "200":
            error: RequestFailed | None = RequestFailed(f"gRPC: HTTP status {call.http_status}")
        elif status is None:
            error = RequestFailed("gRPC: the response ended without a grpc-status")
        elif status == 0:
            error = None
        else:
            name = STATUS_NAMES.get(status, str(status))
            kind = ConnectionLost if name == "UNAVAILABLE" else RequestFailed
            error = kind(f"gRPC {name}: {message}")
        call.on_done(error)

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == SETTINGS and not flags & ACK:
            with self._lock:
                for offset in range(0, len(payload) - 5, 6):
                    key, value = struct.unpack_from(">HI", payload, offset)
                    if key == 0x3:
                        self._max_streams = value
                    elif key == 0x4:
                        for call in self._calls.values():
                            call.window += value - self._initial_window
                        self._initial_window = value
                    elif key == 0x5:
                        self._max_frame = value
                self._send(frame_head(0, SETTINGS, ACK, 0))
                self._unblock()
        elif kind == PING and not flags & ACK:
            self._control(frame_head(len(payload), PING, ACK, 0) + payload)
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            with self._lock:
                if stream == 0:
                    self._send_window += increment
                elif (credited := self._calls.get(stream)) is not None:
                    credited.window += increment
                self._unblock()
        elif kind == RST_STREAM:
            code = int.from_bytes(payload[:4], "big")
            reset = self._calls.pop(stream, None)
            if reset is not None:
                kind_of = ConnectionLost if code == 0x7 else RequestFailed  # REFUSED_STREAM: not processed
                reset.on_done(kind_of(f"gRPC: the server reset the stream (HTTP/2 error {code})"))
        elif kind == GOAWAY:
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            with self._lock:
                self.usable = False
                refused = [s for s in self._calls if s > last]
                calls = [self._calls.pop(s) for s in refused]
                calls += [_Call(on_done, memoryview(b""), 0) for _, on_done in self._waiting]
                self._waiting.clear()
            for call in calls:
                call.on_done(ConnectionLost("the server is closing the connection (GOAWAY)"))
        elif kind == PUSH_PROMISE:
            raise ConnectionLost("the server pushed a stream although push is off")

    def _fail_all(self, error: RequestFailed) -> None:
        with self._lock:
            self.usable = False
            calls = list(self._calls.values()) + [_Call(d, memoryview(b""), 0) for _, d in self._waiting]
            self._calls, self._blocked, self._waiting = {}, deque(), deque()
        try:
            self._sock.close()
        except OSError:
            pass
        for call in calls:
            call.on_done(error)

"""A blocking keep-alive HTTP/1.1 connection over a plain socket, for ``--sync`` concurrency slots."""

from __future__ import annotations

import socket
import time

from trt.perf.transport import ConnectionLost, RequestFailed
from trt.perf.transport.http_wire import chunked_body_end, error_message, parse_head


class SyncHttpConnection:
    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._sock: socket.socket | None = None
        self._buffer = bytearray()
        self.last_send_ns = 0
        self.last_recv_ns = 0

    def connect(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as error:
            raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: {error}") from error
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._buffer = sock, bytearray()

    def _fill(self) -> None:
        assert self._sock is not None
        chunk = self._sock.recv(65536)
        if not chunk:
            self.close()
            raise ConnectionLost("connection closed by the server")
        self._buffer += chunk

    def infer(self, payload: bytes) -> int:
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        start = time.perf_counter_ns()
        try:
            self._sock.sendall(payload)
            self.last_send_ns = time.perf_counter_ns() - start
            while (end := self._buffer.find(b"\r\n\r\n")) < 0:
                self._fill()
            first_byte = time.perf_counter_ns()
            head = parse_head(self._buffer, end)
            if head.length >= 0:
                while len(self._buffer) < head.head_size + head.length:
                    self._fill()
                stop = head.head_size + head.length
                body = bytes(self._buffer[head.head_size : stop])
            else:
                while (stop := chunked_body_end(self._buffer, head.head_size)[0]) < 0:
                    self._fill()
                body = chunked_body_end(self._buffer, head.head_size)[1]
        except OSError as error:
            self.close()
            raise ConnectionLost(f"connection to {self.host}:{self.port} failed: {error}") from error
        del self._buffer[:stop]
        self.last_recv_ns = time.perf_counter_ns() - first_byte
        if not head.keep_alive:
            self.close()
        if head.status != 200:
            raise RequestFailed(error_message(head.status, body))
        return 1

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None

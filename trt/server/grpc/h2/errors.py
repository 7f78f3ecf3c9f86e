"""HTTP/2's two kinds of error (RFC 9113 5.4): one that ends the connection, one that resets a stream."""

from __future__ import annotations

from trt.http2.frames import ErrorCode


class ConnectionFailure(Exception):
    """A connection error: GOAWAY with ``code`` (``message`` as its debug data), then close."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class StreamFailure(Exception):
    """A stream error: RST_STREAM with ``code``; the connection goes on."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message

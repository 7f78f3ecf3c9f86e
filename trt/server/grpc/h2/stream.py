"""One HTTP/2 stream as the server sees it: its state, its send window and what waits for credit.

The application layer (``trt.server.grpc.call``) subclasses ``H2Stream`` and overrides ``on_data``,
``on_trailers`` and ``on_reset``; it answers through ``send_headers``, ``send_data``,
``send_trailers``, ``send_response`` and ``reset``, which the connection's ``Outbound`` carries out
under flow control.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

from trt.http2.hpack import Header

if TYPE_CHECKING:
    from trt.server.grpc.h2.outbound import Outbound
    from trt.server.grpc.h2.request_head import RequestHead


class H2Stream:
    __slots__ = (
        "closed",
        "content_length",
        "credit_held",
        "held_bytes",
        "id",
        "local_closed",
        "outbound",
        "outbox",
        "outbox_bytes",
        "outbox_end",
        "outbox_trailers",
        "receive_window",
        "received_bytes",
        "remote_closed",
        "send_window",
        "unacknowledged",
    )

    def __init__(self, outbound: Outbound, stream_id: int) -> None:
        self.outbound = outbound
        self.id = stream_id
        self.send_window = outbound.initial_send_window
        self.receive_window = outbound.initial_receive_window
        self.unacknowledged = 0  # bytes taken in, not yet credited back to the peer
        self.credit_held = False  # the application takes no more for now: credit waits
        self.held_bytes = 0
        self.remote_closed = False  # the peer sent END_STREAM
        self.local_closed = False  # we sent (or queued) END_STREAM
        self.closed = False
        self.content_length: int | None = None
        self.received_bytes = 0
        # What waits for send credit (or for the transport to drain): data, then the trailers.
        self.outbox: deque[memoryview] = deque()
        self.outbox_bytes = 0
        self.outbox_end = False
        self.outbox_trailers: bytes | None = None

    # -- what the peer did (overridden by the application) --------------------------------------

    def on_open(self, head: RequestHead, end_stream: bool) -> None:
        """The request's headers (checked by the connection); ``end_stream``: no data will follow."""

    def on_data(self, data: memoryview, end_stream: bool) -> None:
        """Payload of a DATA frame: a view of the bytes received (read-only; keeping it keeps the whole
        chunk read from the socket alive); ``end_stream`` ends the peer's side."""

    def on_trailers(self, headers: list[Header]) -> None:
        """The peer ended its side with trailers (checked by the connection)."""
        self.on_data(memoryview(b""), True)

    def on_reset(self, code: int) -> None:
        """The peer reset the stream, or the connection is gone: stop the work behind it."""

    def on_drained(self) -> None:
        """Data that waited for credit went out (the outbox shrank)."""

    # -- answering ---------------------------------------------------------------------------------

    def send_headers(self, block: bytes, end_stream: bool = False) -> None:
        self.outbound.send_headers(self, block, end_stream)

    def send_data(self, data: bytes | memoryview, end_stream: bool = False) -> None:
        self.outbound.send_data(self, data, end_stream)

    def send_trailers(self, block: bytes) -> None:
        self.outbound.send_trailers(self, block)

    def send_response(self, head: bytes, body: bytes, trailers: bytes) -> None:
        """Headers, one DATA payload and trailers: in one write when the windows allow."""
        self.outbound.send_response(self, head, body, trailers)

    def reset(self, code: int) -> None:
        self.outbound.reset(self, code)

    def release_credit(self) -> None:
        """The application takes data again: give the peer back the credit held meanwhile."""
        self.credit_held = False
        if self.held_bytes:
            self.outbound.credit_stream(self, self.held_bytes)
            self.held_bytes = 0


class StreamOpener(Protocol):
    """What the connection asks of the application for each request (``trt.server.grpc.call``)."""

    def open_stream(self, outbound: Outbound, stream_id: int) -> H2Stream:
        """A stream object for a new request; it must not send anything before ``on_open``."""
        ...

    def refuse_headers(self, outbound: Outbound, stream_id: int, message: str) -> None:
        """Answer a request whose header list is over the limit (and close its stream)."""
        ...

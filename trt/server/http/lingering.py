"""Closing a connection after refusing its request, without losing the refusal.

When the server answers 408, 413, 431 or 400 to a request it stops reading (a body too large, a head
that trickles), the client may still be sending. Closing the socket at once with its bytes unread
makes the kernel reset the connection, and a reset makes the client's kernel drop the answer it had
not read yet: the client sees "connection reset" instead of the status and its reason (seen in
trt's own 408 test, once in a full run). As nginx and Apache do, the server instead ends its side
(FIN after the answer), then reads and discards what still comes for up to ``LINGER_S`` or until the
client closes, and only then closes. TLS connections, which cannot half-close, close at once.
"""

from __future__ import annotations

import asyncio

from trt.server.http.messages import response_head

LINGER_S = 2.0  # how long the discarded bytes are read, at most


class _Discard(asyncio.Protocol):
    def __init__(self, transport: asyncio.Transport) -> None:
        self._timer = asyncio.get_running_loop().call_later(LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        pass  # the rest of a refused request

    def eof_received(self) -> bool:
        self._timer.cancel()
        return False  # the client is done too: close

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()


def refuse(transport: asyncio.Transport, status: int, message: bytes, linger: bool) -> None:
    """Answer ``status`` with ``{"error": message}`` and close ``transport``; with ``linger``, once the
    answer has gone and what the client still sends has been read and dropped (see above), and the
    caller's protocol gets no more callbacks. Without it (an answer to an earlier request is still to
    be written, which a half-closed transport would refuse) it closes as before."""
    body = b'{"error":"' + message.replace(b'"', b"'") + b'"}'
    transport.write(response_head(status, len(body), [(b"content-type", b"application/json")], False) + body)
    if not linger or not transport.can_write_eof():
        transport.close()
        return
    transport.write_eof()
    transport.set_protocol(_Discard(transport))
    if not transport.is_reading():  # paused for a backlog of pipelined requests: drain it now
        transport.resume_reading()

"""One worker's channel to the core: a Unix stream socket carrying ``codec`` frames, both ways.

Measured against the Python backend's shared-memory rings with eventfd wake-ups before choosing (see
README, "A front end on more than one core"): on loopback a socket write is one system call that also
delivers, the rings need one for the eventfd as well, and the socket brings backpressure, EOF when the
other process dies, and asyncio's reader for free. Frames sent during one pass of the event loop go
out in one write (one wake-up of the reader per burst, as the rings' eventfd gives).

Bounded both ways: the reader holds at most one frame of ``max_frame`` bytes, and a sender that finds
the socket's buffers full waits in ``writable()`` (the worker then stops taking requests off its
client sockets: backpressure, not an unbounded queue).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import cast

from trt.server.frontend import codec
from trt.server.frontend.messages import Message

logger = logging.getLogger("trt.frontend")

_HIGH_WATER = 4 * 1024 * 1024  # bytes queued in the transport past which senders wait


class Channel(asyncio.Protocol):
    def __init__(
        self, on_message: Callable[[Message], None], on_closed: Callable[[], None], max_frame: int
    ) -> None:
        self._on_message = on_message
        self._on_closed = on_closed
        self._reader = codec.FrameReader(max_frame)
        self._transport: asyncio.Transport | None = None
        self._outgoing: list[bytes] = []
        self._flush_scheduled = False
        self._writable = asyncio.Event()
        self._writable.set()
        self.closed = False

    @classmethod
    async def open(
        cls, sock: socket.socket, on_message: Callable[[Message], None], on_closed: Callable[[], None],
        max_frame: int,
    ) -> Channel:  # fmt: skip
        loop = asyncio.get_running_loop()
        _, channel = await loop.connect_accepted_socket(lambda: cls(on_message, on_closed, max_frame), sock)
        return channel

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport
        self._transport.set_write_buffer_limits(high=_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        try:
            messages = self._reader.feed(data)
        except codec.ChannelError as exc:
            logger.error("frontend channel: %s; closing it", exc)
            self.close()
            return
        for message in messages:
            self._on_message(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._outgoing.clear()
        self._writable.set()  # a waiting sender finds the channel closed, and gives up
        self._on_closed()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- sending ------------------------------------------------------------------------------------

    def send(self, message: Message) -> None:
        """Queue ``message``; it goes out with the others of this pass of the loop (no-op once closed)."""
        if self.closed:
            return
        self._outgoing.append(codec.encode(message))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed or self._transport is None or not self._outgoing:
            return
        data = self._outgoing[0] if len(self._outgoing) == 1 else b"".join(self._outgoing)
        self._outgoing.clear()
        self._transport.write(data)

    async def writable(self) -> None:
        """Wait while the other side leaves too much unread."""
        if not self._writable.is_set():
            await self._writable.wait()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

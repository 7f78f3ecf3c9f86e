"""The rest of one large request body, read by the transport straight into the bytes object that
becomes the request's body.

While it reads, the reader is the transport's protocol (``asyncio.BufferedProtocol``: the event loop
asks it where to put each read, and the kernel's copy from the socket is the only one), and hands
the connection back when the body is whole. It never asks for more than the body has left, so the
bytes of a next pipelined request stay in the socket for the connection's own protocol. The
connection keeps its deadlines, limits and accounting: the reader tells it how many bytes came
(``arrived``), which counts them as they come, never what the head merely declares (a client that
sends heads alone must not take the server's byte budget), and may stop the reader (the server holds
too much: the connection reads the rest in pieces and drops it). The reader passes on what happens
to the transport meanwhile (lost, EOF, write pauses).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from trt.server.http.unfilled_bytes import unfilled_bytes

# A body with at least this much left to come is read into one buffer; a smaller one in the
# transport's pieces, where the switch of protocols would cost about what it saves.
READ_INTO_BYTES = 1 << 20


class BodyReader(asyncio.BufferedProtocol):
    def __init__(
        self,
        connection: asyncio.Protocol,
        transport: asyncio.Transport,
        body: bytes,
        contents: memoryview,
        filled: int,
        arrived: Callable[[int], bool],
        complete: Callable[[bytes], None],
    ) -> None:
        self.connection = connection
        self._transport = transport
        self._body = body
        self._contents: memoryview | None = contents
        self._filled = filled
        self._arrived = arrived
        self._complete = complete

    @classmethod
    def start(
        cls,
        connection: asyncio.Protocol,
        transport: asyncio.Transport,
        size: int,
        first: bytes | memoryview,
        max_body_size: int,
        arrived: Callable[[int], bool],
        complete: Callable[[bytes], None],
    ) -> BodyReader | None:
        """Read the body of ``size`` bytes that begins with ``first`` into one bytes object, which
        ``complete`` receives; None where it comes in pieces instead: small, past ``max_body_size``
        (the pieces' path answers 413), or where the interpreter does not allow it. ``arrived`` is
        told of each read (``first`` is the caller's to count) and stops the reader by saying False."""
        if size - len(first) < READ_INTO_BYTES or size > max_body_size:
            return None
        made = unfilled_bytes(size)
        if made is None:
            return None
        body, contents = made
        contents[: len(first)] = first
        reader = cls(connection, transport, body, contents, len(first), arrived, complete)
        try:
            transport.set_protocol(reader)
        except NotImplementedError:  # a transport that keeps one protocol (asyncio's base class)
            return None
        return reader

    def give_back(self) -> None:
        """Stop reading: the connection's own protocol reads again (the body is dropped)."""
        self._contents = None
        if self._transport.get_protocol() is self:
            self._transport.set_protocol(self.connection)

    # -- asyncio.BufferedProtocol -------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        assert self._contents is not None
        return self._contents[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if not self._arrived(nbytes):
            self.give_back()
        elif self._contents is not None and self._filled == len(self._body):
            self.give_back()
            self._complete(self._body)

    def connection_lost(self, exc: Exception | None) -> None:
        self._contents = None
        self.connection.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self.connection.eof_received()

    def pause_writing(self) -> None:
        self.connection.pause_writing()

    def resume_writing(self) -> None:
        self.connection.resume_writing()

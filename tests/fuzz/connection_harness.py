"""Feeding a client's bytes to one of the server's connection protocols in process, as the event loop
would, and checking what is left once the client has gone.

``RecordingTransport`` keeps what the connection writes and, like uvloop's transports, raises on a
write after ``write_eof()``, ``close()`` or the connection's loss. ``serve`` hands the bytes over piece
by piece (to the protocol the transport has at the time, ``deliver``), lets what they started run,
drops the connection, and fails if anything the connection started is still running after
``settle_s`` or if the event loop saw an exception no one retrieved.
``nothing_left_running`` checks the same around a request handed to an app directly; ``core_on``
runs the real core such tests serve from, in the loop they drive.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from tests.support import running_core
from trt.server.core.server import InferenceServer
from trt.server.http.messages import close_stream


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.eof = False  # write_eof() was called
        self.closed = False
        self.paused = False  # the connection asked not to be given more bytes for now
        self.gone = False  # the client went: connection_lost was called
        self.protocol: asyncio.BaseProtocol | None = None  # whom the loop tells (set_protocol moves it)

    @property
    def ended(self) -> bool:
        return self.eof or self.closed

    def write(self, data: Any) -> None:
        if self.ended or self.gone:
            raise RuntimeError("unable to perform operation on a closed transport, or after write_eof()")
        self.written += data

    def writelines(self, parts: Any) -> None:
        for part in parts:
            self.write(part)

    def write_eof(self) -> None:
        self.eof = True

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed or self.gone

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol

    def is_reading(self) -> bool:
        return not self.paused

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def deliver(transport: RecordingTransport, data: bytes) -> None:
    """Hand ``data`` to whichever protocol the transport has now, as the event loop does: a
    ``BufferedProtocol`` (a body read into one buffer) gets reads no larger than the buffer it offers,
    and the rest goes to the protocol it hands back to."""
    view = memoryview(data)
    while view and not transport.ended:
        protocol = transport.get_protocol()
        if not isinstance(protocol, asyncio.BufferedProtocol):
            protocol.data_received(bytes(view))  # type: ignore[attr-defined]
            return
        buffer = memoryview(protocol.get_buffer(len(view))).cast("B")
        size = min(len(buffer), len(view))
        buffer[:size] = view[:size]
        protocol.buffer_updated(size)
        view = view[size:]


async def serve(
    connection: asyncio.Protocol,
    pieces: list[bytes],
    settle_s: float = 5.0,
    delays: list[float] | None = None,
    linger_s: float = 0.0,
) -> RecordingTransport:
    """Run ``connection`` on the bytes ``pieces`` until the client goes; what it wrote. ``delays``:
    seconds the client waits before each piece and, last, before it goes (timers fire meanwhile);
    ``linger_s``: how long after it went the loop is still watched for errors (a late timer's)."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    before = asyncio.all_tasks() | {asyncio.current_task()}

    def still_running() -> bool:  # anything the connection started
        return bool(asyncio.all_tasks() - before)

    transport = RecordingTransport()
    transport.protocol = connection
    connection.connection_made(transport)
    try:
        for index, piece in enumerate(pieces):
            if delays:
                await asyncio.sleep(delays[index])
            if transport.ended:
                break
            while transport.paused:  # it holds what it has read until it has answered some of it
                await asyncio.sleep(0.001)
            deliver(transport, piece)
            await asyncio.sleep(0)
        if delays and not transport.ended:
            await asyncio.sleep(delays[-1])
        for _ in range(50):  # let what was read be answered (up to 50 ms; less once nothing runs)
            await asyncio.sleep(0.001)
            if not still_running():
                break
        transport.gone = True  # a real transport takes no writes once it has called connection_lost
        transport.get_protocol().connection_lost(None)  # the connection's, or the one it handed over to
        deadline = loop.time() + settle_s
        while still_running():
            assert loop.time() < deadline, "work the client started still runs after it left"
            await asyncio.sleep(0.01)
        await asyncio.sleep(linger_s)
    finally:
        loop.set_exception_handler(None)
    assert not errors, f"the event loop saw errors: {errors}"
    return transport


@asynccontextmanager
async def nothing_left_running(settle_s: float = 5.0) -> AsyncIterator[None]:
    """Around a request handed to an app: once the block is done (its answer read), every task the
    request started must end within ``settle_s``, and the event loop must have seen no exception that
    no one retrieved."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    before = asyncio.all_tasks()
    try:
        yield
        deadline = loop.time() + settle_s
        while asyncio.all_tasks() - before:
            assert loop.time() < deadline, "work the request started still runs after its answer"
            await asyncio.sleep(0.005)
    finally:
        loop.set_exception_handler(None)
    assert not errors, f"the event loop saw errors: {errors}"


async def stream_events(stream: AsyncIterator[bytes], reads: int) -> list[bytes] | None:
    """A streamed answer's pieces, all of them; or None when the client stops reading after ``reads``
    of them (0: before the first) and closes the stream, as one that goes away does."""
    events: list[bytes] = []
    if reads != 0:
        async for piece in stream:
            events.append(piece)
            if len(events) == reads:
                break
        else:
            return events
    await close_stream(stream)
    return None


@contextmanager
def core_on(loop: asyncio.AbstractEventLoop, repository: Path, *models: str) -> Iterator[InferenceServer]:
    """A real core with ``models`` of ``repository`` loaded, running on ``loop`` (a module's fixture
    keeps it for all of its examples), stopped on the way out."""
    context = running_core(repository, *models)
    core = loop.run_until_complete(context.__aenter__())
    try:
        yield core
    finally:
        loop.run_until_complete(context.__aexit__(None, None, None))

"""Marks the moments of each request inside a served ``trt serve`` (imported into the server by
``request_timeline.py``, never by trt itself).

Four points, stamped with ``time.perf_counter_ns`` on the event loop's thread: the request's bytes
arrive (``HttpProtocol.data_received``), its execution is handed to the Python model's process
(``ModelProcess.post``), the model process's answer is seen (``ModelProcess.read_messages``), the
response is written to the socket (the connection's transport). Each wrapper adds well under a
microsecond. The marks are kept in memory (bounded) and written as JSON when the server exits.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from typing import Any

ARRIVED, POSTED, ANSWERED, WRITTEN = 0, 1, 2, 3
MAX_MARKS = 4_000_000  # about 100k requests at 4 marks each: bounded whatever the run's length

marks: list[tuple[int, int]] = []


def _mark(point: int) -> None:
    if len(marks) < MAX_MARKS:
        marks.append((point, time.perf_counter_ns()))


class _StampingTransport:
    """The connection's transport, stamping each write once it returns."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport

    def write(self, data: bytes) -> None:
        self._transport.write(data)
        _mark(WRITTEN)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def install(output: str) -> None:
    """Wrap the four points; write the marks to ``output`` when the process exits."""
    from trt.server.backends.python.process import ModelProcess
    from trt.server.http.protocol import HttpProtocol

    data_received = HttpProtocol.data_received
    connection_made = HttpProtocol.connection_made
    post = ModelProcess.post
    read_messages = ModelProcess.read_messages

    def stamped_data_received(self: HttpProtocol, data: bytes) -> None:
        _mark(ARRIVED)
        data_received(self, data)

    def stamped_connection_made(self: HttpProtocol, transport: Any) -> None:
        connection_made(self, transport)
        self._transport = _StampingTransport(self._transport)  # type: ignore[assignment]

    def stamped_post(self: ModelProcess, message: Any) -> None:
        post(self, message)
        _mark(POSTED)

    def stamped_read_messages(self: ModelProcess) -> None:
        _mark(ANSWERED)
        read_messages(self)

    HttpProtocol.data_received = stamped_data_received  # type: ignore[method-assign]
    HttpProtocol.connection_made = stamped_connection_made  # type: ignore[method-assign]
    ModelProcess.post = stamped_post  # type: ignore[method-assign]
    ModelProcess.read_messages = stamped_read_messages  # type: ignore[method-assign]

    def write() -> None:
        with open(output + ".tmp", "w") as file:
            json.dump(marks, file)
        os.replace(output + ".tmp", output)

    atexit.register(write)

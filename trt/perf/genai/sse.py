"""Server-sent events (the WHATWG ``text/event-stream`` format) read incrementally from response bytes:
what OpenAI's streaming routes and Triton's ``generate_stream`` send."""

from __future__ import annotations

from dataclasses import dataclass

MAX_EVENT_BYTES = 16 * 2**20


class EventStreamError(ValueError):
    """The stream broke the format or an event outgrew ``MAX_EVENT_BYTES``."""


@dataclass(frozen=True)
class Event:
    name: str  # "message" unless an ``event:`` field says otherwise
    data: str


class EventParser:
    """``feed(bytes)`` returns the events those bytes completed (a blank line ends an event)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._data: list[str] = []
        self._name = ""
        self._size = 0

    def feed(self, chunk: bytes) -> list[Event]:
        self._buffer += chunk
        events: list[Event] = []
        while True:
            end = self._line_end()
            if end < 0:
                if len(self._buffer) > MAX_EVENT_BYTES:
                    raise EventStreamError(f"an event line longer than {MAX_EVENT_BYTES} bytes")
                return events
            line = bytes(self._buffer[:end])
            skip = 2 if self._buffer[end : end + 2] == b"\r\n" else 1
            del self._buffer[: end + skip]
            event = self._line(line.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)

    def _line_end(self) -> int:
        newline = self._buffer.find(b"\n")
        carriage = self._buffer.find(b"\r")
        if carriage >= 0 and (newline < 0 or carriage < newline):
            if carriage == len(self._buffer) - 1:
                return -1  # a CR at the end may be the first half of CRLF: wait for the next byte
            return carriage
        return newline

    def _line(self, line: str) -> Event | None:
        if not line:
            if not self._data and not self._name:
                return None
            event = Event(self._name or "message", "\n".join(self._data))
            self._data, self._name, self._size = [], "", 0
            return event
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._size += len(value)
            if self._size > MAX_EVENT_BYTES:
                raise EventStreamError(f"an event larger than {MAX_EVENT_BYTES} bytes")
            self._data.append(value)
        elif field == "event":
            self._name = value
        return None

"""What the HTTP server hands its handler and takes back: one request, one response."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import httptools

from trt.server.http.heads import HeadPlan

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_STATUS_LINES = {status: b"HTTP/1.1 %d %s\r\n" % (status, reason) for status, reason in _REASONS.items()}


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    body_too_large: bool = False  # over the limit: the body was dropped and the answer is 413
    over_budget: bool = False  # the server held too many bytes: the body was dropped, the answer is 503
    reserved: int = 0  # bytes of the body counted against the server's QueuedBytes until answered
    started_ns: int = 0  # perf_counter_ns when its first byte was parsed, and when its last was
    received_ns: int = 0
    plan: HeadPlan | None = None  # its head was seen before (see ``heads``); None: parsed afresh
    # Header names as the client spelt them, by their lower-case names, where the two differ; kept
    # only when the server forwards headers to models (``HttpServer.keep_header_spelling``).
    header_spellings: dict[str, str] | None = None

    def spelt_headers(self) -> list[tuple[str, str]]:
        """The headers under the names the client gave them (lower case where not kept)."""
        spellings = self.header_spellings
        if not spellings:
            return list(self.headers.items())
        return [(spellings.get(name, name), value) for name, value in self.headers.items()]


# A binary answer whose tensors come to more than this is kept in pieces (``SplitBody``).
SPLIT_BODY_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class SplitBody:
    """A body kept as the pieces it was made of (an answer's JSON header, then each output's
    buffer), written one after another: joining them copies every tensor once more on the event
    loop, into freshly mapped pages when large (64 MB: 42 ms here)."""

    parts: tuple[bytes | memoryview, ...]  # memoryviews of bytes ("B"), read-only from here on
    size: int  # the parts' bytes together

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


@dataclass(slots=True)
class HttpResponse:
    status: int
    body: bytes | SplitBody = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    # Sent after the head with chunked transfer encoding, chunk by chunk as it yields (server-sent
    # events); ``body`` is then ignored. Closed early if the client goes away.
    stream: AsyncIterator[bytes] | None = None
    sent: Callable[[], None] | None = None  # called once the response is written (tracing)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


def unspelt_headers(pairs: list[tuple[str, str]]) -> tuple[dict[str, str], dict[str, str] | None]:
    """``HttpRequest.spelt_headers()`` back to the request's headers and header spellings."""
    headers: dict[str, str] = {}
    spellings: dict[str, str] = {}
    for name, value in pairs:
        lower = name.lower()
        headers[lower] = value
        if lower != name:
            spellings[lower] = name
    return headers, spellings or None


async def close_stream(stream: AsyncIterator[Any]) -> None:
    """Close an async generator early (a consumer that stops reading); other iterators need nothing."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


def path_and_query(target: bytes) -> tuple[str, str]:
    """A request target's path (percent-decoded) and query, as handlers see them."""
    # Untyped on purpose: httptools' stub says its fields are bytes, but an absent query is None, and
    # a compiled build would check the stub's word.
    url: Any = httptools.parse_url(target)
    path = url.path.decode("latin-1")
    if "%" in path:
        path = unquote(path)
    return path, url.query.decode("latin-1") if url.query else ""


def response_head(
    status: int,
    length: int | None,
    headers: list[tuple[bytes, bytes]],
    keep_alive: bool,
    say_keep_alive: bool = False,
) -> bytes:
    """The status line and headers; ``length`` None announces a chunked body. ``say_keep_alive``: the
    client (HTTP/1.0) keeps the connection only if the answer says so."""
    line = _STATUS_LINES.get(status) or b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))
    framing = b"transfer-encoding: chunked\r\n" if length is None else b"content-length: %d\r\n" % length
    lines = [line, framing]
    for name, value in headers:
        lines.append(name + b": " + value + b"\r\n")
    if not keep_alive:
        lines.append(b"connection: close\r\n\r\n")
    else:
        lines.append(b"connection: keep-alive\r\n\r\n" if say_keep_alive else b"\r\n")
    return b"".join(lines)

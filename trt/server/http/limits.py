"""What one HTTP request may make the server hold (the flags' defaults), how long it may take to
arrive, and the answers to requests that pass a bound. ``protocol`` enforces them as bytes arrive; the
server's sweep asks each connection about its deadlines now and then."""

from __future__ import annotations

from dataclasses import dataclass

from trt.server.core.scheduling.queued_bytes import QueuedBytes
from trt.server.http.heads import HEAD_END

_JSON = [(b"content-type", b"application/json")]

DEFAULT_MAX_BODY_SIZE = 64 * 1024 * 1024  # --http-max-input-size, as Triton's
DEFAULT_MAX_HEADER_SIZE = 64 * 1024  # --http-max-header-size: request line and headers together
DEFAULT_MAX_HEADER_COUNT = 100  # --http-max-header-count
# A request head must arrive whole within this many seconds of its first byte. Without a bound a
# client that sends a byte now and then (slowloris) keeps its connection for ever, since each byte
# resets the idle timeout, and enough of them take every file descriptor.
DEFAULT_HEAD_TIMEOUT_S = 60.0
# The same for a body, which may be large: it has this long from the end of its head, and a second
# more for every ``DEFAULT_BODY_MIN_RATE`` bytes it has delivered (Apache's mod_reqtimeout rule), so a
# large upload on a slow link goes through while a byte now and then does not hold a connection.
DEFAULT_BODY_TIMEOUT_S = 60.0
DEFAULT_BODY_MIN_RATE = 500  # bytes per second
# The non-empty chunks a ``Transfer-Encoding: chunked`` body may have, and the 400's words: Triton's
# bound (each piece is an object of its own: a 64 MiB body of one-byte chunks made some 2.8 GB of them).
MAX_BODY_CHUNKS = 1 << 16
TOO_MANY_CHUNKS = (
    f"Chunked request body exceeds maximum of {MAX_BODY_CHUNKS} non-empty chunks. "
    "Send fewer or larger HTTP chunks."
)


class HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a request whose head breaks a limit."""


class TooManyChunks(Exception):
    """Raised from a parser callback to stop reading a chunked body of too many chunks."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one request may make the server hold."""

    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE
    max_header_count: int = DEFAULT_MAX_HEADER_COUNT
    head_timeout: float = DEFAULT_HEAD_TIMEOUT_S
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S
    body_min_rate: int = DEFAULT_BODY_MIN_RATE

    def head_overdue(self, began_ns: int, now_ns: int) -> str | None:
        """Why a head begun at ``began_ns`` (perf_counter_ns) and still not whole is too late; None
        while it has time."""
        if now_ns - began_ns <= self.head_timeout * 1e9:
            return None
        return f"the request head did not arrive whole within {self.head_timeout:g} s"

    def body_overdue(self, began_ns: int, received: int, now_ns: int) -> str | None:
        """Why a body whose head ended at ``began_ns``, and of which ``received`` bytes have come, is
        too late; None while it has time."""
        allowed_s = self.body_timeout + received / self.body_min_rate
        if now_ns - began_ns <= allowed_s * 1e9:
            return None
        return (
            f"the request body did not arrive whole within {allowed_s:.0f} s ({self.body_timeout:g} s, "
            f"and 1 s more for every {self.body_min_rate} bytes received)"
        )


@dataclass(slots=True)
class HeadBytes:
    """The bytes of one request head so far, counted on the reads as they arrive: httptools keeps a
    header value it has not finished in one growing buffer, so its callbacks come too late to bound it."""

    size: int = 0
    line_ended: bool = False  # the request line is complete (a head over its limit before it: 414)
    tail: bytes = b""  # the last bytes of the previous read, for an end of head across two

    def count(self, data: bytes) -> int:
        """Add the head's bytes in ``data``: whole reads until its end is seen (which may straddle two);
        a few bytes of a next pipelined head in the same read go uncounted, so the bound is exact to
        within one read. The size so far."""
        if not self.line_ended and b"\n" in data:
            self.line_ended = True
        tail = self.tail
        across = (tail + data[:3]).find(HEAD_END) if tail else -1
        if across >= 0:
            self.size += across + len(HEAD_END) - len(tail)
        else:
            end = data.find(HEAD_END)
            self.size += len(data) if end < 0 else end + len(HEAD_END)
        self.tail = data[-3:]
        return self.size


def head_rejection(limits: HttpLimits, line_ended: bool, url_size: int, header_count: int) -> tuple[int, str]:
    """The status and message for a request head that broke a limit, given how far it had come."""
    if not line_ended or url_size > limits.max_header_size:
        return 414, "the URL is longer than the request head may be (--http-max-header-size)"
    if header_count > limits.max_header_count:
        return 431, f"the request has more than {limits.max_header_count} headers (--http-max-header-count)"
    return 431, f"the request line and headers exceed {limits.max_header_size} bytes (--http-max-header-size)"


def too_large(limit: int) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    # Triton's words (its QA matches "exceeds the maximum allowed input size"); 413 where Triton reads
    # the whole body first and answers 400: this server stops reading at the limit.
    message = (
        f'{{"error":"request body exceeds the maximum allowed input size of {limit} bytes. '
        'Use --http-max-input-size to increase the limit."}'
    )
    return 413, message.encode(), _JSON


def over_budget(queued_bytes: QueuedBytes | None) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    limit = queued_bytes.limit if queued_bytes is not None else 0
    message = (
        f'{{"error":"the server holds its limit of {limit} bytes of requests not yet answered '
        f'(--max-queued-bytes); try again later"}}'
    )
    return 503, message.encode(), _JSON

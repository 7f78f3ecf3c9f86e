"""What one HTTP request may make the server hold (the flags' defaults), and the answers to requests
that pass a bound. ``protocol`` enforces them as bytes arrive."""

from __future__ import annotations

from dataclasses import dataclass

from trt.server.core.scheduling.queued_bytes import QueuedBytes

_JSON = [(b"content-type", b"application/json")]

DEFAULT_MAX_BODY_SIZE = 64 * 1024 * 1024  # --http-max-input-size, as Triton's
DEFAULT_MAX_HEADER_SIZE = 64 * 1024  # --http-max-header-size: request line and headers together
DEFAULT_MAX_HEADER_COUNT = 100  # --http-max-header-count


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one request may make the server hold."""

    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE
    max_header_count: int = DEFAULT_MAX_HEADER_COUNT


def too_large(limit: int) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    message = f'{{"error":"request body exceeds the {limit}-byte limit (--http-max-input-size)"}}'
    return 413, message.encode(), _JSON


def over_budget(queued_bytes: QueuedBytes | None) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    limit = queued_bytes.limit if queued_bytes is not None else 0
    message = (
        f'{{"error":"the server holds its limit of {limit} bytes of requests not yet answered '
        f'(--max-queued-bytes); try again later"}}'
    )
    return 503, message.encode(), _JSON

"""One bound on the bytes that requests hold inside the server (``--max-queued-bytes``).

A slow model with many clients would otherwise queue without limit (300 requests of 4 MiB to a slow
model took the server to 2.5 GB; Triton grows the same way). The core counts each inference request's
tensors from the moment it is taken until it is answered, and the HTTP transport counts bodies while
they arrive and wait on their connection; a request that would pass the bound is refused at once with
503 / UNAVAILABLE, as a full ``max_queue_size`` refuses one, rather than queued.

Everything that counts runs on the event loop, so the count needs no lock.
"""

from __future__ import annotations

from trt.server.core.errors import OverLimit
from trt.server.core.types import InferenceRequest

DEFAULT_LIMIT = 512 * 1024 * 1024  # 512 MiB: about 1 GB of RSS once copies and slack are counted


class QueuedBytes:
    """Bytes held by requests taken and not yet answered, against ``limit`` (0: no bound)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = max(0, limit)
        self.held = 0

    def reserve(self, size: int) -> bool:
        """Count ``size`` more bytes; False (nothing counted) when that would pass the limit."""
        if self.limit and self.held + size > self.limit:
            return False
        self.held += size
        return True

    def release(self, size: int) -> None:
        self.held -= size

    def admit(self, size: int) -> None:
        """Count ``size`` bytes (the caller releases them once answered); OverLimit if they do not fit."""
        limit = self.limit  # reserve()'s test, in line: this runs for every request
        if not limit or self.held + size <= limit:
            self.held += size
            return
        raise OverLimit(
            f"the server holds {self.held} bytes of requests not yet answered and this one needs "
            f"{size} more, past the limit of {limit} (--max-queued-bytes); try again later"
        )


def request_bytes(request: InferenceRequest) -> int:
    """The bytes ``request``'s input tensors hold (BYTES elements by their lengths). Plain loops: this
    runs for every request."""
    total = 0
    for tensor in request.inputs:
        data = tensor.data
        if data is None:
            continue
        total += data.nbytes
        if data.dtype.hasobject:
            total += sum(len(item) for item in data.flat if isinstance(item, bytes | bytearray | str))
    return total

"""Request heads seen before, so that a repeated one is not parsed again.

A client sends the same request line and headers with every request of a kind: perf_analyzer,
tritonclient in a loop, a load balancer's health check. The head's bytes decide everything the
parser derives from them (method, path, headers, keep-alive, the body's length), so once httptools
has parsed a head, the same bytes can be looked up instead of parsed: the body that follows is then
read as its ``Content-Length`` says, with the same limits and byte accounting as any other body.

Only heads that frame their body by ``Content-Length`` (or carry none) and ask for nothing else of
the transport are remembered: not chunked bodies, ``Expect: 100-continue`` or upgrades. What is
remembered is bounded: at most ``max_heads`` heads of at most ``max_head_bytes`` each, the oldest
forgotten first, so a client that sends a different head with every request costs a lookup and an
entry that soon goes, never memory.

A handler may keep what it decided from a head (its route, say) in the head's ``route``: the same
head always comes with the same decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_HEADS = 256
DEFAULT_MAX_HEAD_BYTES = 4096
HEAD_END = b"\r\n\r\n"


@dataclass(slots=True, eq=False)
class HeadPlan:
    """What httptools made of one head's bytes."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # shared by every request of this head: read only
    content_length: int
    keep_alive: bool
    say_keep_alive: bool  # an HTTP/1.0 client: the answer says it keeps the connection
    header_spellings: dict[str, str] | None = None  # see ``HttpRequest.header_spellings``
    route: Any = None  # the handler's own decision for requests of this head (see ``HttpApp``)


class HeadCache:
    """Heads by their exact bytes, bounded in count and size."""

    def __init__(
        self, max_heads: int = DEFAULT_MAX_HEADS, max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
    ) -> None:
        self.max_heads = max(0, max_heads)
        self.max_head_bytes = max_head_bytes
        self._plans: dict[bytes, HeadPlan] = {}

    def __len__(self) -> int:
        return len(self._plans)

    def get(self, head: bytes) -> HeadPlan | None:
        return self._plans.get(head)

    def remember(self, head: bytes, plan: HeadPlan) -> None:
        """Keep ``plan`` for ``head`` if the head is small enough; the oldest go when full."""
        if len(head) > self.max_head_bytes or not self.max_heads:
            return
        plans = self._plans
        while len(plans) >= self.max_heads:
            del plans[next(iter(plans))]
        plans[head] = plan


def plannable(headers: dict[str, str], body_size: int) -> int | None:
    """The body length a head with ``headers`` frames by ``Content-Length`` (0 without a body), or
    None when its requests must go through the parser each time."""
    if "transfer-encoding" in headers or "expect" in headers or "upgrade" in headers:
        return None
    length = headers.get("content-length")
    if length is None:
        return 0 if body_size == 0 else None
    # httptools took it, so it is ASCII digits within 64 bits; leading zeros can still make more
    # digits than int() reads (a head that long is only remembered under a raised size limit)
    if not length.isdigit() or len(length) > 20 or int(length) != body_size:
        return None
    return body_size

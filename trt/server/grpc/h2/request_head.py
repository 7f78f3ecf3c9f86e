"""A request's header list checked against RFC 9113 section 8 (a malformed one is a stream error).

Checked: field names (lower case, no separators or controls, no colon outside a leading one), field
values (no NUL, CR or LF, no surrounding blanks), pseudo-header fields (only the four a request has,
each at most once, all before the regular fields, ``:method``, ``:scheme`` and a non-empty ``:path``
present), no connection-specific fields, ``te`` only ``trailers``, and ``content-length`` a number.
Trailers may hold no pseudo-header fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trt.http2.hpack import Header

_BAD_NAME = re.compile(r"[\x00-\x20A-Z\x7f-\xff:]")
_BAD_VALUE = re.compile(r"[\x00\r\n]|^[ \t]|[ \t]$")
_CONNECTION_SPECIFIC = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}
)
_REQUEST_PSEUDO = frozenset({":method", ":scheme", ":authority", ":path"})


class MalformedRequest(Exception):
    """The header list breaks HTTP/2's rules: the stream is reset with PROTOCOL_ERROR."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    scheme: str
    authority: str
    path: str
    fields: tuple[Header, ...]  # the regular fields, in order (gRPC metadata among them)
    content_length: int | None
    # What the application derived from this head: the connection hands the same head to every
    # request whose header block is the same bytes, so that work is done once.
    derived: dict[object, object] = field(default_factory=dict, compare=False, repr=False)

    def get(self, name: str) -> str | None:
        """The first value of a regular field (names are lower case)."""
        for key, value in self.fields:
            if key == name:
                return value
        return None


def _check_field(name: str, value: str) -> None:
    if not name or _BAD_NAME.search(name):
        raise MalformedRequest(f"invalid header field name {name!r}")
    if value and _BAD_VALUE.search(value):
        raise MalformedRequest(f"invalid value for header field {name!r}")
    if name in _CONNECTION_SPECIFIC:
        raise MalformedRequest(f"connection-specific header field {name!r}")
    if name == "te" and value != "trailers":
        raise MalformedRequest("the te header field may only say 'trailers'")


def request_head(headers: list[Header]) -> RequestHead:
    pseudo: dict[str, str] = {}
    fields: list[Header] = []
    content_length: int | None = None
    for name, value in headers:
        if name.startswith(":"):
            if fields:
                raise MalformedRequest(f"pseudo-header field {name} after a regular field")
            if name not in _REQUEST_PSEUDO:
                raise MalformedRequest(f"pseudo-header field {name} in a request")
            if name in pseudo:
                raise MalformedRequest(f"pseudo-header field {name} repeated")
            if _BAD_VALUE.search(value):
                raise MalformedRequest(f"invalid value for {name}")
            pseudo[name] = value
            continue
        _check_field(name, value)
        if name == "content-length":
            # ASCII digits only (str.isdigit() takes the superscripts HPACK's latin-1 can spell), and
            # no more than a 64-bit length has (int() refuses thousands)
            if not (value.isascii() and value.isdigit() and len(value) <= 20) or (
                content_length is not None and int(value) != content_length
            ):
                raise MalformedRequest("invalid content-length")
            content_length = int(value)
        fields.append((name, value))
    method = pseudo.get(":method")
    if method is None or ":scheme" not in pseudo or not pseudo.get(":path"):
        raise MalformedRequest("a request needs :method, :scheme and a non-empty :path")
    return RequestHead(
        method,
        pseudo[":scheme"],
        pseudo.get(":authority", ""),
        pseudo[":path"],
        tuple(fields),
        content_length,
    )


def check_trailers(headers: list[Header]) -> None:
    for name, value in headers:
        if name.startswith(":"):
            raise MalformedRequest(f"pseudo-header field {name} in trailers")
        _check_field(name, value)

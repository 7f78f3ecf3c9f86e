"""Protobuf's base-128 varints, written and read, for the parts of the gRPC codecs that handle
message bytes themselves (``codec``, ``request_wire``, ``response_wire``)."""

from __future__ import annotations

from trt.server.core.errors import InvalidArgument


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative integer."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: memoryview, at: int) -> tuple[int, int]:
    """The varint at ``at`` in ``data`` and the position after it; InvalidArgument if it is cut short
    or longer than ten bytes (a request's bytes are the client's)."""
    value = shift = 0
    end = len(data)
    while True:
        if at >= end or shift > 63:
            raise InvalidArgument("malformed ModelInferRequest: a truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at

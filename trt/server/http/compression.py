"""Compressed HTTP bodies: a request's ``Content-Encoding`` undone within the input limit, an answer
compressed as its ``Accept-Encoding`` allows (gzip or deflate, as Triton offers)."""

from __future__ import annotations

import gzip
import zlib

from trt.server.core.errors import InvalidArgument


class UnsupportedEncoding(Exception):
    """A ``Content-Encoding`` other than gzip, deflate or identity (HTTP 415)."""


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` decoded from ``encoding`` (lower case), never more than ``limit`` bytes of it."""
    if encoding == "gzip":
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decompressor = zlib.decompressobj()
    else:
        raise UnsupportedEncoding(
            f"unsupported Content-Encoding '{encoding}' (use gzip, deflate or identity)"
        )
    try:
        data = decompressor.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidArgument(f"cannot decompress the {encoding} body: {exc}") from None
    if len(data) > limit or decompressor.unconsumed_tail:
        raise InvalidArgument(f"decompressed body exceeds the {limit}-byte limit (--http-max-input-size)")
    return data


def compress(
    payload: bytes, headers: list[tuple[bytes, bytes]], accept_encoding: str
) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """``payload`` and its headers, compressed with the first of gzip and deflate the client accepts."""
    if not accept_encoding:
        return payload, headers
    accepted = {part.split(";")[0].strip().lower() for part in accept_encoding.split(",")}
    if "gzip" in accepted:
        return gzip.compress(payload, compresslevel=1), [*headers, (b"content-encoding", b"gzip")]
    if "deflate" in accepted:
        return zlib.compress(payload, 1), [*headers, (b"content-encoding", b"deflate")]
    return payload, headers

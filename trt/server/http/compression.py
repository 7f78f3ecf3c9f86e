"""Compressed HTTP bodies: a request's ``Content-Encoding`` undone within the input limit, an answer
compressed as its ``Accept-Encoding`` allows (gzip or deflate, as Triton offers).

zlib is slow beside everything else a request costs (gzip at level 1 took 1.25 s for a 32 MB answer,
inflating 0.2 s), and it lets go of the GIL while it works: bodies past ``OFF_LOOP_BYTES`` are
compressed and inflated on a thread (``compressed``, ``decompressed``), so the event loop goes on
answering everyone else meanwhile; small ones in place, where a thread would cost more than it saves.
"""

from __future__ import annotations

import asyncio
import zlib

from trt.server.core.errors import InvalidArgument
from trt.server.http.messages import SplitBody

OFF_LOOP_BYTES = 1 << 18
# zlib's own gzip container, in one call that lets go of the GIL throughout (gzip.compress adds its
# header and checksum in steps that hold it: the loop waited 29 ms on a 32 MB answer, against 5 ms).
_GZIP_WBITS = 31


async def decompressed(body: bytes, encoding: str, limit: int) -> bytes:
    """``decompress``, on a thread for a large body."""
    if len(body) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(decompress, body, encoding, limit)
    return decompress(body, encoding, limit)


async def compressed(
    payload: bytes | SplitBody, headers: list[tuple[bytes, bytes]], accept_encoding: str
) -> tuple[bytes | SplitBody, list[tuple[bytes, bytes]]]:
    """``compress``, on a thread for a large payload."""
    if len(payload) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(compress, payload, headers, accept_encoding)
    return compress(payload, headers, accept_encoding)


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
    payload: bytes | SplitBody, headers: list[tuple[bytes, bytes]], accept_encoding: str
) -> tuple[bytes | SplitBody, list[tuple[bytes, bytes]]]:
    """``payload`` and its headers, compressed with the first of gzip and deflate the client accepts."""
    if not accept_encoding:
        return payload, headers
    accepted = {part.split(";")[0].strip().lower() for part in accept_encoding.split(",")}
    if "gzip" in accepted:
        return _deflated(payload, _GZIP_WBITS), [*headers, (b"content-encoding", b"gzip")]
    if "deflate" in accepted:
        return _deflated(payload, zlib.MAX_WBITS), [*headers, (b"content-encoding", b"deflate")]
    return payload, headers


def _deflated(payload: bytes | SplitBody, wbits: int) -> bytes:
    """Compressed at level 1 (speed over size); a split body piece by piece, never joined first."""
    if not isinstance(payload, SplitBody):
        return zlib.compress(payload, 1, wbits)
    compressor = zlib.compressobj(1, zlib.DEFLATED, wbits)
    pieces = [compressor.compress(part) for part in payload.parts]
    pieces.append(compressor.flush())
    return b"".join(pieces)

"""gRPC message compression: ``grpc-encoding`` gzip and deflate both ways, decompression bounded.

Requests: a message whose compressed flag is set is inflated per its call's ``grpc-encoding``, never
past the message size limit (a small message must not become gigabytes). Responses: Triton
compresses inference responses at ``--grpc-infer-response-compression-level`` when the client
accepts it; the level picks the algorithm as grpc-core does (low: the first of gzip, deflate that the
client accepts; medium and high: the last of them).

zlib takes long beside the rest of a call (a 32 MB message: about a second to deflate, 0.2 s to
inflate) and lets go of the GIL while it works, so messages past ``OFF_LOOP_BYTES`` are deflated and
inflated on a thread and the event loop goes on serving every other call: a large request message
waits in the call as ``Deflated`` until its handler takes it (``inflated``), and a large answer is
deflated before it is framed (``deflated_reply``, whose ``Deflated`` the call sends as it is).
"""

from __future__ import annotations

import asyncio
import zlib

from google.protobuf.message import Message

from trt.server.grpc.errors import GrpcError, StatusCode

ACCEPT_ENCODING = "identity,deflate,gzip"
KNOWN = frozenset({"identity", "gzip", "deflate"})
_RANKED = ("gzip", "deflate")
_WBITS = {"gzip": 31, "deflate": 15}  # gzip header; zlib header (what gRPC calls deflate)
OFF_LOOP_BYTES = 1 << 18


class Deflated(bytes):
    """A message as it travels compressed: a request's not yet inflated, or an answer already deflated."""


async def inflated(message: Deflated, encoding: str | None, limit: int) -> bytes:
    """A large request message as its handler takes it, inflated on a thread."""
    assert encoding is not None
    return await asyncio.to_thread(decompress, message, encoding, limit)


async def deflated_reply(
    reply: bytes | memoryview | Message | None, encoding: str | None
) -> bytes | memoryview | Message | None:
    """``reply`` serialized and deflated on a thread when it is large and the call's answers are
    compressed; else as it was (framing compresses a small one in place)."""
    if encoding is None or reply is None:
        return reply
    payload = reply.SerializeToString() if isinstance(reply, Message) else reply
    return payload if len(payload) <= OFF_LOOP_BYTES else await deflated(payload, encoding)


async def deflated(payload: bytes | memoryview, encoding: str) -> Deflated:
    """``payload`` compressed on a thread, marked to be sent as it is."""
    return Deflated(await asyncio.to_thread(compress, payload, encoding))


def decompress(data: bytes | memoryview, encoding: str, limit: int) -> bytes:
    inflater = zlib.decompressobj(_WBITS[encoding])
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise GrpcError(StatusCode.INTERNAL, f"cannot decompress the {encoding} message: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise GrpcError(
            StatusCode.RESOURCE_EXHAUSTED,
            f"grpc: received message after decompression larger than max ({limit})",
        )
    if not inflater.eof:
        raise GrpcError(StatusCode.INTERNAL, f"the {encoding} message is truncated")
    return out


def compress(data: bytes | memoryview, encoding: str) -> bytes:
    if type(data) is Deflated:
        return data
    deflater = zlib.compressobj(wbits=_WBITS[encoding])
    return deflater.compress(data) + deflater.flush()


def response_encoding(level: str, accepted: str | None) -> str | None:
    """The algorithm for a response at ``level`` given the client's ``grpc-accept-encoding``."""
    if level == "none" or not accepted:
        return None
    names = {name.strip() for name in accepted.split(",")}
    usable = [name for name in _RANKED if name in names]
    if not usable:
        return None
    return usable[0] if level == "low" else usable[-1]

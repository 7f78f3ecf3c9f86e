"""gRPC message compression: ``grpc-encoding`` gzip and deflate both ways, decompression bounded.

Requests: a message whose compressed flag is set is inflated per its call's ``grpc-encoding``, never
past the message size limit (a small message must not become gigabytes). Responses: Triton
compresses inference responses at ``--grpc-infer-response-compression-level`` when the client
accepts it; the level picks the algorithm as grpc-core does (low: the first of gzip, deflate that the
client accepts; medium and high: the last of them).
"""

from __future__ import annotations

import zlib

from trt.server.grpc.errors import GrpcError, StatusCode

ACCEPT_ENCODING = "identity,deflate,gzip"
KNOWN = frozenset({"identity", "gzip", "deflate"})
_RANKED = ("gzip", "deflate")
_WBITS = {"gzip": 31, "deflate": 15}  # gzip header; zlib header (what gRPC calls deflate)


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

"""gRPC status codes, and the one place the gRPC transport turns exceptions into them.

``ServerError`` subclasses carry their code name (``InvalidArgument`` -> ``INVALID_ARGUMENT``);
``GrpcError`` is the transport's own (a message over the size limit, a method that does not exist);
any other exception is a bug of ours and answers ``INTERNAL`` with its text, after being logged.
"""

from __future__ import annotations

import logging
from enum import IntEnum

from trt.http2.hpack import encode_literal
from trt.server.core.errors import DecoupledModelNeedsStream, ServerError

logger = logging.getLogger("trt.grpc")


class StatusCode(IntEnum):
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class GrpcBindError(OSError):
    """The gRPC endpoint could not listen on its address (port in use, address not local)."""


class GrpcError(Exception):
    """A call the transport itself refuses, with the status it answers."""

    def __init__(self, code: StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def status_of(exc: BaseException, rpc: str) -> tuple[StatusCode, str]:
    """Status code and message a failed RPC answers with."""
    if isinstance(exc, DecoupledModelNeedsStream):  # Triton's words, then which model and what to use
        return StatusCode.UNIMPLEMENTED, (
            f"{rpc} RPC doesn't support models with decoupled transaction policy (model "
            f"'{exc.model_name}': use ModelStreamInfer)"
        )
    if isinstance(exc, ServerError):
        return StatusCode[exc.grpc_code_name], exc.message
    if isinstance(exc, GrpcError):
        return exc.code, exc.message
    logger.error("unhandled error in %s", rpc, exc_info=exc)
    return StatusCode.INTERNAL, f"internal error: {exc}"


_UNRESERVED = frozenset(range(0x20, 0x7F)) - {ord("%")}


def percent_encode(message: str) -> str:
    """``grpc-message``: UTF-8, with bytes outside printable ASCII (and ``%``) as ``%XX``."""
    data = message.encode("utf-8", "replace")
    if all(byte in _UNRESERVED for byte in data):
        return message
    return "".join(chr(byte) if byte in _UNRESERVED else f"%{byte:02X}" for byte in data)


def status_block(code: StatusCode, message: str) -> bytes:
    """``grpc-status`` (and ``grpc-message``, percent-encoded) as an HPACK block, for trailers."""
    block = encode_literal("grpc-status", str(int(code)))
    if message:
        block += encode_literal("grpc-message", percent_encode(message))
    return block

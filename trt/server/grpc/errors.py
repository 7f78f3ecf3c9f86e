"""The one place the gRPC transport turns exceptions into status codes.

``ServerError`` subclasses carry their code name (``InvalidArgument`` -> ``INVALID_ARGUMENT``); any
other exception is a bug of ours and answers ``INTERNAL`` with its text, after being logged.
"""

from __future__ import annotations

import logging

import grpc

from trt.server.core.errors import ServerError

logger = logging.getLogger("trt.grpc")


class GrpcBindError(OSError):
    """The gRPC endpoint could not listen on its address (port in use, address not local)."""


def status_of(exc: Exception, rpc: str) -> tuple[grpc.StatusCode, str]:
    """Status code and message a failed RPC answers with."""
    if isinstance(exc, ServerError):
        return grpc.StatusCode[exc.grpc_code_name], exc.message
    logger.error("unhandled error in %s", rpc, exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal error: {exc}"

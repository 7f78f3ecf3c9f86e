"""``pb_utils.TritonError`` codes and the core's errors, both ways: errors a model reports become the
core's, and the core's errors a model's call meets reach it with Triton's code."""

from __future__ import annotations

from typing import Any

from trt.server.core.errors import (
    AlreadyExists,
    InvalidArgument,
    NotFound,
    ServerError,
    Unavailable,
    Unsupported,
)

INTERNAL = 1  # pb_utils.TritonError.INTERNAL
INVALID_ARG = 3
CANCELLED = 7

_ERRORS_BY_CODE: dict[int, type[ServerError]] = {
    2: NotFound, 3: InvalidArgument, 4: Unavailable, 5: Unsupported, 6: AlreadyExists,
}  # fmt: skip
_CODES_BY_TRITON_NAME = {
    "NOT_FOUND": 2,
    "INVALID_ARG": 3,
    "UNAVAILABLE": 4,
    "UNSUPPORTED": 5,
    "ALREADY_EXISTS": 6,
}


def error_from_model(message: str, code: int) -> ServerError:
    """The core's error for a ``TritonError`` the model process reported."""
    return _ERRORS_BY_CODE.get(code, ServerError)(message)


def error_answer(exc: ServerError) -> dict[str, Any]:
    """The answer to a model's call that failed with ``exc``: its message and Triton's code."""
    return {"error": (exc.message, _CODES_BY_TRITON_NAME.get(exc.triton_code, INTERNAL))}

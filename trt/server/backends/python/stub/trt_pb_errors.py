"""``pb_utils.TritonError`` (an error a model reports, with Triton's code) and
``pb_utils.TritonModelException`` (what pb_utils raises when a model misuses it)."""

from __future__ import annotations


class TritonError(Exception):
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class TritonModelException(Exception):
    pass

"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

The core's errors (``trt.server.core.errors``) keep their HTTP status and are given the OpenAI type
that goes with it; errors of this front end's own (a field of the request, an unknown model, a
restricted route) say which field and which code, as OpenAI's API does.
"""

from __future__ import annotations

import orjson

from trt.server.core.errors import ModelNotFound, ModelNotReady, ServerError

# OpenAI's error types by HTTP status; any other 4xx is an invalid request, any 5xx a server error.
_TYPES = {401: "authentication_error", 403: "permission_error", 404: "invalid_request_error"}


class OpenAIError(Exception):
    """An error answered in OpenAI's shape with ``status``."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    @property
    def type(self) -> str:
        if self.status in _TYPES:
            return _TYPES[self.status]
        return "invalid_request_error" if self.status < 500 else "server_error"

    def body(self) -> bytes:
        """The error object, alone: the body of an error response or the data of an error event."""
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return orjson.dumps({"error": error})


def invalid(message: str, param: str | None = None, code: str | None = "invalid_value") -> OpenAIError:
    """A request OpenAI would call invalid (400), naming the field at fault."""
    return OpenAIError(400, message, param, code)


def model_not_found(name: str) -> OpenAIError:
    return OpenAIError(404, f"The model `{name}` does not exist.", "model", "model_not_found")


def from_server_error(exc: ServerError, model: str | None = None) -> OpenAIError:
    """A core error with the status it carries; an unknown model is OpenAI's 404 ``model_not_found``."""
    if isinstance(exc, ModelNotFound) and model is not None:
        return model_not_found(model)
    if isinstance(exc, ModelNotReady):
        return OpenAIError(exc.http_status, exc.message, "model", "model_not_ready")
    return OpenAIError(exc.http_status, exc.message)

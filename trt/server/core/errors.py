"""Errors of the serving core, each carrying the status that both transports answer with.

The tree, with the Triton error code each one stands for::

    ServerError                    INTERNAL       HTTP 500  gRPC INTERNAL
    ├── InvalidArgument            INVALID_ARG    HTTP 400  gRPC INVALID_ARGUMENT
    │   ├── InvalidInput           a tensor in a request is wrong (name, shape, dtype, size)
    │   └── UnsafePath             a name or path from a request or a config would leave its folder
    ├── NotFound                   NOT_FOUND      HTTP 404  gRPC NOT_FOUND
    │   └── ModelNotFound          no such model, no such version, or no version serving
    ├── Unavailable                UNAVAILABLE    HTTP 503  gRPC UNAVAILABLE
    │   ├── ModelNotReady          the version exists but is not READY
    │   └── OverLimit              a resource limit of the server is reached (retry later)
    ├── Unsupported                UNSUPPORTED    HTTP 501  gRPC UNIMPLEMENTED
    │   └── DecoupledModelNeedsStream
    ├── AlreadyExists              ALREADY_EXISTS HTTP 400  gRPC ALREADY_EXISTS
    ├── ModelLoadError             a model could not be loaded (message says why)
    │   ├── ModelConfigError       a config.pbtxt is malformed or inconsistent
    │   └── ModelVersionsUnavailable  INVALID_ARG  HTTP 400  no version of it loaded (Triton's "load failed")

Transports map these once (``server.http.errors`` / ``server.grpc.service``); nothing else in the
core decides a status code.
"""

from __future__ import annotations

import reprlib
from typing import ClassVar

_QUOTING = reprlib.Repr()
_QUOTING.maxlevel, _QUOTING.maxstring, _QUOTING.maxother = 3, 80, 80
_QUOTING.maxlist = _QUOTING.maxtuple = _QUOTING.maxdict = 8


def quoted(value: object) -> str:
    """A value from a client as an error message shows it: its repr, bounded in length and depth.
    ``repr`` of a list nested a thousand deep (JSON allows it) raised RecursionError: a 500 where the
    client's mistake was a 400; and a long value was echoed whole."""
    return _QUOTING.repr(value)


def request_label(request_id: str) -> str:
    """What starts the message of an error Triton finds in a request's tensors (clients and Triton's own
    tests match on these texts): the request's id, or ``<id_unknown>`` when it has none."""
    return f"[request id: {request_id or '<id_unknown>'}] "


class ServerError(Exception):
    """Base of every error the core reports to a client."""

    http_status: ClassVar[int] = 500
    grpc_code_name: ClassVar[str] = "INTERNAL"
    triton_code: ClassVar[str] = "INTERNAL"
    # True when the model answered a request with this error (rather than the request being refused
    # before it ran): Triton's generate routes answer those 400, as the body of the first response.
    answered: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidArgument(ServerError):
    http_status = 400
    grpc_code_name = "INVALID_ARGUMENT"
    triton_code = "INVALID_ARG"


class InvalidInput(InvalidArgument):
    """A tensor or parameter in an inference request does not fit the model."""


class UnsafePath(InvalidArgument):
    """A name or path that comes from a client or a config would reach outside the folder it belongs
    to (``..``, an absolute path, a separator in a name, a NUL byte); see ``core.paths``."""


class NotFound(ServerError):
    http_status = 404
    grpc_code_name = "NOT_FOUND"
    triton_code = "NOT_FOUND"


class ModelNotFound(NotFound):
    """The request names a model or version the server does not know, or a model none of whose
    versions is serving.

    Triton 2.51 answers these NOT_FOUND (HTTP 404) with "Request for unknown model: ..." on infer,
    metadata, config and readiness by version; clients and Triton's own examples match on that text.
    """


class Unavailable(ServerError):
    http_status = 503
    grpc_code_name = "UNAVAILABLE"
    triton_code = "UNAVAILABLE"


class ModelNotReady(Unavailable):
    """The version exists but is not in the READY state (loading, unloading, failed)."""


class OverLimit(Unavailable):
    """A bound the server keeps on a resource (bytes held by requests, say) is reached: the request
    is refused at once rather than queued, like a full ``max_queue_size``; a retry later may pass."""


class Unsupported(ServerError):
    http_status = 501
    grpc_code_name = "UNIMPLEMENTED"
    triton_code = "UNSUPPORTED"


class DecoupledModelNeedsStream(Unsupported):
    """A single-response call (HTTP infer, gRPC ModelInfer, BLS ``exec()``) named a decoupled model."""

    def __init__(self, message: str, model_name: str) -> None:
        super().__init__(message)
        self.model_name = model_name


class AlreadyExists(ServerError):
    http_status = 400
    grpc_code_name = "ALREADY_EXISTS"
    triton_code = "ALREADY_EXISTS"


class ModelLoadError(ServerError):
    """A model failed to load; the message is what the repository index shows as its reason."""


class ModelVersionsUnavailable(ModelLoadError):
    """No version of a model could be loaded (none in its folder, or each failed): Triton answers a
    load request so with INVALID_ARG, ``load failed for model '<m>': ...``, and its tests match on it."""

    http_status = 400
    grpc_code_name = "INVALID_ARGUMENT"
    triton_code = "INVALID_ARG"


class ModelConfigError(ModelLoadError):
    """A model's configuration is malformed or disagrees with the model files.

    ``field`` says where in the config the problem is, as a path such as ``input[INPUT0].dims`` or
    ``ensemble_scheduling.step[1]`` (a bracket holds a tensor name or an index); ``line`` (and
    ``column``) are set when the text itself is at fault. ``trt repo validate`` turns either into a
    line of config.pbtxt.
    """

    def __init__(
        self, message: str, field: str = "", line: int | None = None, column: int | None = None
    ) -> None:
        super().__init__(message)
        self.field = field
        self.line = line
        self.column = column


class BackendUnavailable(ModelLoadError):
    """The backend a model needs is not installed (names the extra to install)."""

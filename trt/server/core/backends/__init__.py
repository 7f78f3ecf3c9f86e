"""The backend interface every backend implements, and the registry that finds a model's backend.

Backends (``trt.server.backends``, or plug-ins from other packages) depend on this; the core never
imports a backend module by name. A tensor backend's instances take named numpy arrays and return
them (``ModelInstance``); a request-level backend's instances take whole requests
(``RequestLevelInstance``), as Python models do. A package registers a backend under the
``trt.backends`` entry points, naming a ``BackendEntry`` (or the backend class itself): see
``registry``.
"""

from __future__ import annotations

from trt.server.core.backends.base import (
    SEQUENCE_END,
    SEQUENCE_START,
    Backend,
    BackendRequest,
    BackendResponse,
    InstanceSpec,
    ModelFiles,
    ModelInstance,
    RequestLevelInstance,
    ServerServices,
)
from trt.server.core.backends.registry import BackendEntry, ModelFormat

__all__ = [
    "SEQUENCE_END",
    "SEQUENCE_START",
    "Backend",
    "BackendEntry",
    "BackendRequest",
    "BackendResponse",
    "InstanceSpec",
    "ModelFiles",
    "ModelFormat",
    "ModelInstance",
    "RequestLevelInstance",
    "ServerServices",
]

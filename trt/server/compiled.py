"""The request path's modules that an optional build compiles to C with mypyc, and which of them
this installation runs compiled.

``TRT_COMPILE=1`` at build time (see ``setup.py``) compiles these; any other build, or a module that
failed to, runs them as Python. The code is the same either way: mypyc compiles the typed modules as
written, and checks their annotations at run time.

Chosen by where a request's CPU goes (``benchmarks/request_path.py``): HTTP parsing and framing,
the binary codec, the HTTP/2 server under gRPC and its message codecs, the Python models'
scheduling and hand-off, the statistics, and the data types that carry a request. Left out: modules
holding async generators, which mypyc cannot compile (``http/app.py``, ``grpc/call.py``,
``core/server.py``, ``core/models/version.py``); the rings' module ``_ipc``, which the model process
imports under another name, from beside its stub (compiled, the one module under two names crashed
the model process at start-up); and ``grpc/h2/stream.py``, whose stream class the gRPC calls extend
(an interpreted class cannot extend a compiled one).

Kept free of imports from trt: ``setup.py`` reads this file before anything is installed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util

COMPILED_MODULES: tuple[str, ...] = (
    "trt.server.http.protocol",
    "trt.server.http.codec",
    "trt.http2.frames",
    "trt.server.grpc.h2.connection",
    "trt.server.grpc.h2.control",
    "trt.server.grpc.h2.outbound",
    "trt.server.grpc.request_wire",
    "trt.server.grpc.response_wire",
    "trt.server.grpc.varints",
    "trt.server.core.types",
    "trt.server.core.datatypes",
    "trt.server.core.backends.base",
    "trt.server.core.extensions.statistics",
    "trt.server.core.scheduling.queued_bytes",
    "trt.server.core.scheduling.request_scheduler",
    "trt.server.backends.python.executions",
)


def compiled_modules() -> tuple[str, ...]:
    """Those of ``COMPILED_MODULES`` that load from a compiled extension here."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = []
    for name in COMPILED_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None and spec.origin.endswith(suffixes):
            found.append(name)
    return tuple(found)


def build_description(compiled: tuple[str, ...]) -> str:
    """One line for the start-up summary: which build this is (a partial one is worth a look)."""
    if not compiled:
        return "pure Python"
    return f"request path compiled with mypyc ({len(compiled)} of {len(COMPILED_MODULES)} modules)"

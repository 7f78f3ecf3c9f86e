"""Model control from a model: ``pb_utils.load_model``, ``unload_model`` and ``is_model_ready``.

As Triton: the server must run with --model-control-mode=explicit. A load holds one of the
server's load slots (--model-load-thread-count) while it runs, like any other load.
"""

from __future__ import annotations

import trt_pb_runtime


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) a model of the repository; ``config`` overrides its config (JSON), ``files``
    ("file:<version>/<name>" -> bytes, with ``config``) replace its files."""
    trt_pb_runtime.current.call("load_model", model_name, config, dict(files or {}))


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload a model: it is no longer ready when this returns; requests it holds still finish."""
    trt_pb_runtime.current.call("unload_model", model_name, unload_dependents)


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    return bool(trt_pb_runtime.current.call("model_ready", model_name, str(model_version)))

"""Finding a model's ``TritonPythonModel`` the way Triton's stub imports it, and running its
``auto_complete_config`` (``trt_python_stub.py --auto-complete``), which happens before any
connection to the server exists."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any

import triton_python_backend_utils as pb_utils
import trt_pb_runtime


def load_model_class(path: str) -> Any:
    """Import model.py as Triton does: its version folder and the model's folder appended to
    ``sys.path`` and the file imported as ``<version>.model``, so that it may import the modules
    beside it by name (``import helpers``) or relatively (``from .helpers import x``)."""
    model_py = os.path.abspath(path)
    version_dir = os.path.dirname(model_py)
    model_dir = os.path.dirname(version_dir)
    for folder in (version_dir, model_dir):
        if folder not in sys.path:
            sys.path.append(folder)
    package, stem = os.path.basename(version_dir), os.path.splitext(os.path.basename(model_py))[0]
    if package.isidentifier() or package.isdigit():
        module = importlib.import_module(f"{package}.{stem}")
    else:  # a folder name that cannot be a package: a plain module, without relative imports
        spec = importlib.util.spec_from_file_location(stem, model_py)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[stem] = module
        spec.loader.exec_module(module)
    sys.modules.setdefault("model", module)
    if not hasattr(module, "TritonPythonModel"):
        raise RuntimeError(f"{path} defines no class TritonPythonModel")
    return module.TritonPythonModel


class _StderrRuntime:
    """Log lines from auto_complete_config, which runs before any connection exists."""

    def log(self, level: str, message: str) -> None:
        print(f"[{level}] {message}", file=sys.stderr)

    def call(self, operation: str, *arguments: Any) -> Any:
        raise pb_utils.TritonModelException(f"{operation} is not available in auto_complete_config")

    def metric_update(self, operation: str, handle: int, value: float = 0.0) -> None:
        pass


def auto_complete(model_path: str, result_path: str) -> None:
    """Read a config JSON on stdin, let the model complete it, write the result to ``result_path``
    (not stdout: the model may print while it is imported)."""
    trt_pb_runtime.install(_StderrRuntime())
    config = json.loads(sys.stdin.read())
    model_class = load_model_class(model_path)
    if hasattr(model_class, "auto_complete_config"):
        completed = model_class.auto_complete_config(pb_utils.ModelConfig(config))
        config = completed.as_dict() if completed is not None else config
    with open(result_path, "w", encoding="utf-8") as out:
        json.dump(config, out)

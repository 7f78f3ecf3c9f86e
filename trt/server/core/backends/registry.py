"""Which backend serves a model, chosen from its config's ``backend``/``platform`` or its files.

Backends are imported only when a model needs them, so a missing optional dependency (torch,
tensorrt) affects only the models that use it, with a message naming the extra to install.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from pathlib import Path

from trt import DISTRIBUTION
from trt.protos import model_config_pb2
from trt.server.core.backends.base import Backend
from trt.server.core.errors import BackendUnavailable, ModelConfigError


@dataclass(frozen=True, slots=True)
class BackendEntry:
    name: str
    platform: str
    default_filename: str
    module: str  # "package.module:ClassName", imported on first use
    extra: str  # the pip extra that provides its dependencies


_ENTRIES: tuple[BackendEntry, ...] = (
    BackendEntry(
        "onnxruntime",
        "onnxruntime_onnx",
        "model.onnx",
        "trt.server.backends.onnxruntime:OnnxRuntimeBackend",
        "",
    ),
    BackendEntry(
        "pytorch", "pytorch_libtorch", "model.pt", "trt.server.backends.pytorch:PyTorchBackend", "torch"
    ),
    BackendEntry(
        "tensorrt", "tensorrt_plan", "model.plan", "trt.server.backends.tensorrt:TensorRTBackend", "tensorrt"
    ),
    BackendEntry("python", "", "model.py", "trt.server.backends.python:PythonBackend", ""),
    BackendEntry("ensemble", "ensemble", "", "trt.server.core.scheduling.ensemble:EnsembleBackend", ""),
)
_BY_NAME = {entry.name: entry for entry in _ENTRIES}
_BY_PLATFORM = {entry.platform: entry for entry in _ENTRIES if entry.platform}
ENSEMBLE_PLATFORM = "ensemble"
_instances: dict[str, Backend] = {}


def resolve_entry(config: model_config_pb2.ModelConfig, version_dirs: list[Path]) -> BackendEntry:
    """The backend for a config; fills ``backend`` and ``platform`` the way Triton reports them."""
    entry: BackendEntry | None
    if config.backend:
        entry = _BY_NAME.get(config.backend)
        if entry is None:
            raise ModelConfigError(
                f"unknown backend '{config.backend}'{_suggestion(config.backend)}; supported backends: "
                f"{', '.join(sorted(_BY_NAME))}",
                "backend",
            )
        if config.platform and config.platform != entry.platform:
            raise ModelConfigError(
                f"backend '{config.backend}' does not match platform '{config.platform}'"
                f" (expected platform '{entry.platform}' or none)",
                "platform",
            )
    elif config.platform:
        entry = _BY_PLATFORM.get(config.platform)
        if entry is None:
            known = ", ".join(sorted(_BY_PLATFORM))
            raise ModelConfigError(
                f"unknown platform '{config.platform}'{_suggestion(config.platform)}; supported platforms: "
                f"{known}",
                "platform",
            )
    else:
        entry = _detect_from_files(config, version_dirs)
    config.backend = entry.name
    if entry.platform:
        config.platform = entry.platform
    return entry


def _suggestion(wrong: str) -> str:
    """The platform or backend line that was probably meant: a backend name written as a platform
    (``platform: "onnxruntime"``) is the most common slip."""
    lowered = wrong.lower()
    for entry in _ENTRIES:
        aliases = {entry.name, entry.platform, *entry.platform.split("_")} - {""}
        if lowered in aliases or any(alias.startswith(lowered) for alias in aliases if len(lowered) >= 4):
            if entry.platform:
                return f' (did you mean platform: "{entry.platform}" or backend: "{entry.name}"?)'
            return f' (did you mean backend: "{entry.name}"? Python models have no platform)'
    names = [*_BY_NAME, *_BY_PLATFORM]
    close = difflib.get_close_matches(lowered, names, n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _detect_from_files(config: model_config_pb2.ModelConfig, version_dirs: list[Path]) -> BackendEntry:
    for version_dir in version_dirs:
        for entry in _ENTRIES:
            if not entry.default_filename:
                continue  # ensembles have no model file: they are named by platform only
            filename = config.default_model_filename or entry.default_filename
            if (version_dir / filename).exists() and (
                not config.default_model_filename or filename.endswith(Path(entry.default_filename).suffix)
            ):
                return entry
    raise ModelConfigError(
        "config names neither 'platform' nor 'backend', and no model file identifies one "
        "(expected model.onnx, model.pt, model.plan or model.py in a version folder)"
    )


def get_backend(entry: BackendEntry) -> Backend:
    known = _instances.get(entry.name)
    if known is not None:
        return known
    module_name, class_name = entry.module.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        hint = f"; install it with: pip install '{DISTRIBUTION}[{entry.extra}]'" if entry.extra else ""
        raise BackendUnavailable(
            f"backend '{entry.name}' is not available: {exc.name} is not installed{hint}"
        ) from None
    backend: Backend = getattr(module, class_name)()
    _instances[entry.name] = backend
    return backend

"""Which backend serves a model, chosen from its config's ``backend``/``platform`` or its files.

Backends are found through Python entry points in the group ``trt.backends``: each names a
``BackendEntry`` (what the registry needs before importing the backend: its name, platforms, model
files, the pip requirement of its dependencies) or, more briefly, the backend class itself. trt's own
backends register there too (``[project.entry-points."trt.backends"]`` in pyproject.toml), so a
package that declares one, once installed, adds ``backend: "<name>"`` without touching trt. The core
imports no backend module by name: a backend's module is imported when a model first needs it, and
a missing optional dependency fails only the models that use it, with a message naming what to
install.

Run from a source checkout, trt reads its own entries from that checkout's pyproject.toml: the
metadata of an editable install is written at install time and may predate them.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import logging
import re
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trt
from trt import DISTRIBUTION
from trt.protos import model_config_pb2
from trt.server.core.backends.base import Backend
from trt.server.core.errors import BackendUnavailable, ModelConfigError

logger = logging.getLogger("trt.backends")

ENTRY_POINT_GROUP = "trt.backends"
ENSEMBLE_PLATFORM = "ensemble"


@dataclass(frozen=True, slots=True)
class ModelFormat:
    """One kind of model file a backend reads: Triton's platform name for it ("" where the backend has
    none) and the file (or folder) a version holds by default ("" where there is none)."""

    platform: str
    default_filename: str


@dataclass(frozen=True, slots=True)
class BackendEntry:
    """A backend as the registry knows it before importing it.

    ``target`` is ``"package.module:ClassName"``, imported when a model first needs the backend; a
    ``ModuleNotFoundError`` then becomes ``BackendUnavailable`` naming ``install``. ``formats`` are in
    the order file detection tries them. ``gpu``: its instances may be KIND_GPU (KIND_AUTO picks the
    GPU where one is present). ``decoupled``: it may answer a request with many responses.
    """

    name: str
    target: str
    formats: tuple[ModelFormat, ...] = ()
    install: str = ""  # the pip requirement that provides its dependencies, e.g. "trt-serve[torch]"
    gpu: bool = False
    decoupled: bool = False

    @property
    def platform(self) -> str:
        """The platform of its first format: what ``backend: "<name>"`` alone stands for."""
        return self.formats[0].platform if self.formats else ""

    @property
    def default_filename(self) -> str:
        return self.formats[0].default_filename if self.formats else ""

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(f.platform for f in self.formats if f.platform)


# The ensemble scheduler is part of the core, not a backend a package could provide.
ENSEMBLE = BackendEntry(
    "ensemble",
    "trt.server.core.scheduling.ensemble:EnsembleBackend",
    (ModelFormat(ENSEMBLE_PLATFORM, ""),),
    decoupled=True,
)


@dataclass(frozen=True)
class _Catalog:
    entries: tuple[BackendEntry, ...]  # in detection order: trt's own as declared, then plug-ins
    broken: dict[str, str]  # backend name -> why its entry point could not be used

    def by_name(self, name: str) -> BackendEntry | None:
        return next((e for e in self.entries if e.name == name), None)

    def by_platform(self, platform: str) -> BackendEntry | None:
        return next((e for e in self.entries if platform in e.platforms), None)

    def platforms(self) -> list[str]:
        return sorted({p for e in self.entries for p in e.platforms})


_lock = threading.RLock()  # a plug-in module may ask for the catalog as it loads
_catalog_cache: _Catalog | None = None
_instances: dict[str, Backend] = {}


def catalog() -> _Catalog:
    """Every backend this process can serve, discovered once (models load in several threads)."""
    global _catalog_cache
    with _lock:
        if _catalog_cache is None:
            _catalog_cache = _discover()
        return _catalog_cache


def entries() -> tuple[BackendEntry, ...]:
    return catalog().entries


def model_filenames() -> tuple[str, ...]:
    """The default model file of every backend, in detection order (``trt repo validate`` names one it
    finds directly in a model folder, outside any version)."""
    return tuple(f.default_filename for e in entries() for f in e.formats if f.default_filename)


# -- discovery ---------------------------------------------------------------------------------------


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _source_checkout_entry_points() -> list[tuple[str, str]] | None:
    """trt's own entries from the pyproject.toml of the checkout it runs from, or None when it is an
    installed copy."""
    pyproject = Path(trt.__file__).resolve().parent.parent / "pyproject.toml"
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    project = document.get("project", {})
    if project.get("name") != DISTRIBUTION:
        return None
    declared = project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    return [(str(name), str(value)) for name, value in declared.items()]


def _declared() -> list[tuple[str, str, str]]:
    """(name, "module:attribute", distribution) of every entry point, trt's own first."""
    own = _source_checkout_entry_points()
    declared = [(name, value, DISTRIBUTION) for name, value in own or []]
    others: list[tuple[str, str, str]] = []
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        origin = point.dist.name if point.dist is not None else "an unknown distribution"
        if _normalized(origin) == _normalized(DISTRIBUTION):
            if own is None:
                declared.append((point.name, point.value, DISTRIBUTION))
            continue
        others.append((point.name, point.value, origin))
    return declared + sorted(others)


def _load(value: str) -> Any:
    module_name, _, attribute = value.partition(":")
    found: Any = importlib.import_module(module_name.strip())
    for part in attribute.strip().split(".") if attribute.strip() else []:
        found = getattr(found, part)
    return found


def _as_entry(name: str, found: Any, origin: str) -> BackendEntry:
    """The entry an entry point names: a ``BackendEntry`` as it is, or a backend class described by its
    ``name``, ``platform`` and ``default_filename``."""
    if isinstance(found, BackendEntry):
        entry = found
    elif isinstance(found, type) and isinstance(getattr(found, "name", None), str):
        platform = getattr(found, "platform", "") or ""
        filename = getattr(found, "default_filename", "") or ""
        entry = BackendEntry(
            str(getattr(found, "name")),  # noqa: B009  (a class attribute mypy cannot see on ``type``)
            f"{found.__module__}:{found.__qualname__}",
            (ModelFormat(str(platform), str(filename)),) if platform or filename else (),
        )
    else:
        raise TypeError(f"it names {type(found).__name__}, neither a BackendEntry nor a backend class")
    if entry.name != name:
        raise ValueError(f"the entry point is named '{name}' but the backend calls itself '{entry.name}'")
    if not entry.install and _normalized(origin) != _normalized(DISTRIBUTION):
        entry = dataclasses.replace(entry, install=origin)
    return entry


def _discover() -> _Catalog:
    found: list[BackendEntry] = []
    broken: dict[str, str] = {}
    for name, value, origin in _declared():
        if any(e.name == name for e in found) or name == ENSEMBLE.name:
            logger.warning(
                "backend '%s' from %s ignored: a backend of that name is already registered", name, origin
            )
            continue
        try:
            entry = _as_entry(name, _load(value), origin)
        except Exception as exc:  # a broken plug-in fails its own models only
            reason = (
                f"backend '{name}' ({value}, from {origin}) could not be loaded: {type(exc).__name__}: {exc}"
            )
            logger.warning("%s", reason)
            broken[name] = reason
            continue
        taken = [p for p in entry.platforms for e in found if p in e.platforms]
        if taken:
            logger.warning(
                "backend '%s' from %s ignored: platform '%s' is already served", name, origin, taken[0]
            )
            continue
        found.append(entry)
    if not found:
        logger.warning(
            "no backends registered in entry point group '%s': reinstall %s (pip install -e .)",
            ENTRY_POINT_GROUP,
            DISTRIBUTION,
        )
    return _Catalog((*found, ENSEMBLE), broken)


# -- choosing a model's backend ------------------------------------------------------------------------


def resolve_entry(config: model_config_pb2.ModelConfig, version_dirs: list[Path]) -> BackendEntry:
    """The backend for a config; fills ``backend`` and ``platform`` the way Triton reports them."""
    known = catalog()
    entry: BackendEntry | None
    if config.backend:
        entry = known.by_name(config.backend)
        if entry is None:
            if config.backend in known.broken:
                raise BackendUnavailable(known.broken[config.backend])
            raise ModelConfigError(
                f"unknown backend '{config.backend}'{_suggestion(config.backend)}; supported backends: "
                f"{', '.join(sorted(e.name for e in known.entries))}",
                "backend",
            )
        if config.platform and config.platform not in entry.platforms:
            expected = " or ".join(f"'{p}'" for p in entry.platforms) or "none"
            raise ModelConfigError(
                f"backend '{config.backend}' does not match platform '{config.platform}'"
                f" (expected platform {expected}{' or none' if entry.platforms else ''})",
                "platform",
            )
        if not config.platform:
            config.platform = _platform_from_files(entry, config, version_dirs)
    elif config.platform:
        entry = known.by_platform(config.platform)
        if entry is None:
            raise ModelConfigError(
                f"unknown platform '{config.platform}'{_suggestion(config.platform)}; supported platforms: "
                f"{', '.join(known.platforms())}",
                "platform",
            )
    else:
        entry, model_format = _detect_from_files(config, version_dirs)
        config.platform = model_format.platform
    config.backend = entry.name
    return entry


def format_of(entry: BackendEntry, config: model_config_pb2.ModelConfig) -> ModelFormat:
    """The format a resolved config's model is in: its platform's, else the backend's first."""
    return next((f for f in entry.formats if f.platform and f.platform == config.platform), None) or (
        entry.formats[0] if entry.formats else ModelFormat("", "")
    )


def _platform_from_files(
    entry: BackendEntry, config: model_config_pb2.ModelConfig, version_dirs: list[Path]
) -> str:
    """``backend`` without ``platform``, for a backend of several platforms (TensorFlow's SavedModel
    and GraphDef): the one ``default_model_filename`` or the version folder names, else the first."""
    if len(entry.platforms) < 2:
        return entry.platform
    for model_format in entry.formats:
        if config.default_model_filename == model_format.default_filename:
            return model_format.platform
    if not config.default_model_filename:
        for version_dir in version_dirs:
            for model_format in entry.formats:
                if model_format.default_filename and (version_dir / model_format.default_filename).exists():
                    return model_format.platform
    return entry.platform


def _suggestion(wrong: str) -> str:
    """The platform or backend line that was probably meant: a backend name written as a platform
    (``platform: "onnxruntime"``) is the most common slip."""
    lowered = wrong.lower()
    known = entries()
    for entry in known:
        for platform in entry.platforms or ("",):
            aliases = {entry.name, platform, *platform.split("_")} - {""}
            if lowered in aliases or any(alias.startswith(lowered) for alias in aliases if len(lowered) >= 4):
                if platform:
                    return f' (did you mean platform: "{platform}" or backend: "{entry.name}"?)'
                return f' (did you mean backend: "{entry.name}"? it has no platform)'
    names = [*(e.name for e in known), *(p for e in known for p in e.platforms)]
    close = difflib.get_close_matches(lowered, names, n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _detect_from_files(
    config: model_config_pb2.ModelConfig, version_dirs: list[Path]
) -> tuple[BackendEntry, ModelFormat]:
    for version_dir in version_dirs:
        for entry in entries():
            for model_format in entry.formats:
                if not model_format.default_filename:
                    continue  # ensembles have no model file: they are named by platform only
                filename = config.default_model_filename or model_format.default_filename
                if (version_dir / filename).exists() and (
                    not config.default_model_filename
                    or filename.endswith(Path(model_format.default_filename).suffix)
                ):
                    return entry, model_format
    expected = ", ".join(model_filenames())
    raise ModelConfigError(
        "config names neither 'platform' nor 'backend', and no model file identifies one "
        f"(expected one of {expected} in a version folder)"
    )


def backend_unavailable(entry: BackendEntry, missing: ModuleNotFoundError) -> BackendUnavailable:
    """The error for a backend whose dependency is not installed, naming the extra that provides it
    (also raised by a backend that imports its heavy half only when a model needs it)."""
    hint = f"; install it with: pip install '{entry.install}'" if entry.install else ""
    return BackendUnavailable(
        f"backend '{entry.name}' is not available: {missing.name} is not installed{hint}"
    )


def get_backend(entry: BackendEntry) -> Backend:
    """The backend object for ``entry``, its module imported on first use (outside the lock: importing
    TensorFlow takes seconds, and other models go on loading meanwhile)."""
    backend = _instances.get(entry.name)
    if backend is not None:
        return backend
    module_name, _, class_name = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise backend_unavailable(entry, exc) from None
    with _lock:
        return _instances.setdefault(entry.name, getattr(module, class_name)())

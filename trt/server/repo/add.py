"""``trt repo add``: put a model file into a repository with a complete config.pbtxt read from it.

The file is staged in a scratch folder inside the repository, its config is built and checked there
by the same backend code that loads it in ``trt serve`` (auto-complete, the config rules, the
backend's check of the config against the file), and only then moved into place. Nothing in the
repository changes when any of that fails.

- ``.onnx``: inputs, outputs, dtypes, dims and the batch dimension come from the file.
- ``.pt`` (TorchScript): the file records no shapes; inputs come from ``--input``, outputs from
  running the model on zeros (``server.repo.torchscript_probe``) unless ``--output`` gives them.
- ``.plan`` (TensorRT): from the engine's I/O tensors (needs ``trt-serve[tensorrt]``).
- ``model.py``: from ``auto_complete_config`` when it has one, else ``--input``/``--output``. A folder
  holding model.py is copied whole (the modules model.py imports with it), less caches and hidden files.

Files the model needs beside it go into the version folder too: an ONNX model's external data files
(found in the file, at their relative locations) and each ``--include`` file or folder.

A new version of an existing model keeps that model's config.pbtxt when the new file fits it.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trt.protos import model_config_pb2
from trt.server.core.backends.base import ModelFiles
from trt.server.core.backends.registry import BackendEntry, get_backend, resolve_entry
from trt.server.core.errors import BackendUnavailable, InvalidArgument, ModelConfigError, ModelLoadError
from trt.server.core.models.config import config_to_text, read_config_file
from trt.server.core.models.config_rules import check_config
from trt.server.core.models.repository import version_folders
from trt.server.repo.onnx_external_data import ExternalDataError, external_data_files
from trt.server.repo.tensor_spec import TensorSpec

Config = model_config_pb2.ModelConfig
DEFAULT_MAX_BATCH_SIZE = 4  # what Triton's auto-complete picks (--backend-config=default-max-batch-size)
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
# File suffix -> (backend, platform, file name in the version folder).
_FORMATS = {
    ".onnx": ("onnxruntime", "onnxruntime_onnx", "model.onnx"),
    ".pt": ("pytorch", "pytorch_libtorch", "model.pt"),
    ".pth": ("pytorch", "pytorch_libtorch", "model.pt"),
    ".torchscript": ("pytorch", "pytorch_libtorch", "model.pt"),
    ".plan": ("tensorrt", "tensorrt_plan", "model.plan"),
    ".engine": ("tensorrt", "tensorrt_plan", "model.plan"),
    ".py": ("python", "", "model.py"),
}
# Left out when a folder is copied: what Python writes on import, and what the user's tools keep there.
_SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")


class RepoError(InvalidArgument):
    """A ``trt repo`` command cannot do what was asked; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class AddOptions:
    name: str | None = None
    version: int | None = None
    max_batch_size: int | None = None
    dynamic_batching: bool | None = None  # None: as auto-complete decides
    instances: int | None = None
    kind: str | None = None  # "cpu" or "gpu"
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    includes: tuple[Path, ...] = ()  # files or folders copied beside the model file
    force: bool = False

    def shapes_config(self) -> bool:
        """Whether the options say something about the config (so an existing one would change)."""
        settings = (self.max_batch_size, self.dynamic_batching, self.instances, self.kind)
        return any(value is not None for value in settings) or bool(self.inputs or self.outputs)


@dataclass(frozen=True, slots=True)
class AddResult:
    model: str
    version: int
    model_dir: Path
    model_file: Path
    config_path: Path
    config_written: bool  # False when the model's existing config.pbtxt was kept
    config: Config
    extra_files: tuple[str, ...]  # copied beside the model file, relative to the version folder


@dataclass(frozen=True, slots=True)
class _Extra:
    """A file or folder that goes into the version folder beside the model file."""

    source: Path
    target: str  # relative to the version folder, '/'-separated
    origin: str  # where it came from, for messages: "--include", "from the model folder", "external data"


def add_model(source: Path, repository: Path, options: AddOptions) -> AddResult:
    model_source = _model_source(source)
    if model_source.suffix.lower() not in _FORMATS:
        raise RepoError(
            f"cannot tell the format of '{model_source.name}': trt repo add takes .onnx, .pt (TorchScript), "
            ".plan (TensorRT), model.py or a folder holding model.py"
        )
    backend_name, platform, filename = _FORMATS[model_source.suffix.lower()]
    name = options.name or default_name(source)
    if not valid_model_name(name):
        raise RepoError(f"'{name}' cannot be a model name: use letters, digits, '_', '-' and '.'")
    model_dir = repository / name
    existing = version_folders(model_dir)
    version = options.version or max(existing, default=0) + 1
    if version < 1:
        raise RepoError("versions start at 1")
    if version in existing and not options.force:
        raise RepoError(
            f"model '{name}' already has version {version} ({model_dir / str(version)}); pass --force to "
            "replace it, or --version to choose another"
        )
    config_path = model_dir / "config.pbtxt"
    keep_config = config_path.is_file() and not options.shapes_config()
    if config_path.is_file() and not keep_config and not options.force:
        raise RepoError(
            f"{config_path} exists and the options given would change it; pass --force to replace it "
            "(the old one is kept as config.pbtxt.orig)"
        )
    # Found and checked before anything is written, so a bad one leaves the repository as it was.
    external = _onnx_external_data(model_source) if filename == "model.onnx" else []
    extras = [*(external or []), *_folder_entries(source, model_source), *_includes(options.includes)]
    _check_places(extras, filename)
    for folder in [source, *(extra.source for extra in extras)]:
        if folder.is_dir() and repository.resolve().is_relative_to(folder.resolve()):
            raise RepoError(
                f"the repository {repository} is inside {folder}, which would be copied into it: keep the "
                "repository outside the folders being added"
            )
    repository.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".trt-add-", dir=repository))
    try:
        staged_version = staging / str(version)
        staged_version.mkdir()
        staged_file = staged_version / filename
        shutil.copy2(model_source, staged_file)
        for extra in extras:
            _copy(extra.source, staged_version / extra.target)
        files = ModelFiles(name, version, model_dir, staged_version)
        with _hint_onnx_missing(external is None):
            if keep_config:
                config = read_config_file(config_path)
                try:
                    _checked(config, files)
                except ModelConfigError as exc:
                    if not options.force:
                        raise RepoError(
                            f"the new file does not fit {config_path}: {exc.message}; pass --force to write "
                            "a new config from the file (the old one is kept as config.pbtxt.orig)"
                        ) from None
                    keep_config = False
            if not keep_config:
                config = new_config(name, backend_name, platform, staged_file, files, options)
        _move_into_place(staged_version, model_dir / str(version))
        if not keep_config:
            _write_config(config_path, config, _absolute(source).name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return AddResult(
        name,
        version,
        model_dir,
        model_dir / str(version) / filename,
        config_path,
        not keep_config,
        config,
        tuple(extra.target for extra in extras),
    )


def valid_model_name(name: str) -> bool:
    """Names that stay one folder inside the repository (no separators, no '..')."""
    return bool(_NAME.match(name))


def default_name(source: Path) -> str:
    """The file's stem; the folder's name for a model folder and for the conventional ``model.*`` files."""
    if source.is_dir():
        folder = _absolute(source)
        candidates = (folder, folder.parent)
    elif source.stem != "model":
        return source.stem
    else:
        candidates = (source.parent, source.parent.parent)
    for folder in candidates:
        # a version folder (ASCII digits) is named by its model's folder
        if folder.name and not (folder.name.isascii() and folder.name.isdigit()):
            return folder.name
    raise RepoError(f"cannot name the model from '{source}': give --name")


def _absolute(path: Path) -> Path:
    """``path`` from the root with '.' and '..' worked out, as written: a link keeps its own name."""
    return Path(os.path.abspath(path))


def _model_source(source: Path) -> Path:
    """The model file: ``source`` itself, or the model.py of a model folder."""
    if source.is_dir():
        if not (source / "model.py").is_file():
            raise RepoError(
                f"{source} is a folder without model.py: a folder is added as a Python model (model.py and "
                "the modules it imports); give the model file itself for the other formats"
            )
        return source / "model.py"
    if not source.is_file():
        raise RepoError(f"no model file at {source}")
    return source


def _folder_entries(source: Path, model_source: Path) -> list[_Extra]:
    if not source.is_dir():
        return []
    names = sorted(p.name for p in source.iterdir())
    skipped = _SKIPPED(str(source), names) | {model_source.name}
    return [_Extra(source / name, name, "from the model folder") for name in names if name not in skipped]


def _includes(includes: Iterable[Path]) -> list[_Extra]:
    extras = []
    for include in includes:
        if not include.exists():
            raise RepoError(f"--include {include}: no such file or folder")
        name = _absolute(include).name
        if not name:
            raise RepoError(f"--include {include}: give a file or a folder below the root")
        extras.append(_Extra(include, name, "--include"))
    return extras


def _check_places(extras: list[_Extra], filename: str) -> None:
    """Refuse two things meant for one place in the version folder."""
    taken: dict[str, _Extra] = {}
    for extra in extras:
        top = extra.target.split("/")[0]
        if top == filename:
            raise RepoError(
                f"{extra.source} ({extra.origin}) would overwrite the model file {filename} in the version "
                "folder: rename it or leave it out"
            )
        other = taken.setdefault(top, extra)
        # Several tensors may share a data file, or a data folder.
        if other is not extra and not (other.origin == extra.origin == _EXTERNAL_DATA):
            raise RepoError(
                f"{other.source} ({other.origin}) and {extra.source} ({extra.origin}) would both be "
                f"'{top}' in the version folder: rename one or leave it out"
            )


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, ignore=_SKIPPED)
    else:
        shutil.copy2(source, target)  # streamed: weights are never held in memory


_EXTERNAL_DATA = "external data"


def _onnx_external_data(model_file: Path) -> list[_Extra] | None:
    """The files an ONNX model keeps tensors in; None without the onnx package."""
    try:
        found = external_data_files(model_file)
    except ExternalDataError as exc:
        raise RepoError(exc.message) from None
    if found is None:
        return None
    return [_Extra(source, target, _EXTERNAL_DATA) for source, target in found]


@contextmanager
def _hint_onnx_missing(applies: bool) -> Iterator[None]:
    """Without onnx, external data files cannot be found: a model that needs them fails to load."""
    try:
        yield
    except ModelLoadError as exc:
        if not applies or isinstance(exc, ModelConfigError | BackendUnavailable):
            raise
        raise RepoError(
            f"{exc.message}; if the model keeps its weights in external data files, pip install onnx so "
            "trt repo add can find and copy them"
        ) from None


def new_config(
    name: str, backend_name: str, platform: str, model_file: Path, files: ModelFiles, options: AddOptions
) -> Config:
    config = Config(name=name, backend=backend_name, platform=platform)
    if options.max_batch_size is not None:
        if options.max_batch_size < 0:
            raise RepoError("--max-batch-size must be 0 or more")
        config.max_batch_size = options.max_batch_size
    _add_tensors(config.input, options.inputs)
    _add_tensors(config.output, options.outputs)
    if backend_name == "pytorch":
        _complete_torchscript(config, model_file, options)
    elif backend_name == "python" and not options.inputs and not _has_auto_complete(model_file):
        raise RepoError(
            "model.py has no auto_complete_config(), so its tensors cannot be read from it: give each with "
            "--input NAME:TYPE:DIMS and --output NAME:TYPE:DIMS"
        )
    if options.dynamic_batching is True:
        config.dynamic_batching.SetInParent()
    if options.instances is not None or options.kind is not None:
        group = config.instance_group.add()
        group.count = options.instances or 1
        group.kind = _kind(options.kind)
    # Auto-complete picks this batch size for a model that can batch: an explicit 0 must stay 0.
    batch_size = DEFAULT_MAX_BATCH_SIZE if options.max_batch_size is None else options.max_batch_size
    backend = get_backend(_backend_entry(config, files))
    backend.auto_complete(config, files, batch_size)
    if config.max_batch_size == 0 or options.dynamic_batching is False:
        config.ClearField("dynamic_batching")
    elif options.dynamic_batching is None and config.WhichOneof("scheduling_choice") is None:
        config.dynamic_batching.SetInParent()  # a model that batches gets a batcher unless told not to
    if options.dynamic_batching and config.max_batch_size == 0:
        raise RepoError("--dynamic-batching needs a model that batches: give --max-batch-size N (N > 0)")
    check_config(config)  # already complete: the loader's remaining checks
    backend.validate(config, files)
    return config


def _checked(config: Config, files: ModelFiles) -> None:
    """The loader's checks on an existing config, completed (on a copy) as the server would."""
    effective = Config()
    effective.CopyFrom(config)
    backend = get_backend(_backend_entry(effective, files))
    backend.auto_complete(effective, files, DEFAULT_MAX_BATCH_SIZE)
    check_config(effective)
    backend.validate(effective, files)


def _backend_entry(config: Config, files: ModelFiles) -> BackendEntry:
    return resolve_entry(config, [files.version_dir])


def _complete_torchscript(config: Config, model_file: Path, options: AddOptions) -> None:
    if not options.inputs:
        from trt.server.backends.pytorch import forward_signature

        signature = forward_signature(model_file)
        arguments = [a.name for a in signature.arguments or [] if not a.has_default]
        example = " ".join(f"--input INPUT__{i}:FP32:DIMS" for i in range(len(arguments))) or "--input ..."
        raise RepoError(
            f"a TorchScript file records no tensor types or shapes: give each input of {signature.text} with "
            f"--input NAME:TYPE:DIMS (e.g. {example}); outputs are read by running the model"
        )
    if options.outputs:
        return  # every tensor stated: taken as written
    from trt.server.repo.torchscript_probe import probe_outputs

    result = probe_outputs(model_file, options.inputs, try_batching=options.max_batch_size != 0)
    if options.max_batch_size is None:
        config.max_batch_size = DEFAULT_MAX_BATCH_SIZE if result.batches else 0
    elif options.max_batch_size > 0 and not result.batches:
        raise RepoError(
            f"--max-batch-size {options.max_batch_size}: the model's outputs do not follow a batch dimension "
            "added to its inputs; use --max-batch-size 0"
        )
    _add_tensors(config.output, result.outputs)


def _has_auto_complete(model_py: Path) -> bool:
    return "auto_complete_config" in model_py.read_text(encoding="utf-8", errors="replace")


def _add_tensors(tensors: object, specs: tuple[TensorSpec, ...]) -> None:
    for spec in specs:
        tensor = tensors.add()  # type: ignore[attr-defined]
        tensor.name = spec.name
        tensor.data_type = model_config_pb2.DataType.Value(spec.data_type)
        tensor.dims.extend(spec.dims)


def _kind(kind: str | None) -> int:
    kinds = {
        None: model_config_pb2.ModelInstanceGroup.KIND_AUTO,
        "auto": model_config_pb2.ModelInstanceGroup.KIND_AUTO,
        "cpu": model_config_pb2.ModelInstanceGroup.KIND_CPU,
        "gpu": model_config_pb2.ModelInstanceGroup.KIND_GPU,
    }
    if kind not in kinds:
        raise RepoError(f"--kind takes cpu or gpu, got '{kind}'")
    return kinds[kind]


def _move_into_place(staged_version: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        retired = target.with_name(f".{target.name}.replaced")
        shutil.rmtree(retired, ignore_errors=True)
        os.replace(target, retired)
        os.replace(staged_version, target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.replace(staged_version, target)


def _write_config(path: Path, config: Config, source_name: str) -> None:
    if path.exists():
        shutil.copy2(path, path.with_name("config.pbtxt.orig"))
    text = f"# Written by `trt repo add` from {source_name}; edit freely.\n" + config_to_text(config)
    temporary = path.with_name(".config.pbtxt.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)

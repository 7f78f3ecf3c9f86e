"""``trt repo list`` and ``trt repo show``: what a repository holds, as the server would load it."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trt.protos import model_config_pb2
from trt.server.core.errors import ModelLoadError, ServerError
from trt.server.core.models.loader import effective_config, read_model_config
from trt.server.core.models.repository import ModelRepository, version_folders
from trt.server.core.models.table import ModelKey
from trt.server.core.options import CoreOptions
from trt.server.repo.add import RepoError
from trt.server.repo.findings import Severity
from trt.server.repo.validate import ModelCheck

Config = model_config_pb2.ModelConfig


@dataclass(frozen=True, slots=True)
class ModelSummary:
    name: str
    path: str
    versions: list[int]  # every version folder
    served_versions: list[int]  # the ones the version policy serves
    backend: str
    inputs: list[str]  # "NAME TYPE [dims]"
    outputs: list[str]
    max_batch_size: int
    batching: str  # the scheduler, in words
    instances: str
    error: str = ""  # why the model would not load ("" when it would)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def open_repository(locations: Sequence[str | Path], namespacing: bool = False) -> ModelRepository:
    repository = ModelRepository(locations, namespacing)
    try:
        repository.refresh()
        repository.check_roots()
    except ModelLoadError as exc:
        raise RepoError(exc.message) from None
    return repository


def list_models(locations: Sequence[str | Path], namespacing: bool = False) -> list[ModelSummary]:
    """Each model as the server would load it; ``error`` is the first problem validate would report,
    but for the backends' own reading of the model files, which ``trt repo validate`` does. With
    ``namespacing`` (as ``trt serve --model-namespacing``), a name may repeat across repositories."""
    repository = open_repository(locations, namespacing)
    options = CoreOptions(model_repositories=tuple(repository.roots), model_namespacing=namespacing)
    summaries: list[ModelSummary] = []
    found = repository.scan_by_key()
    for key in sorted(found, key=ModelKey.by_name):
        name, location = key.name, found[key]
        checked = ModelCheck(location, repository, options, open_model_files=False).run()
        config = checked.config or _raw_config(name, location.path)
        errors = [f.message for f in checked.report.findings if f.severity == Severity.ERROR]
        summaries.append(
            ModelSummary(
                name=name,
                path=repository.display(location.path),
                versions=sorted(version_folders(location.path)),
                served_versions=checked.report.versions,
                backend=config.backend or config.platform,
                inputs=[_describe(t) for t in config.input],
                outputs=[_describe(t) for t in config.output],
                max_batch_size=config.max_batch_size,
                batching=describe_batching(config),
                instances=_describe_instances(config),
                error=errors[0] if errors else "",
            )
        )
    return summaries


def show_model(locations: Sequence[str | Path], name: str) -> Config:
    """The effective config, as ``GET /v2/models/<name>/config`` of ``trt serve`` would return it."""
    repository = open_repository(locations)
    found = repository.scan()
    if name not in found:
        close = difflib.get_close_matches(name, list(found), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise RepoError(f"no model folder named '{name}' in {repository.describe()}{hint}")
    options = CoreOptions(model_repositories=tuple(repository.roots))
    try:
        config, _, _ = effective_config(name, found[name].path, options)
    except ServerError as exc:
        raise RepoError(f"'{name}' would not load: {exc.message}") from None
    return config


def describe_batching(config: Config) -> str:
    scheduler = config.WhichOneof("scheduling_choice")
    if scheduler == "ensemble_scheduling":
        return f"ensemble, {len(config.ensemble_scheduling.step)} steps"
    if scheduler == "sequence_batching":
        strategy = config.sequence_batching.WhichOneof("strategy_choice") or "direct"
        return f"sequence ({strategy}), max {config.max_batch_size}"
    if scheduler == "dynamic_batching":
        settings = config.dynamic_batching
        details = [f"max {config.max_batch_size}"]
        if settings.max_queue_delay_microseconds:
            details.append(f"delay {settings.max_queue_delay_microseconds} us")
        # [max_batch_size] is Triton's default (config_defaults), which forms the batches none would
        if list(settings.preferred_batch_size) not in ([], [config.max_batch_size]):
            details.append(f"preferred {','.join(map(str, settings.preferred_batch_size))}")
        return f"dynamic ({', '.join(details)})"
    return f"client batches up to {config.max_batch_size}" if config.max_batch_size else "none"


def _describe(tensor: model_config_pb2.ModelInput | model_config_pb2.ModelOutput) -> str:
    data_type = model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    return f"{tensor.name} {data_type} [{','.join(map(str, tensor.dims))}]"


def _describe_instances(config: Config) -> str:
    if config.platform == "ensemble":
        return "-"
    groups = [
        f"{max(g.count, 1)}x {model_config_pb2.ModelInstanceGroup.Kind.Name(g.kind).removeprefix('KIND_')}"
        for g in config.instance_group
    ]
    return ", ".join(groups) or "1x AUTO"


def _raw_config(name: str, model_dir: Path) -> Config:
    try:
        return read_model_config(name, model_dir)
    except ServerError:
        return Config(name=name)

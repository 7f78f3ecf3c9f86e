"""Turning a model folder into a complete config and running instances (blocking; run in a thread).

The steps mirror Triton's: read ``config.pbtxt`` (or an override), pick versions by the version
policy, choose the backend, auto-complete what the config leaves out, fill default instance groups,
check the result against the model files, then create the instances of each version. One version
failing does not stop the others.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from trt.protos import model_config_pb2
from trt.server.core import devices
from trt.server.core.backends.base import (
    Backend,
    InstanceSpec,
    ModelFiles,
    ModelInstance,
    RequestLevelInstance,
    ServerServices,
    gpu_unavailable_reason,
)
from trt.server.core.backends.registry import ENSEMBLE_PLATFORM, BackendEntry, get_backend, resolve_entry
from trt.server.core.errors import (
    BackendUnavailable,
    ModelConfigError,
    ModelVersionsUnavailable,
    ServerError,
)
from trt.server.core.models.config import read_config_file
from trt.server.core.models.config_defaults import fill_triton_defaults
from trt.server.core.models.config_paths import check_config_paths
from trt.server.core.models.config_rules import check_config
from trt.server.core.models.repository import version_folders
from trt.server.core.models.repository_agents import run_load_agents
from trt.server.core.models.warmup import run_warmup
from trt.server.core.options import CoreOptions
from trt.server.core.paths import inside
from trt.server.core.scheduling.ensemble import instance_copies

logger = logging.getLogger("trt.loader")

Config = model_config_pb2.ModelConfig
KIND_CPU = model_config_pb2.ModelInstanceGroup.KIND_CPU
KIND_GPU = model_config_pb2.ModelInstanceGroup.KIND_GPU
KIND_AUTO = model_config_pb2.ModelInstanceGroup.KIND_AUTO


@dataclass
class LoadedVersion:
    files: ModelFiles
    instances: list[ModelInstance | RequestLevelInstance]
    # Per instance, in the same order: its rate-limiter resources and priority.
    needs: list[tuple[tuple[tuple[str, int], ...], int]] = field(default_factory=list)
    passive: frozenset[int] = frozenset()  # the positions in ``instances`` of passive instances


@dataclass
class LoadResult:
    config: model_config_pb2.ModelConfig
    labels: dict[str, tuple[str, ...]]
    versions: dict[int, LoadedVersion] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)


def model_config_path(model_dir: Path, config_name: str = "") -> Path:
    """The config file of the model in ``model_dir``: ``configs/<config_name>.pbtxt`` where
    ``--model-config-name`` names one it has, else ``config.pbtxt`` (Triton's choice)."""
    if config_name:
        custom = model_dir / "configs" / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return model_dir / "config.pbtxt"


def read_model_config(
    name: str, model_dir: Path, override: Config | None = None, config_name: str = ""
) -> Config:
    config_file = model_config_path(model_dir, config_name)
    if override is not None:
        config = Config()
        config.CopyFrom(override)
    elif config_file.is_file():
        config = read_config_file(config_file)
    else:
        config = Config()
    if config.name and config.name != name:
        raise ModelConfigError(
            f"config.pbtxt names the model '{config.name}' but its folder is '{name}'; "
            "they must match (or leave 'name' out)",
            "name",
        )
    config.name = name
    check_config_paths(config)  # before anything opens a file the config names
    return config


def select_versions(config: Config, available: dict[int, Path]) -> list[int]:
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return sorted(available)
    if choice == "specific":
        wanted = sorted(int(v) for v in policy.specific.versions)
        missing = [v for v in wanted if v not in available]
        if missing:
            raise ModelConfigError(
                f"version_policy asks for version(s) {missing} but the model folder has {sorted(available)}",
                "version_policy",
            )
        return wanted
    count = policy.latest.num_versions if choice == "latest" else 1
    return sorted(available)[-max(count, 1) :]


def complete_config(
    name: str, model_dir: Path, options: CoreOptions, override: Config | None = None
) -> tuple[Config, list[int], dict[int, Path]]:
    """The effective config (as ``/config`` shows it) and the versions to load; raises on the first
    rule the config breaks."""
    config, versions, available = effective_config(name, model_dir, options, override)
    check_config(config)
    return config, versions, available


def effective_config(
    name: str,
    model_dir: Path,
    options: CoreOptions,
    override: Config | None = None,
    backend_needed: bool = True,
    probe_gpu_support: bool = True,
) -> tuple[Config, list[int], dict[int, Path]]:
    """The config after auto-complete and defaults, not yet checked against the rules (``trt repo
    validate`` reports every broken rule rather than the first). Without ``backend_needed``, a backend
    not installed here (its module, or the library its auto-complete opens the model file with) leaves
    the config as written, nothing auto-completed, instead of raising: ``trt repo validate`` checks
    the rest. Without ``probe_gpu_support``, KIND_AUTO trusts the backend's word that it runs on GPUs
    instead of asking its library (which imports torch, seconds: ``trt repo list`` does not)."""
    config = read_model_config(name, model_dir, override, options.model_config_name)
    run_load_agents(config, model_dir)  # as Triton, before the config is completed
    available = version_folders(model_dir)
    if not available:
        raise ModelVersionsUnavailable(  # Triton's words, then where the file goes
            f"at least one version must be available under the version policy of model '{name}' (it has "
            f"no version folder: put the model file in '{model_dir}/1/')"
        )
    versions = select_versions(config, available)
    entry = resolve_entry(config, [available[v] for v in versions])
    latest = versions[-1]
    files = ModelFiles(name, latest, model_dir, available[latest])
    if options.auto_complete_config:
        try:
            get_backend(entry).auto_complete(config, files, options.default_max_batch_size)
            _hide_sequence_tensors(config)
        except BackendUnavailable:
            if backend_needed:
                raise
    elif backend_needed:
        get_backend(entry)  # a backend not installed fails the load here, as with auto-complete
    if config.model_transaction_policy.decoupled and not entry.decoupled:
        raise ModelConfigError(
            f"model_transaction_policy decoupled needs a backend that can send many responses per request "
            f"(python, or an ensemble); '{entry.name}' answers each request once",
            "model_transaction_policy",
        )
    fill_triton_defaults(config, entry)
    if entry.name != ENSEMBLE_PLATFORM:  # an ensemble runs in its steps' instances, not its own
        gpu_capable = entry.gpu and (not probe_gpu_support or _backend_runs_on_gpus(entry, config.name))
        fill_instance_groups(config, gpu_capable)
    return config, versions, available


def _backend_runs_on_gpus(entry: BackendEntry, model: str) -> bool:
    """Whether KIND_AUTO may put a model of this GPU-capable backend on a GPU: as a Triton whose backend
    was built without GPU support, a CPU build of its library (onnxruntime, not onnxruntime-gpu) runs
    KIND_AUTO on the CPU, where KIND_GPU would fail every such model on a machine with GPUs."""
    if devices.gpu_count() == 0:
        return False
    try:
        reason = gpu_unavailable_reason(get_backend(entry))
    except BackendUnavailable:
        return True  # not installed: the load fails on that, which says what to install
    if reason is not None:
        logger.info("model '%s': KIND_AUTO runs on the CPU: %s", model, reason)
    return reason is None


def _hide_sequence_tensors(config: Config) -> None:
    """Control and state tensors are the server's to supply: auto-complete must not list them as
    inputs or outputs a client sends or receives."""
    if not config.HasField("sequence_batching"):
        return
    settings = config.sequence_batching
    hidden = {c.name for c in settings.control_input}
    hidden |= {s.input_name for s in settings.state} | {s.output_name for s in settings.state}
    for tensors in (config.input, config.output):
        for tensor in [t for t in tensors if t.name in hidden]:
            tensors.remove(tensor)


def fill_instance_groups(config: Config, gpu_capable: bool) -> None:
    """Triton's defaults: a config without groups gets one named as the model, and any other group
    without a name ``<model>_<i>`` (so a model's instances are ``<model>_0``, or ``<model>_0_0`` for
    a group written without a name, as Triton names them); KIND_AUTO resolved (to the GPU only for a
    backend that runs there)."""
    if not config.instance_group:
        group = config.instance_group.add()
        group.name = config.name
        group.kind = KIND_AUTO
    has_gpu = devices.gpu_count() > 0 and gpu_capable
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == KIND_AUTO:
            group.kind = KIND_GPU if (has_gpu or group.gpus) else KIND_CPU
        if group.kind == KIND_GPU and not group.gpus:
            group.gpus.extend(range(max(devices.gpu_count(), 1)))
        if group.count < 1:
            group.count = 1


def read_labels(config: Config, model_dir: Path) -> dict[str, tuple[str, ...]]:
    labels: dict[str, tuple[str, ...]] = {}
    for output in config.output:
        if output.label_filename:
            path = inside(model_dir, output.label_filename, f"output '{output.name}' label_filename")
            try:
                labels[output.name] = tuple(path.read_text(encoding="utf-8").splitlines())
            except OSError as exc:
                raise ModelConfigError(
                    f"output '{output.name}': cannot read labels {path}: {exc.strerror or exc}",
                    f"output[{output.name}].label_filename",
                ) from None
    return labels


def instance_specs(config: Config, services: ServerServices | None = None) -> list[InstanceSpec]:
    groups = [(g, g.gpus if g.kind == KIND_GPU else [0]) for g in config.instance_group]
    total = sum(g.count * len(device_ids) for g, device_ids in groups)
    # Share the cores between instances so that N instances do not run N x cores threads.
    threads = max(1, devices.cpu_count() // max(total, 1))
    specs: list[InstanceSpec] = []
    for group, device_ids in groups:
        kind = model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind)
        for device_id in device_ids:
            for index in range(group.count):
                resources = tuple((r.name, int(r.count)) for r in group.rate_limiter.resources)
                specs.append(
                    InstanceSpec(
                        f"{group.name}_{index}", kind, int(device_id), threads, services,
                        resources, int(group.rate_limiter.priority), group.passive,
                    )
                )  # fmt: skip
    return specs


def load_model(
    name: str,
    model_dir: Path,
    options: CoreOptions,
    override: Config | None = None,
    services: ServerServices | None = None,
    namespace: str = "",
) -> LoadResult:
    """Load every selected version; raise only when nothing about the model can be loaded."""
    config, versions, available = complete_config(name, model_dir, options, override)
    entry = resolve_entry(config, [available[v] for v in versions])
    backend = get_backend(entry)
    result = LoadResult(config, read_labels(config, model_dir))
    specs = instance_specs(config, services)
    ensemble = entry.name == ENSEMBLE_PLATFORM
    attempts = 1 + max(options.model_load_retry_count, 0)  # --model-load-retry-count
    for version in versions:
        files = ModelFiles(name, version, model_dir, available[version], namespace)
        for attempt in range(1, attempts + 1):
            try:
                instances = _create_instances(backend, config, files, specs, services, ensemble)
            except BackendUnavailable:
                # A missing extra is the same for every version and every attempt.
                for loaded in result.versions.values():
                    close_instances(loaded.instances)
                raise
            except Exception as exc:
                reason = exc.message if isinstance(exc, ServerError) else f"{type(exc).__name__}: {exc}"
                if attempt < attempts:
                    logger.warning(
                        "failed to load '%s' version %d (attempt %d of %d), trying again: %s",
                        name, version, attempt, attempts, reason,
                    )  # fmt: skip
                    continue
                result.failed[version] = reason
                if isinstance(exc, ServerError):
                    logger.error("failed to load '%s' version %d: %s", name, version, reason)
                else:
                    logger.exception("failed to load '%s' version %d", name, version)
            else:
                routers = len(instances) - len(specs)  # an ensemble's, before the specs' instances
                needs = [((), 0)] * routers + [(spec.resources, spec.rate_priority) for spec in specs]
                passive = frozenset(routers + i for i, spec in enumerate(specs) if spec.passive)
                result.versions[version] = LoadedVersion(files, instances, needs, passive)
            break
    return result


def _create_instances(
    backend: Backend,
    config: Config,
    files: ModelFiles,
    specs: list[InstanceSpec],
    services: ServerServices | None,
    ensemble: bool,
) -> list[ModelInstance | RequestLevelInstance]:
    """Every instance of one version, warmed up; those made before a failure are closed."""
    instances: list[ModelInstance | RequestLevelInstance] = []
    try:
        backend.validate(config, files)
        if ensemble:  # it runs in its steps' instances; these only route to them
            spec = InstanceSpec("ensemble", "KIND_CPU", 0, 1, services)
            instances.extend(instance_copies(backend.create_instance(config, files, spec)))  # type: ignore[arg-type]
        for spec in specs:
            instances.append(backend.create_instance(config, files, spec))
        run_warmup(config, list(instances), files.model_dir, files.version)
    except BaseException:
        close_instances(instances)
        raise
    return instances


def close_instances(instances: list[ModelInstance | RequestLevelInstance]) -> None:
    for instance in instances:
        try:
            instance.close()
        except Exception:
            logger.exception("closing a half-loaded instance failed")

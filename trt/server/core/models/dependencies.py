"""What an ensemble needs of the models its steps run, as Triton's repository manager checks it.

An ensemble loads only when the model of each of its steps serves (the version a step names, where
it names one), and its tensors agree with those models' inputs and outputs; otherwise it is not
served, with Triton's reason. Each step's model is looked for in the ensemble's namespace first, as
requests of its steps are resolved (``server.core.models.table``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from trt.protos import model_config_pb2
from trt.server.core.errors import InvalidArgument
from trt.server.core.models.table import UNAVAILABLE, UNLOADED, ModelEntry, ModelKey, ModelTable

Config = model_config_pb2.ModelConfig


@dataclass(frozen=True, slots=True)
class UnmetNeed:
    reason: str  # Triton's words
    awaits: frozenset[str]  # the step models that, once loaded, may let the ensemble load


def is_ensemble(config: Config | None) -> TypeGuard[Config]:
    return config is not None and config.HasField("ensemble_scheduling")


def step_names(config: Config) -> set[str]:
    return {step.model_name for step in config.ensemble_scheduling.step} - {config.name}


def unmet_need(key: ModelKey, config: Config, table: ModelTable) -> UnmetNeed | None:
    """Why the ensemble ``key`` cannot serve now; None when every step's model serves."""
    steps = config.ensemble_scheduling.step
    found: list[tuple[model_config_pb2.ModelEnsembling.Step, ModelEntry]] = []
    missing: set[str] = set()
    for step in steps:
        try:
            entry = table.preferring(key.namespace, step.model_name)
        except InvalidArgument:  # several namespaces hold the name, and none is the ensemble's
            entry = None
        if entry is None:
            missing.add(step.model_name)
        else:
            found.append((step, entry))
    if missing:
        names = ", ".join(sorted(missing))
        return UnmetNeed(
            f"ensemble {key} contains models that are not available or ambiguous: {names}", frozenset(missing)
        )
    for step, entry in found:
        awaits = frozenset((step.model_name,))
        if not entry.versions:
            reason = f"ensemble '{key}' depends on '{entry.key}' which has no loaded version."
            if entry.state == UNAVAILABLE and entry.reason and entry.reason != UNLOADED:
                reason += f" Model '{entry.key}' loading failed with error: {entry.reason}"
            return UnmetNeed(reason, awaits)
        if step.model_version > 0 and step.model_version not in entry.versions:
            return UnmetNeed(
                f"ensemble '{key}' depends on '{entry.key}' whose required version {step.model_version} "
                "is not loaded.",
                awaits,
            )
    return None


def step_key(namespace: str, name: str, on_disk: Collection[ModelKey]) -> ModelKey | None:
    """The model in the repositories that a step naming ``name`` of an ensemble in ``namespace``
    runs: that namespace's, else the one namespace holding it; None for an absent or ambiguous name."""
    own = ModelKey(namespace, name)
    holders = [own] if own in on_disk else [other for other in on_disk if other.name == name]
    return holders[0] if len(holders) == 1 else None


def step_keys(key: ModelKey, names: set[str], on_disk: Collection[ModelKey]) -> list[ModelKey]:
    """The models in the repositories that the steps ``names`` of the ensemble ``key`` run."""
    return [step for name in sorted(names) if (step := step_key(key.namespace, name, on_disk)) is not None]


@dataclass(slots=True)
class _EnsembleTensor:
    """An ensemble tensor as the first model (or the ensemble's own input or output) declares it."""

    model: str  # the model it is inferred from, as messages name it
    data_type: int
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]  # with the batch dimension (-1) for a model that batches


def _tensor(model: str, batching: bool, data_type: int, dims: Sequence[int]) -> _EnsembleTensor:
    return _EnsembleTensor(model, data_type, tuple(dims), ((-1,) if batching else ()) + tuple(dims))


def tensor_problem(key: ModelKey, config: Config, table: ModelTable) -> str | None:
    """Triton's check of an ensemble against its steps' models, made once they all serve (after
    ``unmet_need``), with their completed configs: each mapped input and output exists, every
    required input is fed, batch sizes fit, and an ensemble tensor has one data type and compatible
    shapes wherever it is used. The first problem, in Triton's words and order; None for none."""
    batching = config.max_batch_size > 0
    tensors: dict[str, _EnsembleTensor] = {}
    for declared in [*config.input, *config.output]:
        dims = declared.reshape.shape if declared.HasField("reshape") else declared.dims
        tensors.setdefault(declared.name, _tensor(str(key), batching, declared.data_type, dims))
    where = f"in ensemble {key}, "
    for step in config.ensemble_scheduling.step:
        entry = table.preferring(key.namespace, step.model_name)
        if entry is None or entry.config is None:
            continue  # unmet_need's to say
        step_config, model = entry.config, str(entry.key)
        if 0 < step_config.max_batch_size < config.max_batch_size:
            return (
                f"ensemble {key} allows maximum batch size {config.max_batch_size}, but it contains model "
                f"{step.model_name} which only allows maximum batch size to be {step_config.max_batch_size}"
            )
        step_batching = step_config.max_batch_size > 0
        inputs = {tensor.name: tensor for tensor in step_config.input}
        for name, tensor_name in step.input_map.items():
            if name not in inputs:
                return (
                    f"{where}ensemble tensor {tensor_name} is mapping to non-existing input {name} in "
                    f"model {model}"
                )
        for name, declared in inputs.items():
            if name not in step.input_map:
                if declared.optional:
                    continue
                return f"{where}input {name} in model {model} is not mapped to any ensemble tensors"
            used = _tensor(model, step_batching, declared.data_type, declared.dims)
            problem = _consistency(tensors.setdefault(step.input_map[name], used), used)
            if problem:
                return f"{where}ensemble tensor {step.input_map[name]}: {problem}"
        outputs = {tensor.name: tensor for tensor in step_config.output}
        for name, tensor_name in step.output_map.items():
            if name not in outputs:
                return (
                    f"{where}ensemble tensor {tensor_name} is mapped from non-existing output {name} in "
                    f"model {step.model_name}"
                )
        for name, tensor_name in step.output_map.items():
            made = _tensor(model, step_batching, outputs[name].data_type, outputs[name].dims)
            problem = _consistency(tensors.setdefault(tensor_name, made), made)
            if problem:
                return f"{where}ensemble tensor {tensor_name}: {problem}"
    return None


def _consistency(first: _EnsembleTensor, other: _EnsembleTensor) -> str | None:
    """Triton's words for two uses of one tensor that disagree: shapes may differ in -1 dims, and a
    model that does not batch may spell out the batch dimension another one leaves implicit."""
    if first.data_type != other.data_type:
        name = model_config_pb2.DataType.Name
        return (
            f"inconsistent data type: {name(first.data_type)} is inferred from model {first.model} while "
            f"{name(other.data_type)} is inferred from model {other.model}"
        )
    if not _same_dims(first.dims, other.dims) and not _same_dims(first.full_dims, other.full_dims):
        return (
            f"inconsistent shape: {_dims_text(first.full_dims)} is inferred from model {first.model} while "
            f"{_dims_text(other.full_dims)} is inferred from model {other.model}"
        )
    return None


def _same_dims(first: tuple[int, ...], other: tuple[int, ...]) -> bool:
    return len(first) == len(other) and all(a == b or -1 in (a, b) for a, b in zip(first, other, strict=True))


def _dims_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def ensemble_refusal(key: ModelKey, config: Config, table: ModelTable) -> UnmetNeed | None:
    """Why the ensemble ``key`` cannot serve now; None for other models and for ensembles that can.
    A tensor that disagrees with a step's model waits for that model to change."""
    if not is_ensemble(config):
        return None
    unmet = unmet_need(key, config, table)
    problem = tensor_problem(key, config, table) if unmet is None else None
    return UnmetNeed(problem, frozenset(step_names(config))) if problem else unmet

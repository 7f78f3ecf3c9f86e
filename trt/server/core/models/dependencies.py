"""What an ensemble needs of the models its steps run, as Triton's repository manager checks it.

An ensemble loads only when the model of each of its steps serves (the version a step names, where
it names one); otherwise it is not served, with Triton's reason. Each step's model is looked for in
the ensemble's namespace first, as requests of its steps are resolved (``server.core.models.table``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from trt.protos import model_config_pb2
from trt.server.core.errors import InvalidArgument
from trt.server.core.models.repository import ModelLocation
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


def step_keys(key: ModelKey, names: set[str], on_disk: dict[ModelKey, ModelLocation]) -> list[ModelKey]:
    """The models in the repositories that the steps ``names`` of the ensemble ``key`` run: in the
    ensemble's namespace, else the one namespace holding each (an ambiguous or absent name has none)."""
    keys = []
    for name in sorted(names):
        own = ModelKey(key.namespace, name)
        holders = [own] if own in on_disk else [other for other in on_disk if other.name == name]
        if len(holders) == 1:
            keys.append(holders[0])
    return keys

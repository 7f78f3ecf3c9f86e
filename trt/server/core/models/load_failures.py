"""What a load request that failed answers, in Triton's words (its tests and clients match on them).

Triton tells two failures apart (core ``model_repository_manager.cc``): a model whose config, or the
config a load request overrides it with, cannot be read is ``failed to load '<m>', failed to poll from
model repository`` (INTERNAL); a model none of whose versions loaded is ``load failed for model '<m>':
version <v> is at UNAVAILABLE state: <why>`` (INVALID_ARG). trt adds its reason after those words.
"""

from __future__ import annotations

from trt.server.core.errors import ModelConfigError, ModelLoadError, ModelVersionsUnavailable, ServerError
from trt.server.core.paths import shown


def poll_failure(name: str, reason: str) -> str:
    """Triton's text for a load that failed before the model could be read, with the reason."""
    return f"failed to load '{shown(name)}', failed to poll from model repository: {reason}"


def load_failure(name: str, exc: ServerError, reason: str) -> ModelLoadError:
    """A load that failed before any version was tried (``reason``: ``exc``'s, as the index shows it)."""
    if isinstance(exc, ModelVersionsUnavailable):
        return ModelVersionsUnavailable(f"load failed for model '{name}': {reason}")
    if isinstance(exc, ModelConfigError):
        return ModelLoadError(poll_failure(name, reason))
    return ModelLoadError(f"failed to load '{name}': {reason}")


def no_version_loaded(name: str, failed: dict[int, str]) -> ModelVersionsUnavailable:
    """Each version tried failed (``failed``: why, by version)."""
    each = "; ".join(f"version {v} is at UNAVAILABLE state: {why}" for v, why in sorted(failed.items()))
    return ModelVersionsUnavailable(f"load failed for model '{name}': {each}")

"""Canary routing, an extension Triton lacks: requests that name no version are split across loaded
versions by weight, from the model config's ``canary_weights`` parameter (``"1:90,2:10"``).

Smooth weighted round-robin rather than a random draw: over any run of requests the split is as close to
the weights as whole requests allow (900/100 of 1,000 for 90/10), so a canary's share is exact in
statistics and metrics, and no version waits long between requests."""

from __future__ import annotations

import threading

from trt.protos import model_config_pb2
from trt.server.core.errors import ModelConfigError

PARAMETER = "canary_weights"


class CanaryRouter:
    def __init__(self, weights: dict[int, int]) -> None:
        self.weights = dict(sorted(weights.items()))
        self._total = sum(self.weights.values())
        self._current = dict.fromkeys(self.weights, 0)
        self._lock = threading.Lock()

    def pick(self) -> int:
        """The version for the next request that names none."""
        with self._lock:
            for version, weight in self.weights.items():
                self._current[version] += weight
            chosen = max(self._current, key=self._current.__getitem__)
            self._current[chosen] -= self._total
            return chosen

    def describe(self) -> str:
        return ", ".join(f"version {v}: {w}" for v, w in self.weights.items())


def canary_router(config: model_config_pb2.ModelConfig, loaded: set[int]) -> CanaryRouter | None:
    """The router ``config`` asks for, checked against the versions that loaded; None without one."""
    if PARAMETER not in config.parameters:
        return None
    text = config.parameters[PARAMETER].string_value.strip()
    weights: dict[int, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        version, sep, weight = item.partition(":")
        if not sep or not _whole_number(version.strip()) or not _whole_number(weight.strip()):
            raise ModelConfigError(
                f"parameter {PARAMETER} '{text}': expected VERSION:WEIGHT pairs, e.g. '1:90,2:10'"
            )
        weights[int(version)] = int(weight)
    if not weights or not any(weights.values()):
        raise ModelConfigError(f"parameter {PARAMETER} '{text}': give at least one positive weight")
    missing = sorted(set(weights) - loaded)
    if missing:
        raise ModelConfigError(
            f"parameter {PARAMETER} names version(s) {', '.join(map(str, missing))}, which are not loaded "
            f"(loaded: {', '.join(map(str, sorted(loaded))) or 'none'}); set version_policy to load them"
        )
    return CanaryRouter({v: w for v, w in weights.items() if w > 0})


def _whole_number(text: str) -> bool:
    """ASCII digits, few enough for int() (str.isdigit() also takes superscripts, which int() refuses)."""
    return text.isascii() and text.isdigit() and len(text) <= 18

"""What the user asked for: a latency target, throughput and memory limits, and what to maximize.

``Measurement`` is one (candidate, concurrency) run of the perf engine; ``Goals`` judges it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import StrEnum

from trt.analyzer.errors import AnalyzeError

LATENCY_METRICS = ("p99", "p95", "p90", "p50", "avg")
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|ms|s|m|h)?\s*$")
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_s(text: str, option: str, default_unit: str | None = None) -> float:
    """``20ms`` -> 0.02; ``10m`` -> 600. Without a unit, ``default_unit`` or an error naming ``option``."""
    match = _DURATION.match(text)
    unit = match.group(2) if match else None
    if match is None or (unit is None and default_unit is None):
        raise AnalyzeError(f"{option} '{text}': expected a number with a unit (us, ms, s, m), e.g. 20ms")
    return float(match.group(1)) * _UNIT_S[unit or default_unit or "s"]


def parse_size_bytes(text: str, option: str) -> int:
    """``2GB``/``2GiB``/``512M`` -> bytes (binary multiples, as memory is counted)."""
    match = _SIZE.match(text)
    if match is None:
        raise AnalyzeError(f"{option} '{text}': expected a size such as 512MB or 2GB")
    unit = (match.group(2) or "b").lower()[0]
    power = {"b": 0, "k": 1, "m": 2, "g": 3, "t": 4}[unit]
    return int(float(match.group(1)) * 1024**power)


class Objective(StrEnum):
    THROUGHPUT = "throughput"  # most inferences/s within the constraints
    LATENCY = "latency"  # lowest target-metric latency within the constraints
    BALANCED = "balanced"  # most inferences/s per millisecond of latency


@dataclass(frozen=True)
class Measurement:
    """One candidate at one client concurrency, as the perf engine measured it."""

    candidate_key: str
    concurrency: int
    throughput: float
    latency_us: dict[str, float]  # avg, p50, p90, p95, p99
    errors: int
    memory_bytes: int | None
    stable: bool
    seconds: float
    server_queue_us: float = math.nan
    server_compute_us: float = math.nan
    average_batch: float = math.nan
    gpu_memory_bytes: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "candidate": self.candidate_key,
            "concurrency": self.concurrency,
            "throughput": round(self.throughput, 2),
            "latency_us": {k: round(v, 1) for k, v in self.latency_us.items()},
            "errors": self.errors,
            "memory_bytes": self.memory_bytes,
            "stable": self.stable,
            "seconds": round(self.seconds, 2),
            "server_queue_us": None if math.isnan(self.server_queue_us) else round(self.server_queue_us, 1),
            "server_compute_us": None
            if math.isnan(self.server_compute_us)
            else round(self.server_compute_us, 1),
            "average_batch": None if math.isnan(self.average_batch) else round(self.average_batch, 2),
            "gpu_memory_bytes": self.gpu_memory_bytes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Measurement:
        def number(key: str) -> float:
            value = data.get(key)
            return math.nan if value is None else float(value)  # type: ignore[arg-type]

        memory = data.get("memory_bytes")
        gpu_memory = data.get("gpu_memory_bytes")
        return cls(
            candidate_key=str(data["candidate"]),
            concurrency=int(data["concurrency"]),  # type: ignore[call-overload]
            throughput=float(data["throughput"]),  # type: ignore[arg-type]
            latency_us={str(k): float(v) for k, v in dict(data["latency_us"]).items()},  # type: ignore[call-overload]
            errors=int(data["errors"]),  # type: ignore[call-overload]
            memory_bytes=None if memory is None else int(memory),  # type: ignore[call-overload]
            stable=bool(data["stable"]),
            seconds=float(data["seconds"]),  # type: ignore[arg-type]
            server_queue_us=number("server_queue_us"),
            server_compute_us=number("server_compute_us"),
            average_batch=number("average_batch"),
            gpu_memory_bytes=None if gpu_memory is None else int(gpu_memory),  # type: ignore[call-overload]
        )


@dataclass(frozen=True)
class Goals:
    latency_metric: str = "p99"
    latency_limit_us: float | None = None
    min_throughput: float | None = None
    max_memory_bytes: int | None = None
    max_gpu_memory_bytes: int | None = None
    objective: Objective = Objective.THROUGHPUT
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def target_text(self) -> str:
        parts = []
        if self.latency_limit_us is not None:
            parts.append(f"{self.latency_metric} <= {self.latency_limit_us / 1000:g} ms")
        if self.min_throughput is not None:
            parts.append(f"throughput >= {self.min_throughput:g}/s")
        if self.max_memory_bytes is not None:
            parts.append(f"memory <= {self.max_memory_bytes / 2**20:,.0f} MiB")
        if self.max_gpu_memory_bytes is not None:
            parts.append(f"GPU memory <= {self.max_gpu_memory_bytes / 2**20:,.0f} MiB")
        return ", ".join(parts) or "no constraint"

    def latency(self, measurement: Measurement) -> float:
        return measurement.latency_us[self.latency_metric]

    def violations(self, measurement: Measurement) -> list[str]:
        """Why ``measurement`` misses the goals; empty when it meets them."""
        problems = []
        if measurement.errors:
            problems.append(f"{measurement.errors} failed requests")
        if self.latency_limit_us is not None and self.latency(measurement) > self.latency_limit_us:
            problems.append(
                f"{self.latency_metric} {self.latency(measurement) / 1000:.2f} ms > "
                f"{self.latency_limit_us / 1000:g} ms"
            )
        if self.min_throughput is not None and measurement.throughput < self.min_throughput:
            problems.append(f"throughput {measurement.throughput:,.0f}/s < {self.min_throughput:g}/s")
        if (
            self.max_memory_bytes is not None
            and measurement.memory_bytes is not None
            and measurement.memory_bytes > self.max_memory_bytes
        ):
            problems.append(
                f"memory {measurement.memory_bytes / 2**20:,.0f} MiB > "
                f"{self.max_memory_bytes / 2**20:,.0f} MiB"
            )
        if (
            self.max_gpu_memory_bytes is not None
            and measurement.gpu_memory_bytes is not None
            and measurement.gpu_memory_bytes > self.max_gpu_memory_bytes
        ):
            problems.append(
                f"GPU memory {measurement.gpu_memory_bytes / 2**20:,.0f} MiB > "
                f"{self.max_gpu_memory_bytes / 2**20:,.0f} MiB"
            )
        return problems

    def meets(self, measurement: Measurement) -> bool:
        return not self.violations(measurement)

    def score(self, measurement: Measurement) -> float:
        """Higher is better, for measurements that meet the goals."""
        latency_ms = max(self.latency(measurement), 1.0) / 1000
        if self.objective is Objective.LATENCY:
            return -latency_ms
        if self.objective is Objective.BALANCED:
            return measurement.throughput / latency_ms
        return measurement.throughput

    def shortfall(self, measurement: Measurement) -> float:
        """How far a measurement is from the goals (0 when met): what "closest config" means."""
        gap = 0.0
        if self.latency_limit_us is not None:
            gap += max(0.0, self.latency(measurement) / self.latency_limit_us - 1)
        if self.min_throughput is not None and self.min_throughput > 0:
            gap += max(0.0, 1 - measurement.throughput / self.min_throughput)
        if self.max_memory_bytes is not None and measurement.memory_bytes is not None:
            gap += max(0.0, measurement.memory_bytes / self.max_memory_bytes - 1)
        if self.max_gpu_memory_bytes is not None and measurement.gpu_memory_bytes is not None:
            gap += max(0.0, measurement.gpu_memory_bytes / self.max_gpu_memory_bytes - 1)
        return gap + (1.0 if measurement.errors else 0.0)

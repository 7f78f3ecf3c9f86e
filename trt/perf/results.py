"""``ProfileReport``: one trt perf run, what every output (table, CSV, JSON, plot, gates) is made from."""

from __future__ import annotations

from dataclasses import dataclass, field

from trt.perf.measurement import LevelResult
from trt.perf.options import LoadKind


@dataclass(frozen=True)
class ProfileReport:
    model: str
    model_version: str
    url: str
    protocol: str
    mode: LoadKind
    batch_size: int
    async_mode: bool
    streaming: bool
    input_format: str
    output_format: str
    model_source: str  # "config", or "metadata" where the server has no model-config call
    sequence_model: bool
    decoupled: bool
    response_cache: bool
    percentile: int | None
    stability_percentage: float
    measurement_interval_ms: int
    processes: int
    started_at: str
    duration_s: float
    results: tuple[LevelResult, ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)
    server_stats: bool = True

    @property
    def level_name(self) -> str:
        return "Concurrency" if self.mode is LoadKind.CONCURRENCY else "Request Rate"

    @property
    def stable(self) -> bool:
        return all(r.stable for r in self.results)

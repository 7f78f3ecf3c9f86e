"""The statistics extension, as snapshots and the server-side breakdown between two of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_FIELDS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)


@dataclass(frozen=True)
class Duration:
    count: int = 0
    ns: int = 0

    def __sub__(self, other: Duration) -> Duration:
        return Duration(self.count - other.count, self.ns - other.ns)

    def __add__(self, other: Duration) -> Duration:
        return Duration(self.count + other.count, self.ns + other.ns)

    def average_us(self) -> float:
        return self.ns / self.count / 1000 if self.count else 0.0


@dataclass(frozen=True)
class StatsSnapshot:
    """Cumulative counters of one model (all its versions summed, or the one asked for)."""

    inference_count: int = 0
    execution_count: int = 0
    durations: dict[str, Duration] = field(default_factory=dict)
    batch_counts: dict[int, int] = field(default_factory=dict)  # batch size -> executions

    def duration(self, name: str) -> Duration:
        return self.durations.get(name, Duration())

    def __add__(self, other: StatsSnapshot) -> StatsSnapshot:
        batches = dict(self.batch_counts)
        for size, count in other.batch_counts.items():
            batches[size] = batches.get(size, 0) + count
        return StatsSnapshot(
            self.inference_count + other.inference_count,
            self.execution_count + other.execution_count,
            {n: self.duration(n) + other.duration(n) for n in _FIELDS},
            batches,
        )


def snapshot_from_json(model_stat: dict[str, Any]) -> StatsSnapshot:
    """One entry of ``model_stats`` (HTTP JSON, or the gRPC proto as a dict: int64 values as strings)."""
    stats = model_stat.get("inference_stats", {})
    durations = {
        name: Duration(int(stats.get(name, {}).get("count", 0)), int(stats.get(name, {}).get("ns", 0)))
        for name in _FIELDS
    }
    batches = {
        int(b["batch_size"]): int(b.get("compute_infer", {}).get("count", 0))
        for b in model_stat.get("batch_stats", [])
    }
    return StatsSnapshot(
        int(model_stat.get("inference_count", 0)),
        int(model_stat.get("execution_count", 0)),
        durations,
        batches,
    )


@dataclass(frozen=True)
class ServerBreakdown:
    """Server-side averages per request over a measurement, as perf_analyzer prints them (microseconds)."""

    success_count: int
    inference_count: int
    execution_count: int
    request_us: float  # avg request latency inside the server
    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float
    cache_hit_count: int
    cache_hit_us: float
    cache_miss_count: int
    cache_miss_us: float
    batch_sizes: dict[int, int]  # batch size -> executions seen
    failed_count: int

    @property
    def overhead_us(self) -> float:
        accounted = (
            self.queue_us
            + self.compute_input_us
            + self.compute_infer_us
            + self.compute_output_us
            + self.cache_hit_us
            + self.cache_miss_us
        )
        return max(0.0, self.request_us - accounted)

    def as_dict(self) -> dict[str, Any]:
        return {
            "success_count": self.success_count,
            "failed_count": self.failed_count,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "avg_request_us": round(self.request_us, 1),
            "overhead_us": round(self.overhead_us, 1),
            "queue_us": round(self.queue_us, 1),
            "compute_input_us": round(self.compute_input_us, 1),
            "compute_infer_us": round(self.compute_infer_us, 1),
            "compute_output_us": round(self.compute_output_us, 1),
            "cache_hit_count": self.cache_hit_count,
            "cache_hit_us": round(self.cache_hit_us, 1),
            "cache_miss_count": self.cache_miss_count,
            "cache_miss_us": round(self.cache_miss_us, 1),
            "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())},
        }


def breakdown(before: StatsSnapshot, after: StatsSnapshot) -> ServerBreakdown:
    def delta(name: str) -> Duration:
        return after.duration(name) - before.duration(name)

    batches = {
        size: count - before.batch_counts.get(size, 0)
        for size, count in after.batch_counts.items()
        if count - before.batch_counts.get(size, 0) > 0
    }
    return ServerBreakdown(
        success_count=delta("success").count,
        inference_count=after.inference_count - before.inference_count,
        execution_count=after.execution_count - before.execution_count,
        request_us=delta("success").average_us(),
        queue_us=delta("queue").average_us(),
        compute_input_us=delta("compute_input").average_us(),
        compute_infer_us=delta("compute_infer").average_us(),
        compute_output_us=delta("compute_output").average_us(),
        cache_hit_count=delta("cache_hit").count,
        cache_hit_us=delta("cache_hit").average_us(),
        cache_miss_count=delta("cache_miss").count,
        cache_miss_us=delta("cache_miss").average_us(),
        batch_sizes=batches,
        failed_count=delta("fail").count,
    )

"""Statistics extension JSON, with Triton's field names."""

from __future__ import annotations

from typing import Any

from trt.server.core.extensions.statistics import Duration, ModelStatistics


def _duration(value: Duration) -> dict[str, int]:
    return {"count": value.count, "ns": value.ns}


def model_statistics_json(stats: ModelStatistics) -> dict[str, Any]:
    return {
        "name": stats.name,
        "version": stats.version,
        "last_inference": stats.last_inference_ms,
        "inference_count": stats.inference_count,
        "execution_count": stats.execution_count,
        "inference_stats": {
            "success": _duration(stats.success),
            "fail": _duration(stats.fail),
            "queue": _duration(stats.queue),
            "compute_input": _duration(stats.compute_input),
            "compute_infer": _duration(stats.compute_infer),
            "compute_output": _duration(stats.compute_output),
            "cache_hit": _duration(stats.cache_hit),
            "cache_miss": _duration(stats.cache_miss),
        },
        "response_stats": {},
        "batch_stats": [
            {
                "batch_size": size,
                "compute_input": _duration(batch.compute_input),
                "compute_infer": _duration(batch.compute_infer),
                "compute_output": _duration(batch.compute_output),
            }
            for size, batch in sorted(stats.batch_stats.items())
        ],
        "memory_usage": [],
    }


def statistics_json(all_stats: list[ModelStatistics]) -> dict[str, Any]:
    return {"model_stats": [model_statistics_json(stats) for stats in all_stats]}

"""``--json``: the whole run as one JSON document (also what ``--baseline`` reads back)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

from trt.perf.errors import OptionError
from trt.perf.measurement import LevelResult
from trt.perf.results import ProfileReport

# 2 adds each window's own figures ("windows"), which --baseline tests the noise of; 1 still reads.
SCHEMA = "trt-perf/2"


def _finite(value: float) -> float | None:
    return round(value, 2) if math.isfinite(value) else None


def level_dict(result: LevelResult) -> dict[str, Any]:
    latency = result.latency
    return {
        "level": result.level,
        "throughput": round(result.throughput, 2),
        "request_throughput": round(result.request_throughput, 2),
        "response_throughput": round(result.response_throughput, 2),
        "batch_size": result.batch_size,
        "request_count": result.request_count,
        "error_count": result.error_count,
        "error_rate": round(result.error_rate, 6),
        "error_samples": list(result.error_samples),
        "latency_us": {
            "avg": _finite(latency.avg_us),
            "std": _finite(latency.std_us),
            "min": latency.min_us,
            "max": latency.max_us,
            **{f"p{p}": v for p, v in sorted(latency.percentiles.items())},
        },
        "stabilizing_latency_us": _finite(result.stabilizing_latency_us),
        "client_send_us": round(result.client_send_us, 1),
        "client_recv_us": round(result.client_recv_us, 1),
        "server": result.server.as_dict() if result.server else None,
        "client": {
            "cpu_cores": round(result.client.cpu_cores, 3),
            "busiest_worker_core_fraction": round(result.client.busiest_worker, 3),
            "cpu_us_per_request": round(result.client.cpu_us_per_request, 1),
            "machine_cpu_percent": round(result.client.machine_percent, 1),
            "saturated": result.client.saturated,
        },
        "delayed_requests": result.delayed_requests,
        "sequences_completed": result.sequences_completed,
        "stable": result.stable,
        "trials": result.trials,
        "window_throughputs": [round(t, 2) for t in result.window_throughputs],
        "window_latencies_us": [_finite(x) for x in result.window_latencies_us],
        "windows": [
            {
                "throughput": round(w.throughput, 2),
                "count": w.count,
                "avg_us": _finite(w.avg_us),
                **{f"p{p}_us": v for p, v in sorted(w.percentiles_us.items())},
            }
            for w in result.windows
        ],
        "result_windows": result.result_windows,
    }


def report_dict(report: ProfileReport, gates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "model": report.model,
        "model_version": report.model_version,
        "url": report.url,
        "protocol": report.protocol,
        "mode": report.mode.value,
        "batch_size": report.batch_size,
        "async": report.async_mode,
        "streaming": report.streaming,
        "input_format": report.input_format,
        "output_format": report.output_format,
        "model_source": report.model_source,
        "sequence_model": report.sequence_model,
        "decoupled": report.decoupled,
        "percentile": report.percentile,
        "stability_percentage": report.stability_percentage,
        "measurement_interval_ms": report.measurement_interval_ms,
        "processes": report.processes,
        "started_at": report.started_at,
        "duration_s": report.duration_s,
        "stable": report.stable,
        "server_stats": report.server_stats,
        "results": [level_dict(r) for r in report.results],
        "warnings": list(report.warnings),
        "gates": gates or [],
    }


def dumps(document: dict[str, Any]) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2)


def load_baseline(path: Path) -> dict[str, Any]:
    try:
        document = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as error:
        raise OptionError(f"--baseline {path}: cannot read it ({error})") from error
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise OptionError(f'--baseline {path}: not a trt perf --json report (no "results" list)')
    return document

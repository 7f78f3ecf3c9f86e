"""genai-perf's files, so its users find their columns: per level ``profile_export_genai_perf.csv`` (the
request-metrics block ``Metric,avg,min,max,p99,p95,p90,p75,p50,p25`` then ``Metric,Value``) and
``profile_export_genai_perf.json`` (each metric's unit and statistics); a sweep table with one row per
level (``-f``); and the whole run as one JSON document (``--json``)."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any

import orjson

from trt.perf.genai.metrics import RECORD_METRICS, TIME_METRICS, LevelMetrics, Statistics
from trt.perf.genai.profiler import GenAIReport

SCHEMA = "trt-perf-genai/1"
CSV_STATS = ("avg", "min", "max", "p99", "p95", "p90", "p75", "p50", "p25")
SWEEP_STATS = ("avg", "p50", "p90", "p95", "p99", "min", "max", "std")
JSON_STATS = ("avg", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "min", "max", "std")
UNITS = {
    **dict.fromkeys(TIME_METRICS, "ms"),
    "output_token_throughput_per_user": "tokens/sec/user",
    "output_sequence_length": "tokens",
    "input_sequence_length": "tokens",
}


def _scaled(metric: str, value: float) -> float:
    return value / 1e6 if metric in TIME_METRICS else value  # ns -> ms, as genai-perf reports


def metric_dict(metric: str, stats: Statistics) -> dict[str, Any]:
    return {"unit": UNITS[metric], **{s: _scaled(metric, stats.get(s)) for s in JSON_STATS}}


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def level_document(report: GenAIReport, level: LevelMetrics) -> dict[str, Any]:
    """genai-perf's ``profile_export_genai_perf.json`` for one level (plus trt's error figures)."""
    document: dict[str, Any] = {m: metric_dict(m, level.stats[m]) for m in RECORD_METRICS if m in level.stats}
    if report.options.endpoint_type.generates:  # embeddings generate no tokens
        document["output_token_throughput"] = {
            "unit": "tokens/sec",
            "avg": _number(level.output_token_throughput),
        }
    document["request_throughput"] = {"unit": "requests/sec", "avg": _number(level.request_throughput)}
    if level.request_goodput is not None:
        document["request_goodput"] = {"unit": "requests/sec", "avg": _number(level.request_goodput)}
    document["request_count"] = {"unit": "count", "avg": level.request_count}
    document["error_count"] = {"unit": "count", "avg": level.error_count}
    document["benchmark_duration"] = {"unit": "sec", "avg": _number(level.benchmark_duration_s)}
    document["input_config"] = input_config(report, level.level)
    return document


def input_config(report: GenAIReport, level: float) -> dict[str, Any]:
    options = report.options
    config: dict[str, Any] = {
        "model": [options.model],
        "endpoint_type": options.endpoint_type.value,
        "url": report.url,
        "streaming": options.streaming,
        "tokenizer": report.tokenizer,
        "synthetic_input_tokens_mean": options.input_tokens_mean,
        "synthetic_input_tokens_stddev": options.input_tokens_stddev,
        "output_tokens_mean": options.output_tokens_mean or None,
        "output_tokens_stddev": options.output_tokens_stddev,
        "output_tokens_mean_deterministic": options.output_tokens_deterministic,
        "num_prompts": options.num_prompts,
        "batch_size_text": options.batch_size_text,
        "input_file": str(options.input_file) if options.input_file is not None else None,
        "request_count": options.requests_for(level),
        "warmup_request_count": options.warmup_request_count,
        "random_seed": options.seed,
        "goodput": {g.metric: g.limit / 1e6 if not g.higher_is_better else g.limit for g in options.goals},
    }
    config["concurrency" if report.level_name == "concurrency" else "request_rate"] = (
        int(level) if report.level_name == "concurrency" else level
    )
    return config


def report_document(report: GenAIReport, gates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "model": report.options.model,
        "endpoint_type": report.options.endpoint_type.value,
        "url": report.url,
        "streaming": report.options.streaming,
        "mode": report.level_name,
        "tokenizer": report.tokenizer,
        "started_at": report.started_at,
        "duration_s": report.duration_s,
        "levels": [{"level": lv.level, **level_document(report, lv)} for lv in report.levels],
        "warnings": list(report.warnings),
        "gates": gates or [],
    }


def dumps(document: dict[str, Any]) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2)


def _title(metric: str) -> str:
    text = metric.replace("_", " ").title()
    unit = UNITS.get(metric, "")
    return text if unit == "tokens" else f"{text} ({unit})"


def write_level_csv(level: LevelMetrics, path: Path) -> None:
    """genai-perf's CSV for one level, value formatting included (``1,234.56``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Metric", *CSV_STATS])
        for metric in RECORD_METRICS:
            if metric in level.stats:
                stats = level.stats[metric]
                writer.writerow(
                    [_title(metric), *(f"{_scaled(metric, stats.get(s)):,.2f}" for s in CSV_STATS)]
                )
        writer.writerow([])
        writer.writerow(["Metric", "Value"])
        writer.writerow(["Output Token Throughput (tokens/sec)", f"{level.output_token_throughput:.2f}"])
        writer.writerow(["Request Throughput (per sec)", f"{level.request_throughput:.2f}"])
        if level.request_goodput is not None:
            writer.writerow(["Request Goodput (per sec)", f"{level.request_goodput:.2f}"])
        writer.writerow(["Request Count (count)", f"{level.request_count:.2f}"])


def artifact_folder(report: GenAIReport, level: float) -> str:
    """genai-perf's run folder name: ``<model>-<service kind>-<endpoint type>-concurrency4``."""
    model = re.sub(r"[^A-Za-z0-9_.-]+", "_", report.options.model)
    kind = "openai" if report.options.endpoint_type.openai else "triton"
    load = f"concurrency{int(level)}" if report.level_name == "concurrency" else f"request_rate{level:g}"
    return f"{model}-{kind}-{report.options.endpoint_type.value}-{load}"


def write_artifacts(report: GenAIReport, directory: Path) -> list[Path]:
    written = []
    for level in report.levels:
        folder = directory / artifact_folder(report, level.level)
        write_level_csv(level, folder / "profile_export_genai_perf.csv")
        (folder / "profile_export_genai_perf.json").write_bytes(dumps(level_document(report, level)))
        written += [folder / "profile_export_genai_perf.csv", folder / "profile_export_genai_perf.json"]
    return written


def sweep_columns(report: GenAIReport) -> list[str]:
    columns = [report.level_name]
    for metric in RECORD_METRICS:
        unit = (
            "" if UNITS[metric] == "tokens" else "_" + UNITS[metric].replace("/", "_per_").replace("sec", "s")
        )
        columns += [
            f"{metric}_{stat}{unit}" for stat in ("avg", "p50", "p90", "p95", "p99", "min", "max", "std")
        ]
    return [
        *columns,
        "output_token_throughput_tokens_per_s",
        "request_throughput_per_s",
        "request_goodput_per_s",
        "request_count",
        "error_count",
        "benchmark_duration_s",
    ]


def write_sweep_csv(report: GenAIReport, path: Path) -> None:
    """One row per level: genai-perf's metric names with the statistic and unit in each column's name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(sweep_columns(report))
        for level in report.levels:
            row: list[object] = [int(level.level) if report.level_name == "concurrency" else level.level]
            for metric in RECORD_METRICS:
                stats = level.stats.get(metric)
                for stat in SWEEP_STATS:
                    row.append("" if stats is None else round(_scaled(metric, stats.get(stat)), 3))
            goodput = level.request_goodput
            row += [
                round(level.output_token_throughput, 3),
                round(level.request_throughput, 4),
                "" if goodput is None else round(goodput, 4),
                level.request_count,
                level.error_count,
                round(level.benchmark_duration_s, 3),
            ]
            writer.writerow(row)

"""``--plot`` for a generative run: output tokens/s against TTFT and ITL across the sweep (p50 and p99),
time to first token against prompt length, and inter-token latency by level; for embeddings the same
three with requests/s and request latency."""

from __future__ import annotations

import re
from pathlib import Path

from trt.perf.genai.profiler import GenAIReport

REPORTS_DIR = Path("reports")


def default_plot_path(report: GenAIReport) -> Path:
    stamp = report.started_at.replace(":", "").replace("-", "").replace("+0000", "Z")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", report.options.model)
    return REPORTS_DIR / f"genai_{name}_{report.options.endpoint_type.value}_{stamp}.png"


def write_plot(report: GenAIReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted(report.levels, key=lambda lv: lv.level)
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5), dpi=100)
    text = report.options.endpoint_type.generates
    curves: tuple[tuple[str, str, str], ...]
    # Generated text: output tokens/s against TTFT and ITL; embeddings: requests/s against latency.
    if text:
        throughput = [lv.output_token_throughput for lv in levels]
        curves = (("time_to_first_token", "TTFT", "o"), ("inter_token_latency", "ITL", "s"))
        first, first_label, spread, spread_label = (
            "time_to_first_token", "time to first token", "inter_token_latency", "inter-token latency",
        )  # fmt: skip
    else:
        throughput = [lv.request_throughput for lv in levels]
        curves = (("request_latency", "latency", "o"),)
        first = spread = "request_latency"
        first_label = spread_label = "request latency"
    sweep, scatter, boxes = axes
    for metric, label, marker in curves:
        for stat, style in (("p50", "-"), ("p99", "--")):
            points = [
                (x, lv.stats[metric].get(stat) / 1e6)
                for x, lv in zip(throughput, levels, strict=True)
                if metric in lv.stats
            ]
            if points:
                sweep.plot(*zip(*points, strict=True), marker + style, label=f"{label} {stat}")
    unit = "" if report.level_name == "concurrency" else "/s"
    for x, lv in zip(throughput, levels, strict=True):
        if first in lv.stats:
            y = lv.stats[first].get("p99") / 1e6
            sweep.annotate(
                f"{lv.level:g}{unit}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8
            )
    sweep.set_xlabel("output tokens/s" if text else "requests/s")
    sweep.set_ylabel("ms")
    sweep.set_yscale("log")
    sweep.set_title(f"{report.level_name.replace('_', ' ')} sweep")
    sweep.grid(True, alpha=0.3)
    sweep.legend(fontsize=8)
    for lv in levels:
        shown = [r for r in lv.requests if r.value(first) is not None]
        scatter.scatter(
            [r.input_sequence_length for r in shown],
            [(r.value(first) or 0.0) / 1e6 for r in shown],
            s=10,
            label=f"{lv.level:g}{unit}",
        )
    scatter.set_xlabel("input sequence length (tokens)")
    scatter.set_ylabel(f"{first_label} (ms)")
    scatter.set_title(f"{'TTFT' if text else 'latency'} vs prompt length")
    scatter.grid(True, alpha=0.3)
    scatter.legend(fontsize=8, title=report.level_name.replace("_", " "))
    data = [[(r.value(spread) or 0.0) / 1e6 for r in lv.requests if r.value(spread)] for lv in levels]
    labels = [f"{lv.level:g}{unit}" for lv in levels]
    kept = [(d, n) for d, n in zip(data, labels, strict=True) if d]
    if kept:
        boxes.boxplot([d for d, _ in kept], tick_labels=[n for _, n in kept])
    boxes.set_xlabel(report.level_name.replace("_", " "))
    boxes.set_ylabel(f"{spread_label} (ms)")
    boxes.set_title(f"{'ITL' if text else 'latency'} per request")
    boxes.grid(True, alpha=0.3)
    figure.suptitle(f"{report.options.model} over {report.options.endpoint_type.value} ({report.url})")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path

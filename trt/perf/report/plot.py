"""``--plot``: the throughput-latency curve as a PNG (matplotlib, headless)."""

from __future__ import annotations

import re
from pathlib import Path

from trt.perf.results import ProfileReport

REPORTS_DIR = Path("reports")


def default_plot_path(report: ProfileReport) -> Path:
    stamp = report.started_at.replace(":", "").replace("-", "").replace("+0000", "Z")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", report.model)
    return REPORTS_DIR / f"perf_{name}_{report.protocol}_{stamp}.png"


def write_plot(report: ProfileReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = sorted(report.results, key=lambda r: r.level)
    throughput = [r.throughput for r in results]
    figure, axis = plt.subplots(figsize=(7, 4.5), dpi=110)
    for key, style in (("p99", "o-"), ("p50", "s--")):
        values = [r.latency.percentiles[int(key[1:])] / 1000 for r in results]
        axis.plot(throughput, values, style, label=f"{key} latency")
    if report.percentile and report.percentile not in (50, 99):
        values = [r.latency.percentiles[report.percentile] / 1000 for r in results]
        axis.plot(throughput, values, "^:", label=f"p{report.percentile} latency")
    unit = "" if report.mode.value == "concurrency" else "/s"
    for result, x in zip(results, throughput, strict=True):
        axis.annotate(
            f"{result.level:g}{unit}",
            (x, result.latency.percentiles[99] / 1000),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=8,
        )
    axis.set_xlabel("throughput (infer/s)")
    axis.set_ylabel("latency (ms)")
    axis.set_title(f"{report.model} over {report.protocol}, batch {report.batch_size} ({report.mode.value})")
    axis.grid(True, alpha=0.3)
    axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path

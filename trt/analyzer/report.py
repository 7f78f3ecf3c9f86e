"""What ``trt analyze`` leaves behind: every measurement as CSV and JSON, the recommended model folder
(config.pbtxt plus the model file it needs), plots, and a Markdown report that shows why."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt.analyzer.goals import Goals, Measurement
from trt.analyzer.precision import PrecisionCheck, copy_model_file
from trt.analyzer.search import Reading, SearchResult
from trt.analyzer.space import Candidate, SearchSpace
from trt.protos import model_config_pb2
from trt.server.core.models.config import config_to_text

CSV_COLUMNS = (
    "candidate", "precision", "max_batch_size", "dynamic_batching", "max_queue_delay_us",
    "preferred_batch_sizes", "instances", "kind", "threads", "streams", "hint", "concurrency", "throughput",
    "avg_us", "p50_us", "p90_us", "p95_us", "p99_us", "errors", "memory_mb", "gpu_memory_mb", "stable",
    "meets_goals", "server_queue_us", "server_compute_us", "average_batch", "seconds",
)  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """The answer: the chosen candidate and the measurement it is chosen at, or the closest miss."""

    model: str
    mode: str
    goals: Goals
    space: SearchSpace
    result: SearchResult
    chosen: Reading | None
    closest: tuple[Reading, Measurement] | None
    precisions: dict[str, PrecisionCheck]
    measurements_used: int
    measured_now: int
    duration_s: float
    config: model_config_pb2.ModelConfig | None  # the recommended config

    @property
    def met(self) -> bool:
        return self.chosen is not None and self.chosen.best is not None


def pareto_front(measurements: list[Measurement], goals: Goals) -> list[Measurement]:
    """Measurements no other beats on both throughput and latency (the trade-offs worth considering)."""
    front = []
    for m in measurements:
        if m.errors:
            continue
        dominated = any(
            o is not m
            and o.throughput >= m.throughput
            and goals.latency(o) <= goals.latency(m)
            and (o.throughput > m.throughput or goals.latency(o) < goals.latency(m))
            for o in measurements
            if not o.errors
        )
        if not dominated:
            front.append(m)
    return sorted(front, key=lambda m: m.throughput)


def _row(candidate: Candidate, m: Measurement, goals: Goals) -> dict[str, object]:
    def num(value: float) -> object:
        return "" if value != value else round(value, 2)  # NaN -> empty cell

    return {
        "candidate": candidate.key,
        "precision": candidate.precision,
        "max_batch_size": candidate.max_batch_size,
        "dynamic_batching": candidate.dynamic_batching,
        "max_queue_delay_us": candidate.max_queue_delay_us,
        "preferred_batch_sizes": " ".join(map(str, candidate.preferred_batch_sizes)),
        "instances": candidate.instances,
        "kind": candidate.kind,
        "threads": candidate.threads,
        "streams": candidate.streams,
        "hint": candidate.hint,
        "concurrency": m.concurrency,
        "throughput": round(m.throughput, 2),
        **{
            f"{k}_us": round(m.latency_us.get(k, float("nan")), 1)
            for k in ("avg", "p50", "p90", "p95", "p99")
        },
        "errors": m.errors,
        "memory_mb": "" if m.memory_bytes is None else round(m.memory_bytes / 2**20, 1),
        "gpu_memory_mb": "" if m.gpu_memory_bytes is None else round(m.gpu_memory_bytes / 2**20, 1),
        "stable": m.stable,
        "meets_goals": goals.meets(m),
        "server_queue_us": num(m.server_queue_us),
        "server_compute_us": num(m.server_compute_us),
        "average_batch": num(m.average_batch),
        "seconds": round(m.seconds, 2),
    }


def write_measurements(outcome: Outcome, candidates: dict[str, Candidate], directory: Path) -> None:
    rows = [
        _row(candidates[r.candidate.key], m, outcome.goals)
        for r in outcome.result.readings.values()
        for m in r.measurements
    ]
    with (directory / "measurements.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def summary(outcome: Outcome) -> dict[str, object]:
    """The JSON document ``--json`` prints and ``summary.json`` holds."""
    chosen = outcome.chosen
    closest = outcome.closest
    all_measurements = [m for r in outcome.result.readings.values() for m in r.measurements]
    return {
        "model": outcome.model,
        "mode": outcome.mode,
        "goals": outcome.goals.target_text,
        "objective": str(outcome.goals.objective),
        "met": outcome.met,
        "complete": outcome.result.complete,
        "measurements_used": outcome.measurements_used,
        "measured_now": outcome.measured_now,
        "candidates_read": len(outcome.result.readings),
        "duration_s": round(outcome.duration_s, 1),
        "recommended": None
        if chosen is None or chosen.best is None
        else {
            "candidate": chosen.candidate.as_dict(),
            "label": chosen.candidate.label,
            "concurrency": chosen.best.concurrency,
            "measurement": chosen.best.as_dict(),
        },
        "closest": None
        if closest is None or outcome.met
        else {
            "candidate": closest[0].candidate.as_dict(),
            "label": closest[0].candidate.label,
            "measurement": closest[1].as_dict(),
            "violations": outcome.goals.violations(closest[1]),
        },
        "precisions": {k: v.as_dict() for k, v in outcome.precisions.items()},
        "space": {
            "max_batch_sizes": list(outcome.space.max_batch_sizes),
            "dynamic_batching": list(outcome.space.dynamic_batching),
            "queue_delays_us": list(outcome.space.queue_delays_us),
            "preferred_batch_sizes": [list(p) for p in outcome.space.preferred_batch_sizes],
            "instances": list(outcome.space.instances),
            "kinds": list(outcome.space.kinds),
            "precisions": list(outcome.space.precisions),
            "threads": list(outcome.space.threads),
            "streams": list(outcome.space.streams),
            "hints": list(outcome.space.hints),
            "notes": list(outcome.space.notes),
        },
        "pareto": [m.as_dict() for m in pareto_front(all_measurements, outcome.goals)],
        "readings": [
            {
                "candidate": r.candidate.as_dict(),
                "label": r.candidate.label,
                "best": None if r.best is None else r.best.as_dict(),
                "failure": r.failure,
                "measurements": [m.as_dict() for m in r.measurements],
            }
            for r in outcome.result.readings.values()
        ],
    }


def recommendation_text(outcome: Outcome) -> str:
    """The recommended config.pbtxt, with a comment saying where it comes from."""
    assert outcome.config is not None and outcome.chosen is not None and outcome.chosen.best is not None
    best = outcome.chosen.best
    header = (
        f"# Recommended by trt analyze ({outcome.mode}): {outcome.chosen.candidate.label}.\n"
        f"# Measured {best.throughput:,.0f} infer/s at client concurrency {best.concurrency}, "
        f"{outcome.goals.latency_metric} {outcome.goals.latency(best) / 1000:.2f} ms "
        f"(goals: {outcome.goals.target_text}).\n"
    )
    return header + config_to_text(outcome.config)


def write_recommendation(outcome: Outcome, model_file: Path | None, directory: Path) -> Path | None:
    """A loadable model folder ``directory/recommended/<model>`` and ``directory/config.pbtxt``."""
    if outcome.config is None or outcome.chosen is None:
        return None
    text = recommendation_text(outcome)
    (directory / "config.pbtxt").write_text(text)
    folder = directory / "recommended" / outcome.model
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(text)
    variant = outcome.precisions[outcome.chosen.candidate.precision].path or model_file
    if variant is not None and model_file is not None:
        copy_model_file(variant, folder / "1" / model_file.name)
    return folder


def _plot_configs(
    axis: Any, shown: list[Reading], chosen_key: str | None, x: Callable[[Measurement], float]
) -> None:
    """A line per config through its measurements in concurrency order; the chosen one drawn bold."""
    for reading in shown:
        points = sorted(reading.measurements, key=lambda m: m.concurrency)
        style = {"linewidth": 3, "zorder": 3} if reading.candidate.key == chosen_key else {"alpha": 0.7}
        axis.plot(
            [x(m) for m in points],
            [m.throughput for m in points],
            marker="o",
            label=reading.candidate.label,
            **style,
        )


def _save(figure: Any, axis: Any, title: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    axis.set_ylabel("throughput (infer/s)")
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_plots(outcome: Outcome, directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    goals = outcome.goals
    readings = sorted(
        outcome.result.readings.values(),
        key=lambda r: -(goals.score(r.best) if r.best else float("-inf")),
    )
    shown = readings[:12]  # a legend of more lines is unreadable; the CSV has them all
    chosen_key = outcome.chosen.candidate.key if outcome.chosen else None

    figure, axis = plt.subplots(figsize=(9, 6))
    _plot_configs(axis, shown, chosen_key, lambda m: goals.latency(m) / 1000)
    front = pareto_front([m for r in readings for m in r.measurements], goals)
    if front:
        axis.plot(
            [goals.latency(m) / 1000 for m in front],
            [m.throughput for m in front],
            linestyle="--",
            color="black",
            label="Pareto front",
        )
    if goals.latency_limit_us is not None:
        axis.axvline(goals.latency_limit_us / 1000, color="red", linestyle=":", label="latency target")
    axis.set_xlabel(f"{goals.latency_metric} latency (ms)")
    latency = _save(
        figure,
        axis,
        f"{outcome.model}: throughput vs {goals.latency_metric} latency per config",
        directory / "throughput_vs_latency.png",
    )

    figure, axis = plt.subplots(figsize=(9, 6))
    _plot_configs(axis, shown, chosen_key, lambda m: m.concurrency)
    axis.set_xscale("log", base=2)
    axis.set_xlabel("client concurrency")
    concurrency = _save(
        figure,
        axis,
        f"{outcome.model}: throughput vs concurrency per config",
        directory / "throughput_vs_concurrency.png",
    )
    return [latency, concurrency]


def write_markdown(outcome: Outcome, directory: Path, plots: list[Path]) -> Path:
    goals = outcome.goals
    lines = [f"# trt analyze: {outcome.model}", ""]
    lines.append(f"Goals: {goals.target_text}; objective: {goals.objective}. Search: {outcome.mode}, ")
    lines.append(
        f"{outcome.measurements_used} measurements ({outcome.measured_now} new) of "
        f"{len(outcome.result.readings)} configs in {outcome.duration_s:.0f} s"
        + ("" if outcome.result.complete else " (stopped by --max-duration)")
        + "."
    )
    lines.append("")
    if outcome.met and outcome.chosen and outcome.chosen.best:
        best = outcome.chosen.best
        lines += [
            "## Recommendation",
            "",
            f"**{outcome.chosen.candidate.label}**: {best.throughput:,.0f} infer/s at client concurrency "
            f"{best.concurrency}, {goals.latency_metric} {goals.latency(best) / 1000:.2f} ms.",
            "",
            "```",
            config_to_text(outcome.config).rstrip() if outcome.config else "",
            "```",
            "",
        ]
    else:
        lines += ["## No config meets the goals", ""]
        if outcome.closest:
            reading, measurement = outcome.closest
            lines.append(
                f"Closest: **{reading.candidate.label}** at concurrency {measurement.concurrency}: "
                + "; ".join(goals.violations(measurement))
                + "."
            )
        lines.append("")
    lines += [
        "## Configs",
        "",
        "| config | best concurrency | infer/s | latency (ms) | meets |",
        "|---|---|---|---|---|",
    ]
    ranked = sorted(
        outcome.result.readings.values(), key=lambda r: -(goals.score(r.best) if r.best else float("-inf"))
    )
    for reading in ranked:
        if reading.best:
            lines.append(
                f"| {reading.candidate.label} | {reading.best.concurrency} | "
                f"{reading.best.throughput:,.0f} | {goals.latency(reading.best) / 1000:.2f} | yes |"
            )
        else:
            why = f" ({reading.failure})" if reading.failure else ""
            lines.append(f"| {reading.candidate.label} | - | - | - | no{why} |")
    lines += ["", "## Precision", ""]
    for check in outcome.precisions.values():
        verdict = "accepted" if check.accepted else f"refused: {check.reason}"
        error = "n/a" if check.max_rel_error != check.max_rel_error else f"{check.max_rel_error:.2e}"
        lines.append(f"- {check.precision}: max relative error {error}, {verdict}")
    if outcome.space.notes:
        lines += ["", "## Notes", "", *[f"- {note}" for note in outcome.space.notes]]
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    lines += ["", "Every measurement: `measurements.csv`; the whole run: `summary.json`."]
    path = directory / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_summary(outcome: Outcome, directory: Path) -> Path:
    path = directory / "summary.json"
    path.write_text(json.dumps(summary(outcome), indent=2))
    return path

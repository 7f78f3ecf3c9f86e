"""``--baseline old.json --max-regression 10%``: has this run regressed from an earlier one?

Each level is compared window by window (``perf.significance``): throughput may not fall, nor p99 (and the
``--percentile`` latency) rise, by more than the limit *with the stated confidence* over the noise both
runs saw. A change inside the noise passes and says so; the verdict names the change, its confidence
bound, and each run's noise. Reports of schema trt-perf/1 (no per-window percentiles) still work: their
throughput windows are tested, their merged latencies compared as plain percentages."""

from __future__ import annotations

import math
from typing import Any

from trt.perf.measurement import LevelResult
from trt.perf.report.gates import GateResult
from trt.perf.results import ProfileReport
from trt.perf.significance import Comparison, compare


def _tested(old: dict[str, Any]) -> list[dict[str, Any]]:
    """The baseline level's windows a comparison uses (as ``LevelResult.tested_windows``)."""
    windows = [w for w in old.get("windows") or [] if isinstance(w, dict)]
    count = int(old.get("result_windows") or 0)
    if old.get("stable") and count:
        return windows[-count:]
    return windows


def _baseline_series(old: dict[str, Any], key: str) -> list[float]:
    """Per-window values of ``key`` ("throughput" or "pNN"); an old report's throughput windows."""
    windows = _tested(old)
    field = "throughput" if key == "throughput" else f"{key}_us"
    if windows:
        return [float(w[field]) for w in windows if w.get(field) is not None]
    if key == "throughput":
        return [float(v) for v in old.get("window_throughputs") or [] if v is not None]
    return []


def _candidate_series(result: LevelResult, key: str) -> list[float]:
    windows = result.tested_windows
    if key == "throughput":
        return [w.throughput for w in windows if w.count]
    p = int(key[1:])
    return [float(w.percentiles_us[p]) for w in windows if w.count and p in w.percentiles_us]


def _merged(old: dict[str, Any], result: LevelResult, key: str) -> tuple[float, float] | None:
    """(baseline, candidate) merged figures, for reports without per-window ones."""
    if key == "throughput":
        before, after = float(old.get("throughput") or 0), result.throughput
    else:
        value = (old.get("latency_us") or {}).get(key)
        new = result.latency.percentiles.get(int(key[1:]))
        if value is None or new is None:
            return None
        before, after = float(value), float(new)
    return (before, after) if before > 0 and after > 0 else None


def _noise(comparison: Comparison) -> str:
    def pct(value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value:.1%}"

    return (
        f"noise {pct(comparison.baseline_noise)} / {pct(comparison.candidate_noise)} over "
        f"{comparison.baseline_windows} / {comparison.candidate_windows} windows"
    )


def _rounded(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def _show(key: str, value: float) -> str:
    return f"{value:,.1f} infer/s" if key == "throughput" else f"{value / 1000:.3f} ms"


def _judge(
    name: str, key: str, old: dict[str, Any], result: LevelResult, limit: float, confidence: float
) -> GateResult | None:
    higher_is_better = key == "throughput"
    before_series, after_series = _baseline_series(old, key), _candidate_series(result, key)
    comparison = compare(before_series, after_series, confidence, higher_is_better)
    if comparison is None or comparison.bound is None:
        merged = _merged(old, result, key)
        if merged is None:
            return None
        comparison = Comparison(merged[1] / merged[0] - 1, None, confidence, math.nan, math.nan, 1, 1)
    if comparison.bound is None:
        merged = _merged(old, result, key)
        shown = f"{_show(key, merged[0])} -> {_show(key, merged[1])} " if merged else ""
    else:  # the figures the test compares: each run's windows, as a geometric mean
        before, after = _show(key, comparison.baseline_mean), _show(key, comparison.candidate_mean)
        shown = f"{before} -> {after} over the windows "
    regressed = comparison.regressed(limit, higher_is_better)
    sign = "-" if higher_is_better else "+"
    if comparison.bound is None:
        evidence = "no per-window figures in the baseline: the point change decides"
    else:
        side = "at best" if higher_is_better else "at least"
        evidence = f"{side} {comparison.bound:+.1%} with {confidence:.0%} confidence; {_noise(comparison)}"
    return GateResult(
        f"{name} {key}",
        not regressed,
        round(comparison.change * 100, 2),
        f"{name}: {key} {shown}({comparison.change:+.1%}, {evidence}; limit {sign}{limit:.0%}) "
        f"{'REGRESSED' if regressed else 'ok'}",
        (result.level,),
        {
            "change": round(comparison.change, 4),
            "bound": None if comparison.bound is None else round(comparison.bound, 4),
            "confidence": confidence,
            "baseline_noise": _rounded(comparison.baseline_noise),
            "candidate_noise": _rounded(comparison.candidate_noise),
            "baseline_windows": comparison.baseline_windows,
            "candidate_windows": comparison.candidate_windows,
        },
    )


def compare_baseline(
    baseline: dict[str, Any], report: ProfileReport, max_regression: float, confidence: float = 0.95
) -> list[GateResult]:
    """One verdict per level in common and figure: throughput, p99, and the ``--percentile`` latency."""
    old_levels = {float(r["level"]): r for r in baseline.get("results", []) if isinstance(r, dict)}
    outcomes: list[GateResult] = []
    limit = max_regression / 100
    label = report.level_name.lower()
    keys = ["throughput", "p99"]
    if report.percentile and report.percentile != 99:
        keys.append(f"p{report.percentile}")
    for result in report.results:
        old = next((v for k, v in old_levels.items() if math.isclose(k, result.level)), None)
        if old is None:
            continue
        for key in keys:
            outcome = _judge(f"baseline {label} {result.level:g}", key, old, result, limit, confidence)
            if outcome is not None:
                outcomes.append(outcome)
    if not outcomes:
        outcomes.append(
            GateResult("baseline", False, None, f"the baseline has no {label} level in common with this run")
        )
    return outcomes

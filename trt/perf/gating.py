"""Gates that hold on a noisy machine: a level that fails a gate is measured again before it fails the run.

A slowdown that lasts (a regression) fails every measurement; a burst of load from another program on
the machine passes once it has gone. ``confirm`` re-measures (default 1) bound how long a run may take.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from trt.perf.options import LoadKind, PerfOptions
from trt.perf.report import gates
from trt.perf.report.baseline import compare_baseline
from trt.perf.results import ProfileReport


@dataclass(frozen=True)
class GateSettings:
    thresholds: tuple[gates.Gate, ...] = ()
    baseline: dict[str, Any] | None = None
    max_regression: float = 10.0  # percent
    confidence: float = 0.95
    confirm: int = 1  # re-measures of a failing level before its gate fails

    @property
    def any(self) -> bool:
        return bool(self.thresholds) or self.baseline is not None


NO_ERRORS = "errors==0"


def with_error_gate(settings: GateSettings, report: ProfileReport) -> GateSettings:
    """``settings`` with ``errors==0`` added when requests failed and no gate of the user's judges
    errors: perf_analyzer fails a run at its first failed request, and a CI script written for it must
    not pass one that counted failures. trt measures on and reports them; the gate, like any, has the
    failing level measured again first (``--allow-errors`` leaves it out)."""
    if any(gate.metric in ("errors", "error_rate") for gate in settings.thresholds):
        return settings
    if not any(result.error_count for result in report.results):
        return settings
    return replace(settings, thresholds=(*settings.thresholds, gates.parse_gate(NO_ERRORS)))


def evaluate(settings: GateSettings, report: ProfileReport) -> list[gates.GateResult]:
    outcomes = gates.evaluate(list(settings.thresholds), report)
    if settings.baseline is not None:
        outcomes += compare_baseline(settings.baseline, report, settings.max_regression, settings.confidence)
    return outcomes


def options_for_levels(options: PerfOptions, levels: tuple[float, ...]) -> PerfOptions:
    """``options`` narrowed to ``levels`` (a custom-interval run has one level and is run whole)."""
    if options.load is LoadKind.CONCURRENCY:
        return replace(options, concurrency=tuple(int(level) for level in levels))
    if options.load is LoadKind.REQUEST_RATE:
        return replace(options, request_rates=levels)
    return options


def merge(report: ProfileReport, again: ProfileReport, note: str) -> ProfileReport:
    """``report`` with the levels of ``again`` replaced by their new measurement."""
    fresh = {r.level: r for r in again.results}
    results = tuple(
        next((new for level, new in fresh.items() if math.isclose(level, r.level)), r) for r in report.results
    )
    return replace(
        report,
        results=results,
        warnings=(*report.warnings, *(w for w in again.warnings if w not in report.warnings), note),
        duration_s=round(report.duration_s + again.duration_s, 2),
    )


def judge(
    settings: GateSettings,
    report: ProfileReport,
    remeasure: Callable[[tuple[float, ...]], ProfileReport],
    on_retry: Callable[[str], None] | None = None,
) -> tuple[ProfileReport, list[gates.GateResult]]:
    """Evaluate the gates; while some fail and re-measures are left, measure their levels again and
    evaluate on the new figures. Returns the report the verdicts come from, and the verdicts."""
    outcomes = evaluate(settings, report)
    for attempt in range(1, settings.confirm + 1):
        failing = [o for o in outcomes if not o.passed and o.levels]
        if not failing:
            break
        levels = tuple(sorted({level for o in failing for level in o.levels}))
        label = "concurrency" if report.mode is LoadKind.CONCURRENCY else "level"
        shown = ", ".join(f"{level:g}" for level in levels)
        note = (
            f"{len(failing)} gate(s) failed at {label} {shown}: measured again "
            f"({attempt} of {settings.confirm}) before failing the run"
        )
        if on_retry is not None:
            on_retry(note)
        report = merge(report, remeasure(levels), note)
        outcomes = evaluate(settings, report)
    return report, outcomes

"""perf_analyzer's stability rule: over the last three windows, max/min of throughput, and of the
stabilizing latency (average, or ``--percentile``), are each within 1 + stability percentage."""

from __future__ import annotations

import math

STABILITY_WINDOWS = 3


def is_stable(
    throughputs: list[float], latencies_us: list[float], percentage: float, check_latency: bool = True
) -> bool:
    if len(throughputs) < STABILITY_WINDOWS:
        return False
    recent = throughputs[-STABILITY_WINDOWS:]
    if min(recent) <= 0:
        return False
    if max(recent) / min(recent) > 1 + percentage / 100:
        return False
    if not check_latency:
        return True
    lat = latencies_us[-STABILITY_WINDOWS:]
    if any(math.isnan(x) or x <= 0 for x in lat):
        return False
    return max(lat) / min(lat) <= 1 + percentage / 100

"""Per-request latency distributions behind Triton's optional latency metrics (``--metrics-config``).

- ``summary_latencies=true``: quantiles of each request's durations over a sliding window, as
  Prometheus summaries (``nv_inference_*_summary_us``). The window is Prometheus' own for summaries
  (prometheus-cpp, which Triton uses): five age buckets of 12 s, so the last 48-60 s. ``_count`` and
  ``_sum`` cover every observation, as in any Prometheus summary.
- ``histogram_latencies=true``: each request's time to its first response, in milliseconds, counted in
  fixed buckets (``nv_inference_first_response_histogram_ms``); a model's ``model_metrics`` may set the
  buckets.

Values are whole microseconds (milliseconds for the histogram), truncated as Triton truncates them.
The core only observes; the metrics endpoint renders. Updates happen on the event loop's thread.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from trt.protos import model_config_pb2

logger = logging.getLogger("trt.metrics")

# Triton's default quantiles, as (quantile, allowed rank error) pairs.
DEFAULT_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))
DEFAULT_FIRST_RESPONSE_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
FIRST_RESPONSE_FAMILY = "nv_inference_first_response_histogram_ms"
WINDOW_S = 60.0
AGE_BUCKETS = 5

# Values are kept in log-spaced bins: a quantile is reported within 1% of a value that was observed
# at that rank, and a window holds at most ~2,200 bins whatever the request rate (integers below
# 2**63 span that many powers of 1.02).
_GAMMA = 1.02
_LOG_GAMMA = math.log(_GAMMA)
_ZERO_BIN = -(2**31)  # values of 0 (a request that never queued) are counted exactly


@dataclass(frozen=True)
class LatencyMetricsSettings:
    """Which latency metrics the server publishes (tritonserver's ``--metrics-config`` settings)."""

    counters: bool = True  # counter_latencies: the nv_inference_*_duration_us counters
    summaries: bool = False  # summary_latencies
    quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES  # summary_quantiles
    histograms: bool = False  # histogram_latencies


def _bin_of(value: int) -> int:
    return _ZERO_BIN if value <= 0 else math.ceil(math.log(value) / _LOG_GAMMA)


def _value_of(index: int) -> float:
    """The value a bin stands for: within 1% of any value counted in it, whole as the values are."""
    if index == _ZERO_BIN:
        return 0.0
    return float(round(2.0 * _GAMMA**index / (_GAMMA + 1.0)))


class SlidingQuantiles:
    """Quantiles of the values observed in the last ``window_s`` seconds, in bounded memory."""

    __slots__ = ("_age_s", "_ages", "_bins", "_slot", "count", "total")

    def __init__(self, window_s: float = WINDOW_S, age_buckets: int = AGE_BUCKETS) -> None:
        self._age_s = window_s / age_buckets
        self._ages = age_buckets
        self._slot = -1
        self._bins: dict[int, dict[int, int]] = {}  # age slot -> bin -> count
        self.count = 0  # every value ever observed, as a summary's _count
        self.total = 0  # and their sum, as its _sum

    def observe(self, value: int, now_s: float) -> None:
        self.count += 1
        self.total += value
        slot = int(now_s // self._age_s)
        if slot != self._slot:
            self._slot = slot
            self._bins = {s: b for s, b in self._bins.items() if s > slot - self._ages}
            self._bins.setdefault(slot, {})
        bins = self._bins[slot]
        index = _bin_of(value)
        bins[index] = bins.get(index, 0) + 1

    def quantiles(self, wanted: Sequence[float], now_s: float) -> list[float]:
        """Each quantile in ``wanted`` of the window ending at ``now_s``; NaN where it holds nothing
        (as Prometheus reports an empty summary)."""
        slot = int(now_s // self._age_s)
        merged: dict[int, int] = {}
        for age, bins in self._bins.items():
            if slot - self._ages < age <= slot:
                for index, count in bins.items():
                    merged[index] = merged.get(index, 0) + count
        seen = sum(merged.values())
        if not seen:
            return [math.nan] * len(wanted)
        ordered = sorted(merged.items())
        results = []
        for q in wanted:
            rank = q * (seen - 1)  # the rank of the value at quantile q, counting from 0
            below = 0
            for index, count in ordered:
                below += count
                if below > rank:
                    results.append(_value_of(index))
                    break
            else:
                results.append(_value_of(ordered[-1][0]))
        return results


class FixedHistogram:
    """Counts per bucket (``le`` bounds, then +Inf), with the count and sum, as a Prometheus histogram."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.total = 0

    def observe(self, value: int) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value

    def cumulative(self) -> list[int]:
        """Each bucket's count of values at or below its bound (the last is every value)."""
        running, result = 0, []
        for count in self.counts:
            running += count
            result.append(running)
        return result


def first_response_buckets(config: model_config_pb2.ModelConfig) -> tuple[float, ...]:
    """The first-response histogram's buckets: the model's ``model_metrics`` where it sets them
    (checked by the config rules), else Triton's defaults. Another family is warned about, as Triton
    warns: it takes no options."""
    buckets = DEFAULT_FIRST_RESPONSE_BUCKETS_MS
    for control in config.model_metrics.metric_control:
        family = control.metric_identifier.family
        if family == FIRST_RESPONSE_FAMILY:
            buckets = tuple(control.histogram_options.buckets)
        else:
            logger.warning(
                "model '%s': metric family '%s' in model_metrics takes no options (only %s does)",
                config.name,
                family,
                FIRST_RESPONSE_FAMILY,
            )
    return buckets


class LatencyDistributions:
    """One model version's summaries and first-response histogram, as its settings ask."""

    # Summaries by the duration they observe; the request summary is left out for a model with a
    # response cache, as Triton leaves it out (its time would not include the cache's work).
    NAMES = (
        "request",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    )

    def __init__(
        self,
        settings: LatencyMetricsSettings,
        cached: bool,
        first_response_buckets: Sequence[float] = DEFAULT_FIRST_RESPONSE_BUCKETS_MS,
    ) -> None:
        self.summaries: dict[str, SlidingQuantiles] = {}
        if settings.summaries:
            for name in self.NAMES:
                if name == "request" and cached:
                    continue
                if name.startswith("cache") and not cached:
                    continue
                self.summaries[name] = SlidingQuantiles()
        self.first_response = FixedHistogram(first_response_buckets) if settings.histograms else None

    def success(self, now_s: float, request_ns: int, queue_ns: int, input_ns: int, infer_ns: int,
                output_ns: int) -> None:  # fmt: skip
        summaries = self.summaries
        if summaries:
            request = summaries.get("request")
            if request is not None:
                request.observe(request_ns // 1000, now_s)
            summaries["queue"].observe(queue_ns // 1000, now_s)
            summaries["compute_input"].observe(input_ns // 1000, now_s)
            summaries["compute_infer"].observe(infer_ns // 1000, now_s)
            summaries["compute_output"].observe(output_ns // 1000, now_s)

    def cache_hit(self, now_s: float, lookup_ns: int) -> None:
        if self.summaries:
            self.summaries["queue"].observe(0, now_s)
            self.summaries["cache_hit"].observe(lookup_ns // 1000, now_s)

    def cache_miss(self, now_s: float, insert_ns: int) -> None:
        if self.summaries:
            self.summaries["cache_miss"].observe(insert_ns // 1000, now_s)

    def responded(self, first_response_ns: int) -> None:
        if self.first_response is not None:
            self.first_response.observe(first_response_ns // 1_000_000)

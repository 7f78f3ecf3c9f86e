"""The sliding-window quantiles and the fixed histogram behind ``--metrics-config`` on their own: how
close a quantile is, what the window forgets, how much memory it may hold, and the buckets a model's
``model_metrics`` may set."""

from __future__ import annotations

import math

import numpy as np
import pytest
from google.protobuf import text_format

from trt.protos import model_config_pb2
from trt.server.core.extensions.latency_distributions import (
    DEFAULT_FIRST_RESPONSE_BUCKETS_MS,
    FixedHistogram,
    LatencyDistributions,
    LatencyMetricsSettings,
    SlidingQuantiles,
    first_response_buckets,
)
from trt.server.core.models.config_rules import config_problems


def test_each_quantile_is_within_one_percent_of_the_exact_one() -> None:
    values = np.random.default_rng(7).lognormal(mean=7.0, sigma=1.5, size=20_000).astype(np.int64) + 1
    summary = SlidingQuantiles()
    for value in values.tolist():
        summary.observe(value, now_s=1000.0)
    wanted = [0.5, 0.9, 0.95, 0.99, 0.999]
    for q, found in zip(wanted, summary.quantiles(wanted, now_s=1000.0), strict=True):
        exact = float(np.quantile(values, q, method="lower"))
        assert abs(found - exact) <= 0.011 * exact, (q, found, exact)
    assert summary.count == len(values) and summary.total == int(values.sum())


def test_zero_durations_are_counted_exactly() -> None:
    summary = SlidingQuantiles()
    for value in (0, 0, 0, 100):
        summary.observe(value, now_s=5.0)
    assert summary.quantiles([0.5, 1.0], now_s=5.0) == [0.0, pytest.approx(100, rel=0.01)]


def test_the_window_forgets_what_is_older_than_a_minute_but_not_the_count() -> None:
    summary = SlidingQuantiles()  # five buckets of 12 s
    summary.observe(1_000_000, now_s=0.0)
    for second in range(50, 60):
        summary.observe(10, now_s=float(second))
    # At 59 s both are in the window; at 61 s the first bucket (0-12 s) has aged out.
    assert summary.quantiles([1.0], now_s=59.0) == [pytest.approx(1_000_000, rel=0.01)]
    assert summary.quantiles([1.0], now_s=61.0) == [pytest.approx(10, rel=0.01)]
    (empty,) = summary.quantiles([0.5], now_s=200.0)
    assert math.isnan(empty)
    assert summary.count == 11  # _count and _sum cover everything, as Prometheus summaries do


def test_a_window_holds_a_bounded_number_of_bins_whatever_the_values() -> None:
    summary = SlidingQuantiles()
    for exponent in range(63):
        for value in range(2**exponent, 2**exponent + 50):
            summary.observe(value, now_s=1.0)
    bins = sum(len(b) for b in summary._bins.values())
    assert bins < 2_300


def test_the_histogram_counts_each_value_in_its_bucket_cumulatively() -> None:
    histogram = FixedHistogram([100, 500])
    for value in (0, 100, 101, 499, 500, 501, 10_000):
        histogram.observe(value)
    assert histogram.cumulative() == [2, 5, 7]  # le=100 holds 100 itself, as Prometheus' le does
    assert histogram.count == 7 and histogram.total == 11_701


def test_a_model_with_a_response_cache_has_no_request_summary_as_in_triton() -> None:
    settings = LatencyMetricsSettings(summaries=True)
    cached, uncached = (
        LatencyDistributions(settings, cached=True),
        LatencyDistributions(settings, cached=False),
    )
    assert "request" not in cached.summaries and "cache_hit" in cached.summaries
    assert "request" in uncached.summaries and "cache_hit" not in uncached.summaries
    assert cached.first_response is None


def _config(text: str) -> model_config_pb2.ModelConfig:
    head = 'name: "m" backend: "python" input { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } '
    head += 'output { name: "O" data_type: TYPE_FP32 dims: [ 1 ] }\n'
    return text_format.Parse(head + text, model_config_pb2.ModelConfig())


def test_model_metrics_set_the_first_response_buckets(caplog: pytest.LogCaptureFixture) -> None:
    assert first_response_buckets(_config("")) == DEFAULT_FIRST_RESPONSE_BUCKETS_MS
    config = _config(
        'model_metrics { metric_control [ { metric_identifier { family: "nv_inference_first_response_'
        'histogram_ms" } histogram_options { buckets: [ 1, 2, 4 ] } }, { metric_identifier { family: '
        '"nv_inference_count" } } ] }'
    )
    assert first_response_buckets(config) == (1.0, 2.0, 4.0)
    assert "metric family 'nv_inference_count' in model_metrics takes no options" in caplog.text
    assert not list(config_problems(config))


@pytest.mark.parametrize("buckets", ["[ 5, 1 ]", "[ 1, 1 ]", "[ 1, inf ]"])
def test_buckets_must_be_finite_and_increasing(buckets: str) -> None:
    config = _config(
        'model_metrics { metric_control [ { metric_identifier { family: "nv_inference_first_response_'
        f'histogram_ms" }} histogram_options {{ buckets: {buckets} }} }} ] }}'
    )
    (problem,) = config_problems(config)
    assert "must be finite and strictly increasing" in str(problem)
    assert problem.field == "model_metrics.metric_control[0].histogram_options.buckets"

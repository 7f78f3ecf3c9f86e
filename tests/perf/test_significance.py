"""The statistics behind --baseline: Student's t quantiles, and when a change counts as a regression."""

from __future__ import annotations

import math

import pytest

from trt.perf.significance import coefficient_of_variation, compare, t_quantile


@pytest.mark.parametrize(
    ("probability", "df", "table"),
    [(0.95, 1, 6.3138), (0.95, 4, 2.1318), (0.95, 10, 1.8125), (0.99, 5, 3.3649), (0.9, 30, 1.3104)],
)
def test_t_quantiles_match_the_tables(probability: float, df: float, table: float) -> None:
    assert t_quantile(probability, df) == pytest.approx(table, abs=1e-4)


def test_a_change_beyond_the_noise_and_the_limit_regresses() -> None:
    baseline = [1000.0, 1010.0, 990.0, 1005.0]
    slower = [800.0, 805.0, 795.0, 810.0]
    comparison = compare(baseline, slower, 0.95, higher_is_better=True)
    assert comparison is not None
    assert comparison.change == pytest.approx(-0.2, abs=0.01)
    assert comparison.bound is not None and -0.2 < comparison.bound < -0.17
    assert comparison.regressed(0.10, higher_is_better=True)
    assert not comparison.regressed(0.25, higher_is_better=True)  # a 25% limit allows it


def test_the_same_change_inside_wide_noise_does_not() -> None:
    noisy = [1000.0, 700.0, 1300.0]
    slower = [800.0, 1100.0, 560.0]
    comparison = compare(noisy, slower, 0.95, higher_is_better=True)
    assert comparison is not None and comparison.change < -0.1
    assert comparison.bound is not None and comparison.bound > 0  # the data allow no change at all
    assert not comparison.regressed(0.10, higher_is_better=True)
    assert comparison.baseline_noise == pytest.approx(coefficient_of_variation(noisy))


def test_latency_regresses_upwards_and_one_window_falls_back_to_the_point_change() -> None:
    comparison = compare([10.0, 10.2, 9.9], [13.0, 13.1, 12.8], 0.95, higher_is_better=False)
    assert comparison is not None and comparison.bound is not None and comparison.bound > 0.2
    assert comparison.regressed(0.10, higher_is_better=False)
    single = compare([10.0], [13.0], 0.95, higher_is_better=False)
    assert single is not None and single.bound is None and single.regressed(0.10, higher_is_better=False)
    assert math.isnan(single.baseline_noise)
    assert compare([], [1.0], 0.95, True) is None

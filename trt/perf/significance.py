"""Is a change between two runs larger than their noise? Welch's t-test on the log of per-window figures.

A run measures a level over several windows; the spread of those windows is the noise of that run. A
change counts as a regression only when its one-sided confidence bound (``confidence``, 95% by default)
lies beyond the allowed limit: "with 95% confidence, throughput fell by more than 10%". Logs make the
test about ratios, so that a 10% limit means the same at 100 and at 10,000 infer/s.

Student's t quantiles come from the regularized incomplete beta function (a continued fraction, as in
Numerical Recipes' ``betacf``), so that no statistics package is needed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

_EPSILON = 3e-14
_TINY = 1e-300


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function, by the modified Lentz method."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        step = d * c
        h *= step
        if abs(step - 1.0) < _EPSILON:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(probability: float, df: float) -> float:
    """The t with P(T <= t) = ``probability`` (0.5 < probability < 1), by bisection on the CDF."""
    if not 0.5 <= probability < 1.0:
        raise ValueError("probability must be in [0.5, 1)")
    low, high = 0.0, 1.0
    while t_cdf(high, df) < probability:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_cdf(middle, df) < probability:
            low = middle
        else:
            high = middle
        if high - low < 1e-10:
            break
    return (low + high) / 2.0


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation over the mean: the noise of one run's windows (NaN below two)."""
    if len(values) < 2:
        return math.nan
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(variance) / mean if mean > 0 else math.nan


@dataclass(frozen=True)
class Comparison:
    """A candidate run's windows against a baseline's, for one figure.

    ``change`` is the ratio of geometric means minus one (+0.2: 20% higher); ``bound`` the one-sided
    confidence bound on that change in the direction that would be a regression (the least-bad change the
    data allow), None when either run has fewer than two windows."""

    change: float
    bound: float | None
    confidence: float
    baseline_noise: float  # coefficient of variation of the baseline's windows
    candidate_noise: float
    baseline_windows: int
    candidate_windows: int
    baseline_mean: float = math.nan  # geometric mean of the windows compared
    candidate_mean: float = math.nan

    def regressed(self, limit: float, higher_is_better: bool) -> bool:
        """Whether the change is worse than ``limit`` (a fraction) with the stated confidence; without a
        bound (too few windows) the point change decides, as a plain percentage gate would."""
        worst = self.change if self.bound is None else self.bound
        return worst < -limit if higher_is_better else worst > limit


def compare(
    baseline: Sequence[float], candidate: Sequence[float], confidence: float, higher_is_better: bool
) -> Comparison | None:
    """Welch's one-sided test on log values; None when either side has no positive finite value."""
    old = [math.log(v) for v in baseline if v > 0 and math.isfinite(v)]
    new = [math.log(v) for v in candidate if v > 0 and math.isfinite(v)]
    if not old or not new:
        return None
    n1, n2 = len(old), len(new)
    mean1, mean2 = sum(old) / n1, sum(new) / n2
    difference = mean2 - mean1
    bound: float | None = None
    if n1 >= 2 and n2 >= 2:
        var1 = sum((v - mean1) ** 2 for v in old) / (n1 - 1)
        var2 = sum((v - mean2) ** 2 for v in new) / (n2 - 1)
        a, b = var1 / n1, var2 / n2
        error = math.sqrt(a + b)
        if error == 0.0:
            bound = math.exp(difference) - 1.0
        else:
            # Welch-Satterthwaite degrees of freedom.
            df = (a + b) ** 2 / (a * a / (n1 - 1) + b * b / (n2 - 1))
            margin = t_quantile(confidence, df) * error
            # The bound nearest to "no regression": above the change for throughput, below for latency.
            bound = math.exp(difference + margin if higher_is_better else difference - margin) - 1.0
    return Comparison(
        change=math.exp(difference) - 1.0,
        bound=bound,
        confidence=confidence,
        baseline_noise=coefficient_of_variation([v for v in baseline if v > 0 and math.isfinite(v)]),
        candidate_noise=coefficient_of_variation([v for v in candidate if v > 0 and math.isfinite(v)]),
        baseline_windows=n1,
        candidate_windows=n2,
        baseline_mean=math.exp(mean1),
        candidate_mean=math.exp(mean2),
    )

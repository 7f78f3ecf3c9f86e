"""CI gates: ``--gate "p99<20ms"``, ``--gate "throughput@8>500"``, and ``--baseline old.json
--max-regression 10%``. A failed gate makes ``trt perf`` exit 1 with a message naming it.

Without ``@LEVEL`` a gate applies to the whole sweep: throughput is the best level's, latencies the worst
level's, errors the total. Latency gates need a unit (us, ms, s)."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trt.perf.errors import OptionError
from trt.perf.measurement import LevelResult
from trt.perf.results import ProfileReport

_GATE = re.compile(
    r"^\s*(?P<metric>[A-Za-z_]+\d*)\s*(?:@\s*(?P<level>\d+(?:\.\d+)?))?\s*(?P<op><=|>=|==|<|>)\s*"
    r"(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-zµ/%]*)\s*$"
)
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
}
_TIME_UNITS = {"us": 1.0, "µs": 1.0, "usec": 1.0, "ms": 1000.0, "s": 1e6}
_RATE_UNITS = {"": 1.0, "/s": 1.0, "infer/s": 1.0, "rps": 1.0, "qps": 1.0}


@dataclass(frozen=True)
class Gate:
    text: str
    metric: str  # throughput, avg, min, max, pNN, errors, error_rate
    level: float | None
    op: str
    threshold: float  # microseconds for latencies, infer/s for throughput, a fraction for error_rate


@dataclass(frozen=True)
class GateResult:
    name: str
    passed: bool
    observed: float | None
    message: str
    levels: tuple[float, ...] = ()  # the levels whose figures decided it: what a re-measure repeats
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "gate": self.name,
            "passed": self.passed,
            "observed": self.observed,
            "message": self.message,
            "levels": list(self.levels),
            **self.details,
        }


def parse_gate(text: str) -> Gate:
    match = _GATE.match(text)
    if not match:
        raise OptionError(f"--gate '{text}': expected METRIC[@LEVEL]<OP><VALUE>[UNIT], e.g. \"p99<20ms\"")
    metric, unit = match["metric"].lower(), match["unit"]
    value = float(match["value"])
    if metric in ("avg", "min", "max") or re.fullmatch(r"p\d{1,2}", metric):
        if unit not in _TIME_UNITS:
            raise OptionError(
                f"--gate '{text}': give the latency a unit (us, ms or s), e.g. \"{metric}<20ms\""
            )
        value *= _TIME_UNITS[unit]
    elif metric == "throughput":
        if unit not in _RATE_UNITS:
            raise OptionError(f"--gate '{text}': throughput is in infer/s; drop the unit '{unit}'")
    elif metric == "errors":
        if unit:
            raise OptionError(f"--gate '{text}': errors is a count; drop the unit '{unit}'")
    elif metric == "error_rate":
        if unit not in ("", "%"):
            raise OptionError(f"--gate '{text}': error_rate takes a fraction or a percentage")
        value = value / 100 if unit == "%" else value
    else:
        raise OptionError(
            f"--gate '{text}': unknown metric '{metric}' (throughput, avg, min, max, p50, p90, p95, p99, "
            "pN with --percentile N, errors, error_rate)"
        )
    level = float(match["level"]) if match["level"] else None
    return Gate(text.strip(), metric, level, match["op"], value)


def _latency(result: LevelResult, metric: str) -> float:
    if metric == "avg":
        return result.latency.avg_us
    if metric == "min":
        return float(result.latency.min_us)
    if metric == "max":
        return float(result.latency.max_us)
    p = int(metric[1:])
    if p not in result.latency.percentiles:
        raise OptionError(f"--gate on {metric}: that percentile was not measured; add --percentile {p}")
    return float(result.latency.percentiles[p])


def _observe(gate: Gate, results: list[LevelResult]) -> tuple[float, tuple[float, ...]]:
    """The figure a gate judges, and the levels it comes from."""
    every = tuple(r.level for r in results)
    if gate.metric == "throughput":
        return max(r.throughput for r in results), every
    if gate.metric == "errors":
        return float(sum(r.error_count for r in results)), every
    if gate.metric == "error_rate":
        errors = sum(r.error_count for r in results)
        total = errors + sum(r.request_count for r in results)
        return (errors / total if total else 0.0), every
    worst = max(results, key=lambda r: _latency(r, gate.metric))
    return _latency(worst, gate.metric), (worst.level,)


def _show(metric: str, value: float) -> str:
    if metric == "throughput":
        return f"{value:,.1f} infer/s"
    if metric == "errors":
        return f"{value:.0f}"
    if metric == "error_rate":
        return f"{value:.2%}"
    return f"{value / 1000:.3f} ms"


def _first_error(gate: Gate, results: list[LevelResult]) -> str:
    """What the first failed request was told, for a failed gate on errors."""
    if gate.metric not in ("errors", "error_rate"):
        return ""
    samples = [sample for result in results for sample in result.error_samples]
    return f" (first: {samples[0]})" if samples else ""


def evaluate(gates: list[Gate], report: ProfileReport) -> list[GateResult]:
    outcomes = []
    for gate in gates:
        results = list(report.results)
        where = "over the sweep"
        if gate.level is not None:
            results = [r for r in results if math.isclose(r.level, gate.level)]
            where = f"at {report.level_name.lower()} {gate.level:g}"
            if not results:
                outcomes.append(
                    GateResult(
                        gate.text, False, None, f"gate '{gate.text}': no level {gate.level:g} measured"
                    )
                )
                continue
        if not results:
            outcomes.append(GateResult(gate.text, False, None, f"gate '{gate.text}': nothing was measured"))
            continue
        observed, levels = _observe(gate, results)
        passed = _OPS[gate.op](observed, gate.threshold)
        verdict = "passed" if passed else "FAILED"
        outcomes.append(
            GateResult(
                gate.text,
                passed,
                round(observed, 3),
                f"gate '{gate.text}' {verdict}: {gate.metric} {where} is {_show(gate.metric, observed)}"
                + ("" if passed else _first_error(gate, results)),
                levels,
            )
        )
    return outcomes


def parse_regression(text: str) -> float:
    """``10%`` or ``10`` as a percentage."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%?\s*", text)
    if not match:
        raise OptionError(f"--max-regression '{text}': expected a percentage such as 10%")
    return float(match[1])


def parse_confidence(text: str) -> float:
    """``95%``, ``95`` or ``0.95`` as a fraction strictly between 0.5 and 1."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*", text)
    value = float(match[1]) if match else math.nan
    if match and (match[2] or value > 1):
        value /= 100
    if not 0.5 <= value < 1:
        raise OptionError(f"--confidence '{text}': expected a level such as 95% (from 50% to below 100%)")
    return value

"""``--gate`` for generative runs: ``ttft_p99<300ms``, ``itl_avg<20ms``, ``output_token_throughput>100``,
``goodput>2``, ``errors==0``, optionally at one level (``ttft_p99@4<300ms``). Without a level a latency
gate judges the worst level, a throughput gate the best, errors their total."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from trt.perf.errors import OptionError
from trt.perf.genai.metrics import LevelMetrics
from trt.perf.genai.profiler import GenAIReport
from trt.perf.report.gates import GateResult

_GATE = re.compile(
    r"^\s*(?P<metric>[a-z_]+?)(?:_(?P<stat>avg|min|max|std|p\d{1,2}))?\s*(?:@\s*(?P<level>\d+(?:\.\d+)?))?\s*"
    r"(?P<op><=|>=|==|<|>)\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>[a-zµ/]*)\s*$"
)
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
}  # fmt: skip
_TIMES = {
    "ttft": "time_to_first_token",
    "ttst": "time_to_second_token",
    "itl": "inter_token_latency",
    "latency": "request_latency",
    "request_latency": "request_latency",
    "time_to_first_token": "time_to_first_token",
    "inter_token_latency": "inter_token_latency",
}
_RATES = {
    "output_token_throughput": "output_token_throughput",
    "tokens_per_s": "output_token_throughput",
    "request_throughput": "request_throughput",
    "goodput": "request_goodput",
    "request_goodput": "request_goodput",
}
_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


@dataclass(frozen=True)
class GenAIGate:
    text: str
    metric: str
    stat: str
    level: float | None
    op: str
    value: float  # nanoseconds for times

    @property
    def is_time(self) -> bool:
        return self.metric in _TIMES.values()

    def observe(self, level: LevelMetrics) -> float | None:
        if self.metric == "errors":
            return float(level.error_count)
        if self.is_time:
            stats = level.stats.get(self.metric)
            return None if stats is None else stats.get(self.stat)
        value = getattr(level, self.metric)
        return None if value is None else float(value)


def parse_genai_gate(text: str) -> GenAIGate:
    match = _GATE.match(text.lower())
    if not match:
        raise OptionError(
            f'--gate \'{text}\': expected e.g. "ttft_p99<300ms" or "output_token_throughput>100"'
        )
    name, stat, unit = match["metric"], match["stat"] or "avg", match["unit"]
    value = float(match["value"])
    level = float(match["level"]) if match["level"] else None
    if name in _TIMES:
        if unit not in _NS:
            raise OptionError(f"--gate '{text}': give the time a unit (ms, s, us), e.g. \"{name}_p99<300ms\"")
        return GenAIGate(text.strip(), _TIMES[name], stat, level, match["op"], value * _NS[unit])
    if match["stat"]:
        name = f"{name}_{match['stat']}"  # a rate has no statistics: the suffix was part of its name
    if name in _RATES or name == "errors":
        return GenAIGate(text.strip(), _RATES.get(name, name), "avg", level, match["op"], value)
    raise OptionError(
        f"--gate '{text}': unknown metric (ttft, ttst, itl, latency with _avg/_min/_max/_pNN; "
        "output_token_throughput, request_throughput, goodput, errors)"
    )


def _show(gate: GenAIGate, value: float) -> str:
    return f"{value / 1e6:.2f} ms" if gate.is_time else f"{value:,.2f}"


def evaluate(gates: list[GenAIGate], report: GenAIReport) -> list[GateResult]:
    outcomes = []
    for gate in gates:
        levels = [lv for lv in report.levels if gate.level is None or math.isclose(lv.level, gate.level)]
        observed = [(v, lv.level) for lv in levels if (v := gate.observe(lv)) is not None]
        if not observed:
            outcomes.append(
                GateResult(gate.text, False, None, f"gate '{gate.text}': nothing measured for it")
            )
            continue
        if gate.metric == "errors":
            value, where = sum(v for v, _ in observed), tuple(lv for _, lv in observed)
        elif gate.is_time:
            value, level = max(observed)
            where = (level,)
        else:
            value, level = min(observed) if gate.op in ("<", "<=") else max(observed)
            where = (level,)
        passed = _OPS[gate.op](value, gate.value)
        what = f"{gate.metric} {gate.stat}" if gate.is_time else gate.metric
        at = "" if gate.level is None else f" at {gate.level:g}"
        outcomes.append(
            GateResult(
                gate.text,
                passed,
                round(value / 1e6 if gate.is_time else value, 3),
                f"gate '{gate.text}' {'passed' if passed else 'FAILED'}: {what}{at} is {_show(gate, value)}",
                where,
            )
        )
    return outcomes

"""``--goal ttft<200ms --goal itl<50ms``: the service-level objectives goodput counts requests against
(genai-perf's ``--goodput time_to_first_token:200 inter_token_latency:50`` says the same, in ms)."""

from __future__ import annotations

import re

from trt.perf.errors import OptionError
from trt.perf.genai.options import Goal

ALIASES = {
    "ttft": "time_to_first_token",
    "time_to_first_token": "time_to_first_token",
    "itl": "inter_token_latency",
    "inter_token_latency": "inter_token_latency",
    "latency": "request_latency",
    "request_latency": "request_latency",
    "tps_per_user": "output_token_throughput_per_user",
    "output_token_throughput_per_user": "output_token_throughput_per_user",
}
_GOAL = re.compile(r"^\s*([a-z_]+)\s*(<=|<|>=|>|:)\s*(\d+(?:\.\d+)?)\s*([a-zµ/]*)\s*$")
_TIME_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


def parse_goal(text: str) -> Goal:
    match = _GOAL.match(text.lower())
    if not match or match[1] not in ALIASES:
        raise OptionError(
            f'--goal \'{text}\': expected METRIC<VALUE, e.g. "ttft<200ms", "itl<50ms", "latency<2s", '
            f'"tps_per_user>20" (metrics: {", ".join(sorted(set(ALIASES)))})'
        )
    metric, op, value, unit = ALIASES[match[1]], match[2], float(match[3]), match[4]
    if metric == "output_token_throughput_per_user":
        if op not in (">", ">=", ":") or unit not in ("", "/s", "tokens/s"):
            raise OptionError(f"--goal '{text}': tokens per second per user is a floor, e.g. tps_per_user>20")
        return Goal(text.strip(), metric, value, higher_is_better=True)
    if op not in ("<", "<=", ":"):
        raise OptionError(f"--goal '{text}': a time objective is a ceiling, e.g. {match[1]}<200ms")
    if op == ":" and not unit:
        unit = "ms"  # genai-perf's --goodput takes milliseconds
    if unit not in _TIME_NS:
        raise OptionError(f"--goal '{text}': give the time a unit (ms, s, us), e.g. {match[1]}<200ms")
    return Goal(text.strip(), metric, value * _TIME_NS[unit])

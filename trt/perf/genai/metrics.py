"""The metrics of a generative level, as genai-perf (and AIPerf after it) define them.

Per request, over the responses that carry text (ns):
- request_latency = last response - request sent
- time_to_first_token = first response - request sent
- time_to_second_token = second response - first response
- inter_token_latency = (request_latency - time_to_first_token) / (output_sequence_length - 1): the first
  token excluded, requests with one output token have none
- output_token_throughput_per_user = 1 / inter_token_latency (tokens/s)
- output_sequence_length = tokens of the whole output text, input_sequence_length = tokens of the prompt
  (the tokenizer's count without special tokens; not the number of responses)
Embeddings answer once with no text: a request has request_latency and input_sequence_length only.
Per level: benchmark duration = last response of any request - first request sent; request_throughput and
output_token_throughput are counts over that duration; request_goodput counts only the requests that meet
every ``--goal`` (a request without the figure a goal needs does not meet it, as in AIPerf).

Statistics are genai-perf's: mean, min, max, population standard deviation, and numpy's linearly
interpolated percentiles (p1 ... p99), not perf_analyzer's nearest-rank ones."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from trt.perf.genai.options import Goal
from trt.perf.genai.records import RequestRecord
from trt.perf.genai.tokenizer import TokenCounter

PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
TIME_METRICS = ("time_to_first_token", "time_to_second_token", "inter_token_latency", "request_latency")
RECORD_METRICS = (
    "request_latency",
    "time_to_first_token",
    "time_to_second_token",
    "inter_token_latency",
    "output_token_throughput_per_user",
    "output_sequence_length",
    "input_sequence_length",
)


@dataclass(frozen=True)
class RequestMetrics:
    request_latency: float  # ns
    time_to_first_token: float | None  # None: the answer is not generated text (embeddings)
    time_to_second_token: float | None
    inter_token_latency: float | None
    output_token_throughput_per_user: float | None
    output_sequence_length: int | None
    input_sequence_length: int
    responses: int

    def value(self, metric: str) -> float | None:
        value = getattr(self, metric)
        return None if value is None else float(value)


@dataclass(frozen=True)
class Statistics:
    count: int
    avg: float
    min: float
    max: float
    std: float
    percentiles: dict[int, float]

    def get(self, name: str) -> float:
        if name in ("avg", "min", "max", "std"):
            return float(getattr(self, name))
        return self.percentiles[int(name[1:])]


def statistics(values: list[float]) -> Statistics | None:
    if not values:
        return None
    data = np.asarray(values, dtype=np.float64)
    return Statistics(
        count=len(values),
        avg=float(data.mean()),
        min=float(data.min()),
        max=float(data.max()),
        std=float(data.std()),
        percentiles={p: float(np.percentile(data, p)) for p in PERCENTILES},
    )


def request_metrics(record: RequestRecord, output_tokens: int, input_tokens: int) -> RequestMetrics:
    latency = float(record.times_ns[-1] - record.start_ns)
    if not record.texts:  # an embeddings answer
        return RequestMetrics(latency, None, None, None, None, None, input_tokens, len(record.times_ns))
    ttft = float(record.times_ns[0] - record.start_ns)
    ttst = float(record.times_ns[1] - record.times_ns[0]) if len(record.times_ns) > 1 else None
    itl = (latency - ttft) / (output_tokens - 1) if output_tokens > 1 else None
    per_user = 1e9 / itl if itl else None
    responses = len(record.times_ns)
    return RequestMetrics(latency, ttft, ttst, itl, per_user, output_tokens, input_tokens, responses)


@dataclass(frozen=True)
class LevelMetrics:
    level: float
    requests: tuple[RequestMetrics, ...]
    stats: dict[str, Statistics]  # by metric name; a metric no request had is absent
    request_count: int  # requests that completed with text
    error_count: int
    benchmark_duration_s: float
    request_throughput: float
    output_token_throughput: float
    request_goodput: float | None  # None without --goal
    good_request_count: int | None
    client_cpu_cores: float
    delayed_requests: int = 0
    error_samples: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_output_tokens(self) -> int:
        return sum(r.output_sequence_length or 0 for r in self.requests)


def meets(request: RequestMetrics, goals: tuple[Goal, ...]) -> bool:
    for goal in goals:
        value = request.value(goal.metric)
        if value is None:
            return False
        if (value < goal.limit) if goal.higher_is_better else (value > goal.limit):
            return False
    return True


def level_metrics(
    level: float,
    records: list[RequestRecord],
    counter: TokenCounter,
    goals: tuple[Goal, ...],
    cpu_s: float = 0.0,
    wall_s: float = 0.0,
    delayed: int = 0,
) -> LevelMetrics:
    done = [r for r in records if r.ok]
    failed = [r for r in records if r.error is not None]
    outputs = counter.count_many([r.text for r in done])
    per_request = tuple(
        request_metrics(record, tokens, record.prompt.tokens)
        for record, tokens in zip(done, outputs, strict=True)
    )
    stats = {}
    for metric in RECORD_METRICS:
        found = statistics([v for r in per_request if (v := r.value(metric)) is not None])
        if found is not None:
            stats[metric] = found
    if done:
        duration = (max(r.times_ns[-1] for r in done) - min(r.start_ns for r in done)) / 1e9
    else:
        duration = math.nan
    rate = (lambda n: n / duration) if duration and duration > 0 else (lambda n: math.nan)
    good = sum(meets(r, goals) for r in per_request) if goals else None
    samples: list[str] = []
    for record in failed:
        if record.error and record.error not in samples and len(samples) < 3:
            samples.append(record.error)
    return LevelMetrics(
        level=level,
        requests=per_request,
        stats=stats,
        request_count=len(done),
        error_count=len(failed),
        benchmark_duration_s=duration,
        request_throughput=rate(len(done)),
        output_token_throughput=rate(sum(outputs)),
        request_goodput=None if good is None else rate(good),
        good_request_count=good,
        client_cpu_cores=cpu_s / wall_s if wall_s > 0 else 0.0,
        delayed_requests=delayed,
        error_samples=tuple(samples),
    )

"""A generative run: prompts made once, each level measured in turn, metrics computed after each level
(tokens counted off the measured path), and the sweep's report."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from trt.perf.control import open_control
from trt.perf.errors import MeasurementError, OptionError
from trt.perf.genai.input_file import read_prompt_texts
from trt.perf.genai.metrics import LevelMetrics, level_metrics
from trt.perf.genai.options import EndpointType, GenAIOptions
from trt.perf.genai.prompts import Prompt, PromptMaker, batched
from trt.perf.genai.runner import ClientFactory, GrpcClients, HttpClients, run_level
from trt.perf.genai.tokenizer import TokenCounter
from trt.perf.options import LoadKind, PerfOptions
from trt.perf.options import Protocol as WireProtocol
from trt.perf.transport import RequestFailed

logger = logging.getLogger("trt.perf")
SATURATED = 0.9  # of one core: the load generator, not the server, would set the pace


class GenAIProgress(Protocol):
    def level_started(self, index: int, total: int, level: float, requests: int) -> None: ...

    def level_done(self, metrics: LevelMetrics) -> None: ...

    def warn(self, message: str) -> None: ...


class QuietProgress:
    def level_started(self, index: int, total: int, level: float, requests: int) -> None:
        pass

    def level_done(self, metrics: LevelMetrics) -> None:
        pass

    def warn(self, message: str) -> None:
        logger.warning("%s", message)


@dataclass(frozen=True)
class GenAIReport:
    options: GenAIOptions
    url: str
    started_at: str
    duration_s: float
    tokenizer: str
    levels: tuple[LevelMetrics, ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def level_name(self) -> str:
        return "concurrency" if self.options.load is LoadKind.CONCURRENCY else "request_rate"


def _factory(options: GenAIOptions) -> ClientFactory:
    if options.endpoint_type is not EndpointType.KSERVE:
        return HttpClients(options)
    from trt.perf.genai.grpc_stream import RequestBuilder

    host, port = options.host_port
    settings = PerfOptions(model=options.model, url=f"{host}:{port}", protocol=WireProtocol.GRPC)
    control = open_control(settings)
    try:
        info = control.model_info(options.model, options.model_version)
    finally:
        control.close()
    try:
        return GrpcClients(options, RequestBuilder(info, options))
    except RequestFailed as error:
        raise OptionError(str(error)) from None


def make_prompts(options: GenAIOptions, counter: TokenCounter, warn: Callable[[str], None]) -> list[Prompt]:
    maker = PromptMaker(counter, options.seed)
    if options.input_file is not None:
        given = read_prompt_texts(options.input_file)
        size = options.batch_size_text
        if len(given) < size:
            raise OptionError(
                f"--input-file {options.input_file}: {len(given)} prompts, fewer than --batch-size-text"
            )
        unused = options.unused_with_input_file()
        if unused:
            warn(f"{', '.join(unused)}: not used, the prompts are --input-file's")
        left_out = len(given) % size
        if left_out:
            warn(
                f"--input-file: the last {left_out} of {len(given)} prompts do not fill a request of "
                f"--batch-size-text {size} and are not sent"
            )
        from_file = maker.from_texts(given, options.output_tokens_mean, options.output_tokens_stddev)
        return batched(from_file, size)
    texts = maker.make(
        options.num_prompts * options.batch_size_text,
        options.input_tokens_mean,
        options.input_tokens_stddev,
        options.output_tokens_mean,
        options.output_tokens_stddev,
    )
    return batched(texts, options.batch_size_text)


def run_genai(options: GenAIOptions, progress: GenAIProgress | None = None) -> GenAIReport:
    progress = progress or QuietProgress()
    started, clock = datetime.now(UTC), time.monotonic()
    counter = TokenCounter.load(options.tokenizer)
    warnings: list[str] = []

    def warn(message: str) -> None:
        if message not in warnings:
            warnings.append(message)
            progress.warn(message)

    prompts = make_prompts(options, counter, warn)
    factory = _factory(options)

    if not options.streaming and options.endpoint_type.generates:
        warn("not streaming: each answer is one response, so time to first token is the request latency")
    results: list[LevelMetrics] = []
    levels = options.levels
    for index, level in enumerate(levels):
        progress.level_started(index, len(levels), level, options.requests_for(level))
        run = run_level(options, level, prompts, factory)
        metrics = level_metrics(
            level, run.records, counter, options.goals, run.cpu_s, run.wall_s, run.delayed
        )
        label = f"{'concurrency' if options.load is LoadKind.CONCURRENCY else 'request rate'} {level:g}"
        if metrics.request_count == 0:
            samples = "; ".join(metrics.error_samples) or "no response carried text"
            raise MeasurementError(f"{label}: no request succeeded ({samples})")
        if metrics.error_count:
            warn(f"{label}: {metrics.error_count} request(s) failed, e.g. {metrics.error_samples[0]}")
        if metrics.client_cpu_cores > SATURATED:
            used = f"{metrics.client_cpu_cores:.0%}"
            warn(f"{label}: the load generator used {used} of a core: it may set the pace")
        if metrics.delayed_requests:
            late = metrics.delayed_requests
            warn(f"{label}: {late} arrivals waited for one of the requests in flight (--max-inflight) to end")
        results.append(metrics)
        progress.level_done(metrics)
    host, port = options.host_port
    return GenAIReport(
        options=options,
        url=f"{host}:{port}",
        started_at=started.isoformat(timespec="seconds"),
        duration_s=round(time.monotonic() - clock, 2),
        tokenizer=str(counter.source),
        levels=tuple(results),
        warnings=tuple(warnings),
    )

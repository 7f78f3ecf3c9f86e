"""``trt analyze`` for generative models: the most output tokens/s within a TTFT and inter-token latency
target, over instance counts and the model's own parameters (its scheduler's batch size, e.g.).

Each candidate config is loaded on a scratch ``trt serve`` through the repository extension, then read up
a doubling ladder of client concurrencies with the generative ``trt perf`` engine (gRPC streaming, the
vLLM backend's tensors): the ladder stops at the first level that misses a target or adds under 5% to
output tokens/s. The best level that meets both targets is the candidate's value."""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trt.analyzer.deployment import ScratchServer
from trt.analyzer.errors import AnalyzeError
from trt.analyzer.session import effective_config
from trt.perf.errors import PerfError
from trt.perf.genai.metrics import LevelMetrics
from trt.perf.genai.options import EndpointType, GenAIOptions
from trt.perf.genai.profiler import run_genai
from trt.protos import model_config_pb2
from trt.server.core.models.config import config_to_dict, config_to_text

logger = logging.getLogger("trt.analyze")
PLATEAU = 0.05
# Parameters a generative model's config commonly uses for its scheduler's batch (vLLM's max_num_seqs).
KNOWN_BATCH_PARAMETERS = ("max_batch", "max_batch_size", "max_num_seqs")


@dataclass(frozen=True)
class GenerativeTargets:
    ttft_ns: float | None
    itl_ns: float | None
    percentile: str = "p99"  # the statistic both targets apply to: avg, p50, p90, p95 or p99

    @property
    def text(self) -> str:
        parts = []
        if self.ttft_ns is not None:
            parts.append(f"TTFT {self.percentile} <= {self.ttft_ns / 1e6:g} ms")
        if self.itl_ns is not None:
            parts.append(f"ITL {self.percentile} <= {self.itl_ns / 1e6:g} ms")
        return ", ".join(parts) or "no latency target"

    def figure(self, level: LevelMetrics, metric: str) -> float:
        stats = level.stats.get(metric)
        return math.nan if stats is None else stats.get(self.percentile)

    def violations(self, level: LevelMetrics) -> list[str]:
        problems = []
        if level.error_count:
            problems.append(f"{level.error_count} failed requests")
        for metric, limit, name in (
            ("time_to_first_token", self.ttft_ns, "TTFT"),
            ("inter_token_latency", self.itl_ns, "ITL"),
        ):
            value = self.figure(level, metric)
            if limit is not None and not value <= limit:
                problems.append(f"{name} {self.percentile} {value / 1e6:.1f} ms > {limit / 1e6:g} ms")
        return problems


@dataclass(frozen=True)
class GenerativeCandidate:
    instances: int
    parameters: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        settings = [f"{self.instances} instance{'s' if self.instances > 1 else ''}"]
        settings += [f"{name}={value}" for name, value in self.parameters]
        return ", ".join(settings)


@dataclass
class CandidateReading:
    candidate: GenerativeCandidate
    levels: list[LevelMetrics] = field(default_factory=list)
    best: LevelMetrics | None = None
    failure: str | None = None


@dataclass(frozen=True)
class GenerativeRequest:
    model: str
    repository: Path
    tokenizer: Path
    targets: GenerativeTargets
    instances: tuple[int, ...] = (1,)
    parameters: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (name, values); () detects known ones
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16)
    input_tokens: int = 128
    output_tokens: int = 32
    request_count: int = 0  # per level; 0: max(8, 3 x concurrency)
    output_dir: Path | None = None

    @property
    def directory(self) -> Path:
        return self.output_dir or Path("reports") / self.model


@dataclass(frozen=True)
class GenerativeOutcome:
    model: str
    targets: GenerativeTargets
    readings: tuple[CandidateReading, ...]
    chosen: CandidateReading | None
    config: model_config_pb2.ModelConfig | None
    duration_s: float
    notes: tuple[str, ...] = ()

    @property
    def met(self) -> bool:
        return self.chosen is not None and self.chosen.best is not None


def is_generative(config: model_config_pb2.ModelConfig) -> bool:
    """A decoupled model that takes ``text_input``: the vLLM backend's contract."""
    decoupled = config.model_transaction_policy.decoupled
    return decoupled and any(spec.name == "text_input" for spec in config.input)


def _batch_values(current: int) -> tuple[str, ...]:
    """Powers of two from 1 to twice the configured value (at least 8, at most 64)."""
    ceiling = min(64, max(8, 2 * current))
    values = sorted({v for v in (1, 2, 4, 8, 16, 32, 64) if v <= ceiling} | {current})
    return tuple(str(v) for v in values)


def sweep_parameters(
    config: model_config_pb2.ModelConfig, given: tuple[tuple[str, tuple[str, ...]], ...]
) -> tuple[tuple[tuple[str, tuple[str, ...]], ...], list[str]]:
    """The parameters to sweep: those given, or the model's known batch parameter; and notes."""
    if given:
        return given, []
    for name in KNOWN_BATCH_PARAMETERS:
        if name in config.parameters:
            value = config.parameters[name].string_value
            if value.isascii() and value.isdigit() and int(value) > 0:
                return ((name, _batch_values(int(value))),), [f"sweeping the model's '{name}' (now {value})"]
    return (), ["no scheduler parameter found (max_batch, max_num_seqs): give one with --parameter NAME=V,V"]


def candidate_config(
    base: model_config_pb2.ModelConfig, candidate: GenerativeCandidate
) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    config.CopyFrom(base)
    kind = (
        base.instance_group[0].kind if base.instance_group else model_config_pb2.ModelInstanceGroup.KIND_CPU
    )
    del config.instance_group[:]
    group = config.instance_group.add()
    group.count, group.kind = candidate.instances, kind
    for name, value in candidate.parameters:
        config.parameters[name].string_value = value
    return config


def _read(
    measure: Callable[[int], LevelMetrics], candidate: GenerativeCandidate, request: GenerativeRequest
) -> CandidateReading:
    reading = CandidateReading(candidate)
    previous: LevelMetrics | None = None
    for concurrency in request.concurrency:
        try:
            level = measure(concurrency)
        except PerfError as error:
            reading.failure = f"at concurrency {concurrency}: {error}"
            break
        reading.levels.append(level)
        if request.targets.violations(level):
            break
        if reading.best is None or level.output_token_throughput > reading.best.output_token_throughput:
            reading.best = level
        if previous is not None and level.output_token_throughput < previous.output_token_throughput * (
            1 + PLATEAU
        ):
            break
        previous = level
    return reading


def analyze_generative(
    request: GenerativeRequest, on_level: Callable[[GenerativeCandidate, LevelMetrics], None] | None = None
) -> GenerativeOutcome:
    started = time.monotonic()
    model_dir = request.repository / request.model
    if not (model_dir / "config.pbtxt").exists():
        raise AnalyzeError(f"no model '{request.model}' in {request.repository}")
    server = ScratchServer()
    readings: list[CandidateReading] = []
    try:
        server.add_model(request.model, model_dir)
        try:
            server.load(request.model)
        except AnalyzeError as exc:
            raise AnalyzeError(f"'{request.model}' does not load: {exc}") from None
        base = effective_config(server, request.model)
        if not is_generative(base):
            raise AnalyzeError(
                f"'{request.model}' is not a generative model (decoupled, with a text_input input): "
                "drop --target-ttft/--target-itl/--tokenizer to tune it as a classic model"
            )
        swept, notes = sweep_parameters(base, request.parameters)
        candidates = [GenerativeCandidate(n) for n in request.instances]
        for name, values in swept:
            candidates = [
                replace(c, parameters=(*c.parameters, (name, v))) for c in candidates for v in values
            ]
        for candidate in candidates:
            try:
                server.load(request.model, config_to_dict(candidate_config(base, candidate)))
            except AnalyzeError as exc:
                readings.append(CandidateReading(candidate, failure=f"does not load: {exc}"))
                continue

            def measure(concurrency: int, candidate: GenerativeCandidate = candidate) -> LevelMetrics:
                options = GenAIOptions(
                    model=request.model,
                    endpoint_type=EndpointType.KSERVE,
                    tokenizer=request.tokenizer,
                    url=server.grpc_url,
                    streaming=True,
                    concurrency=(concurrency,),
                    request_count=request.request_count or max(8, 3 * concurrency),
                    warmup_request_count=min(concurrency, 4),
                    input_tokens_mean=request.input_tokens,
                    output_tokens_mean=request.output_tokens,
                    num_prompts=20,
                    request_timeout_s=120,
                )
                level = run_genai(options).levels[0]
                if on_level is not None:
                    on_level(candidate, level)
                return level

            readings.append(_read(measure, candidate, request))
    finally:
        server.close()
    meeting = [r for r in readings if r.best is not None]
    chosen = max(meeting, key=lambda r: r.best.output_token_throughput if r.best else 0.0, default=None)
    return GenerativeOutcome(
        model=request.model,
        targets=request.targets,
        readings=tuple(readings),
        chosen=chosen,
        config=candidate_config(base, chosen.candidate) if chosen else None,
        duration_s=time.monotonic() - started,
        notes=tuple(notes),
    )


def closest(outcome: GenerativeOutcome) -> tuple[CandidateReading, LevelMetrics] | None:
    """Where nothing meets the targets: the measurement with the fewest and smallest misses."""
    pairs = [(r, lv) for r in outcome.readings for lv in r.levels]

    def gap(level: LevelMetrics) -> float:
        total = 1.0 if level.error_count else 0.0
        for metric, limit in (
            ("time_to_first_token", outcome.targets.ttft_ns),
            ("inter_token_latency", outcome.targets.itl_ns),
        ):
            value = outcome.targets.figure(level, metric)
            if limit is not None:
                total += max(0.0, value / limit - 1) if math.isfinite(value) else 1.0
        return total

    return min(pairs, key=lambda pair: (gap(pair[1]), -pair[1].output_token_throughput), default=None)


CSV_COLUMNS = (
    "candidate", "instances", "parameters", "concurrency", "output_token_throughput", "request_throughput",
    "ttft_avg_ms", "ttft_p99_ms", "itl_avg_ms", "itl_p99_ms", "request_latency_p99_ms", "errors", "meets",
)  # fmt: skip


def _ms(level: LevelMetrics, metric: str, stat: str) -> float | str:
    stats = level.stats.get(metric)
    return "" if stats is None else round(stats.get(stat) / 1e6, 3)


def write_reports(outcome: GenerativeOutcome, directory: Path) -> dict[str, Path]:
    """config.pbtxt (when a candidate meets the targets), measurements.csv, summary.json, report.md and
    tokens_vs_latency.png in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    if outcome.config is not None:
        written["config"] = directory / "config.pbtxt"
        written["config"].write_text(config_to_text(outcome.config))
    written["measurements"] = directory / "measurements.csv"
    with written["measurements"].open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for reading in outcome.readings:
            for level in reading.levels:
                writer.writerow([
                    reading.candidate.label, reading.candidate.instances,
                    " ".join(f"{n}={v}" for n, v in reading.candidate.parameters), int(level.level),
                    round(level.output_token_throughput, 2), round(level.request_throughput, 3),
                    _ms(level, "time_to_first_token", "avg"), _ms(level, "time_to_first_token", "p99"),
                    _ms(level, "inter_token_latency", "avg"), _ms(level, "inter_token_latency", "p99"),
                    _ms(level, "request_latency", "p99"), level.error_count,
                    not outcome.targets.violations(level),
                ])  # fmt: skip
    written["summary"] = directory / "summary.json"
    written["summary"].write_text(json.dumps(summary(outcome), indent=2))
    written["plot"] = write_plot(outcome, directory / "tokens_vs_latency.png")
    written["report"] = directory / "report.md"
    written["report"].write_text(markdown(outcome))
    return written


def summary(outcome: GenerativeOutcome) -> dict[str, Any]:
    chosen = outcome.chosen
    best = chosen.best if chosen else None
    found = closest(outcome) if not outcome.met else None
    return {
        "model": outcome.model,
        "kind": "generative",
        "targets": outcome.targets.text,
        "met": outcome.met,
        "recommended": None
        if chosen is None or best is None
        else {
            "candidate": chosen.candidate.label,
            "instances": chosen.candidate.instances,
            "parameters": dict(chosen.candidate.parameters),
            "concurrency": int(best.level),
            "output_token_throughput": round(best.output_token_throughput, 2),
            "ttft_ms": _ms(best, "time_to_first_token", outcome.targets.percentile),
            "itl_ms": _ms(best, "inter_token_latency", outcome.targets.percentile),
        },
        "closest": None
        if found is None
        else {
            "candidate": found[0].candidate.label,
            "concurrency": int(found[1].level),
            "misses": outcome.targets.violations(found[1]),
        },
        "failures": {r.candidate.label: r.failure for r in outcome.readings if r.failure},
        "notes": list(outcome.notes),
        "duration_s": round(outcome.duration_s, 1),
    }


def markdown(outcome: GenerativeOutcome) -> str:
    lines = [f"# trt analyze {outcome.model} (generative)", "", f"Targets: {outcome.targets.text}.", ""]
    if outcome.met and outcome.chosen and outcome.chosen.best:
        best = outcome.chosen.best
        lines += [
            f"Recommended: **{outcome.chosen.candidate.label}**, {best.output_token_throughput:,.1f} output "
            f"tokens/s at concurrency {int(best.level)} (`config.pbtxt` beside this report).",
            "",
        ]
    else:
        lines += ["No candidate meets the targets.", ""]
    lines += [
        "| candidate | best concurrency | output tokens/s | TTFT | ITL | meets |",
        "|---|---|---|---|---|---|",
    ]
    percentile = outcome.targets.percentile
    for reading in outcome.readings:
        shown = reading.best or (reading.levels[-1] if reading.levels else None)
        if shown is None:
            lines.append(f"| {reading.candidate.label} | - | - | - | - | failed: {reading.failure} |")
            continue
        lines.append(
            f"| {reading.candidate.label} | {int(shown.level)} | {shown.output_token_throughput:,.1f} | "
            f"{_ms(shown, 'time_to_first_token', percentile)} ms | "
            f"{_ms(shown, 'inter_token_latency', percentile)} ms | {'yes' if reading.best else 'no'} |"
        )
    lines += [
        "",
        *(f"- {note}" for note in outcome.notes),
        "",
        "![tokens/s against latency](tokens_vs_latency.png)",
        "",
    ]
    return "\n".join(lines)


def write_plot(outcome: GenerativeOutcome, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (ttft_axis, itl_axis) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    percentile = outcome.targets.percentile
    for reading in outcome.readings:
        if not reading.levels:
            continue
        tokens = [lv.output_token_throughput for lv in reading.levels]
        for axis, metric in ((ttft_axis, "time_to_first_token"), (itl_axis, "inter_token_latency")):
            values = [outcome.targets.figure(lv, metric) / 1e6 for lv in reading.levels]
            axis.plot(tokens, values, "o-", label=reading.candidate.label)
    for axis, limit, name in (
        (ttft_axis, outcome.targets.ttft_ns, "TTFT"),
        (itl_axis, outcome.targets.itl_ns, "ITL"),
    ):
        if limit is not None:
            axis.axhline(limit / 1e6, color="red", linestyle=":", label="target")
        axis.set_xlabel("output tokens/s")
        axis.set_ylabel(f"{name} {percentile} (ms)")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(f"trt analyze {outcome.model}: {outcome.targets.text}")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path

"""``trt analyze MODEL --target-ttft 500ms --target-itl 50ms``: the generative half of ``trt analyze``
(see ``trt.analyzer.generative``). Exit status: 0 a config meets the targets, 1 none does (the closest is
named), 2 a bad option or a model that cannot be analyzed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from trt.analyzer.errors import AnalyzeError
from trt.analyzer.generative import (
    GenerativeCandidate,
    GenerativeOutcome,
    GenerativeRequest,
    GenerativeTargets,
    analyze_generative,
    closest,
    summary,
    write_reports,
)
from trt.analyzer.goals import parse_duration_s
from trt.perf.errors import OptionError
from trt.perf.genai.metrics import LevelMetrics
from trt.perf.ranges import concurrency_levels

EXIT_NOT_MET = 1
STATISTICS = ("avg", "p50", "p90", "p95", "p99")


@dataclass(frozen=True)
class GenerativeArguments:
    model: str
    repository: Path
    target_ttft: str | None
    target_itl: str | None
    statistic: str
    tokenizer: Path | None
    instances: str | None
    parameters: tuple[str, ...]
    concurrency: str
    input_tokens: int
    output_tokens: int
    request_count: int
    output_dir: Path | None
    json_output: bool
    quiet: bool


def _parameters(values: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    parsed = []
    for value in values:
        name, sep, options = value.partition("=")
        choices = tuple(v.strip() for v in options.split(",") if v.strip())
        if not sep or not name.strip() or not choices:
            raise AnalyzeError(f"--parameter '{value}': expected NAME=V1,V2 (e.g. max_batch=1,4,8)")
        parsed.append((name.strip(), choices))
    return tuple(parsed)


def _tokenizer(arguments: GenerativeArguments) -> Path:
    if arguments.tokenizer is not None:
        return arguments.tokenizer
    folder = arguments.repository / arguments.model
    found = sorted(folder.glob("tokenizer.json")) + sorted(folder.glob("*/tokenizer.json"))
    if not found:
        raise AnalyzeError(f"no tokenizer.json in {folder}: give the model's with --tokenizer PATH")
    return found[0]


def request_from(arguments: GenerativeArguments) -> GenerativeRequest:
    if arguments.statistic not in STATISTICS:
        raise AnalyzeError(f"--target-statistic '{arguments.statistic}': choose from {', '.join(STATISTICS)}")
    ttft = arguments.target_ttft
    itl = arguments.target_itl
    targets = GenerativeTargets(
        ttft_ns=parse_duration_s(ttft, "--target-ttft") * 1e9 if ttft else None,
        itl_ns=parse_duration_s(itl, "--target-itl") * 1e9 if itl else None,
        percentile=arguments.statistic,
    )
    try:
        levels = tuple(concurrency_levels(arguments.concurrency, True))
    except OptionError as exc:
        raise AnalyzeError(str(exc)) from None
    instances: tuple[int, ...] = (1,)
    if arguments.instances:
        try:
            instances = tuple(int(v) for v in arguments.instances.split(","))
        except ValueError:
            raise AnalyzeError(f"--instances '{arguments.instances}': expected numbers such as 1,2") from None
        if any(n < 1 for n in instances):
            raise AnalyzeError("--instances: at least 1")
    return GenerativeRequest(
        model=arguments.model,
        repository=arguments.repository,
        tokenizer=_tokenizer(arguments),
        targets=targets,
        instances=instances,
        parameters=_parameters(arguments.parameters),
        concurrency=levels,
        input_tokens=arguments.input_tokens,
        output_tokens=arguments.output_tokens,
        request_count=arguments.request_count,
        output_dir=arguments.output_dir,
    )


def _ms(level: LevelMetrics, metric: str, statistic: str) -> str:
    stats = level.stats.get(metric)
    return "-" if stats is None else f"{stats.get(statistic) / 1e6:.1f}"


def print_outcome(console: Console, outcome: GenerativeOutcome, directory: Path) -> None:
    statistic = outcome.targets.percentile
    table = Table(title=f"trt analyze {outcome.model}: {outcome.targets.text}")
    for column in ("config", "concurrency", "output tokens/s", f"TTFT {statistic} ms", f"ITL {statistic} ms"):
        table.add_column(column, justify="left" if column == "config" else "right")
    table.add_column("meets", justify="center")
    ranked = sorted(outcome.readings, key=lambda r: -(r.best.output_token_throughput if r.best else -1.0))
    for reading in ranked:
        shown = reading.best or (reading.levels[-1] if reading.levels else None)
        if shown is None:
            table.add_row(reading.candidate.label, "-", "-", "-", "-", "failed", style="red")
            continue
        style = "bold green" if outcome.chosen is reading else None
        table.add_row(
            reading.candidate.label,
            str(int(shown.level)),
            f"{shown.output_token_throughput:,.1f}",
            _ms(shown, "time_to_first_token", statistic),
            _ms(shown, "inter_token_latency", statistic),
            "yes" if reading.best else "no",
            style=style,
        )
    console.print(table)
    for note in outcome.notes:
        console.print(f"[yellow]note:[/] {note}")
    for reading in outcome.readings:
        if reading.failure:
            console.print(f"[red]failed:[/] {reading.candidate.label}: {reading.failure}")
    if outcome.met and outcome.chosen and outcome.chosen.best:
        best = outcome.chosen.best
        console.print(
            f"[bold green]recommended:[/] {outcome.chosen.candidate.label}: "
            f"{best.output_token_throughput:,.1f} output tokens/s at concurrency {int(best.level)}"
        )
        console.print(f"config: {directory / 'config.pbtxt'}  report: {directory / 'report.md'}")
    else:
        console.print(f"[bold red]no config meets {outcome.targets.text}[/]")
        found = closest(outcome)
        if found:
            reading, level = found
            misses = "; ".join(outcome.targets.violations(level))
            console.print(f"closest: {reading.candidate.label} at concurrency {int(level.level)}: {misses}")
        console.print(f"report: {directory / 'report.md'}")


def run_generative_analysis(arguments: GenerativeArguments, out: Console, err: Console) -> None:
    def measured(candidate: GenerativeCandidate, level: LevelMetrics) -> None:
        if not arguments.quiet and not arguments.json_output:
            err.print(
                f"{candidate.label:<40} c={int(level.level):<3} "
                f"{level.output_token_throughput:>9,.1f} tokens/s "
                f"TTFT {arguments.statistic} {_ms(level, 'time_to_first_token', arguments.statistic)} ms "
                f"ITL {_ms(level, 'inter_token_latency', arguments.statistic)} ms",
                highlight=False,
            )

    try:
        request = request_from(arguments)
        with err.status("measuring candidates"):
            outcome = analyze_generative(request, measured)
    except AnalyzeError as error:
        err.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(error.exit_code) from None
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None
    write_reports(outcome, request.directory)
    print_outcome(err if arguments.json_output else out, outcome, request.directory)
    if arguments.json_output:
        print(json.dumps(summary(outcome), indent=2))
    if not outcome.met:
        raise typer.Exit(EXIT_NOT_MET)

"""``trt analyze``: sweep a model's serving configs, measure each with the trt perf engine, and write the
recommended ``config.pbtxt`` with a report that shows why.

    trt analyze mlp_onnx --target-p99 20ms --max-duration 5m
    trt analyze mlp_onnx --target-p99 5ms --mode brute --instances 1,2 --precision fp32,int8

Exit status: 0 a config meets the goals (it is in ``reports/<model>/config.pbtxt``), 1 none does (the
closest is named), 2 a bad option or a model/server that cannot be analyzed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from trt.analyzer.analysis import AnalyzeRequest, Observer, analyze
from trt.analyzer.errors import AnalyzeError
from trt.analyzer.goals import Goals, Measurement, Objective, parse_duration_s, parse_size_bytes
from trt.analyzer.report import Outcome, summary
from trt.analyzer.search import Mode
from trt.analyzer.session import MeasureSettings
from trt.analyzer.space import PRECISIONS, Candidate, SearchSpace, SpaceLimits
from trt.cli.analyze_generative import GenerativeArguments, run_generative_analysis
from trt.cli.console import make_console
from trt.cli.termination import interrupt_on_sigterm
from trt.perf.errors import OptionError
from trt.perf.options import Protocol
from trt.perf.ranges import concurrency_levels

EXIT_NOT_MET = 1


def _ints(text: str | None, option: str, minimum: int = 0) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise AnalyzeError(f"{option} '{text}': expected whole numbers separated by commas") from None
    if any(v < minimum for v in values):
        raise AnalyzeError(f"{option} '{text}': values must be at least {minimum}")
    return values


def _choices(text: str | None, option: str, allowed: dict[str, object]) -> tuple[object, ...] | None:
    if not text:
        return None
    values = []
    for value in text.lower().split(","):
        if value not in allowed:
            raise AnalyzeError(f"{option} '{value}': choose from {', '.join(allowed)}")
        values.append(allowed[value])
    return tuple(values)


def _goals(
    target_p99: str | None,
    target_p95: str | None,
    target_p90: str | None,
    target_avg: str | None,
    min_throughput: float | None,
    max_memory: str | None,
    max_gpu_memory: str | None,
    objective: Objective,
) -> Goals:
    targets = [
        (metric, text)
        for metric, text in (
            ("p99", target_p99),
            ("p95", target_p95),
            ("p90", target_p90),
            ("avg", target_avg),
        )
        if text
    ]
    if len(targets) > 1:
        raise AnalyzeError(
            "give one latency target (--target-p99, --target-p95, --target-p90 or --target-avg)"
        )
    metric, limit = (
        (targets[0][0], parse_duration_s(targets[0][1], f"--target-{targets[0][0]}"))
        if targets
        else ("p99", None)
    )
    return Goals(
        latency_metric=metric,
        latency_limit_us=None if limit is None else limit * 1e6,
        min_throughput=min_throughput,
        max_memory_bytes=parse_size_bytes(max_memory, "--max-memory") if max_memory else None,
        max_gpu_memory_bytes=parse_size_bytes(max_gpu_memory, "--max-gpu-memory") if max_gpu_memory else None,
        objective=objective,
    )


class ConsoleObserver(Observer):
    """A progress bar with an ETA (brute knows its total; quick estimates as it goes) and a line per new
    measurement. Refreshed by hand: the perf engine forks workers, which must not inherit a live thread."""

    def __init__(self, console: Console, quiet: bool) -> None:
        self.console, self.quiet = console, quiet
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            auto_refresh=False,
            transient=True,
        )
        self.task = self.progress.add_task("preparing", total=None)
        self.done = 0
        self.total: int | None = None

    def planned(self, total: int | None, space: SearchSpace) -> None:
        self.total = total
        self.progress.start()
        self.progress.update(self.task, description="measuring", total=total)
        self.progress.refresh()
        for note in space.notes:
            self.console.print(f"[yellow]note:[/] {note}")

    def measured(self, candidate: Candidate, measurement: Measurement, cached: bool) -> None:
        self.done += 1
        if self.total is None:  # quick: an estimate, revised as the search goes
            self.progress.update(self.task, total=max(self.done + 4, int(self.done * 1.3)))
        self.progress.update(self.task, completed=self.done, description=candidate.label[:48])
        if not self.quiet:
            origin = " (checkpoint)" if cached else ""
            self.progress.console.print(
                f"{candidate.label:<52} c={measurement.concurrency:<3} {measurement.throughput:>9,.0f}/s "
                f"p99 {measurement.latency_us['p99'] / 1000:7.2f} ms{origin}",
                highlight=False,
            )
        self.progress.refresh()

    def note(self, message: str) -> None:
        self.console.print(f"[dim]{message}[/]")

    def close(self) -> None:
        self.progress.stop()


def _print_summary(console: Console, outcome: Outcome, directory: Path) -> None:
    goals = outcome.goals
    table = Table(title=f"trt analyze {outcome.model}: {goals.target_text}, objective {goals.objective}")
    for column, justify in (
        ("config", "left"), ("concurrency", "right"), ("infer/s", "right"),
        (f"{goals.latency_metric} ms", "right"), ("memory MiB", "right"), ("meets", "center"),
    ):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    chosen_key = outcome.chosen.candidate.key if outcome.chosen else None
    ranked = sorted(
        outcome.result.readings.values(), key=lambda r: -(goals.score(r.best) if r.best else -math.inf)
    )
    for reading in ranked[:15]:
        shown = reading.best or min(reading.measurements, key=goals.shortfall, default=None)
        if shown is None:
            table.add_row(reading.candidate.label, "-", "-", "-", "-", "failed", style="red")
            continue
        memory = "-" if shown.memory_bytes is None else f"{shown.memory_bytes / 2**20:,.0f}"
        style = "bold green" if reading.candidate.key == chosen_key else None
        table.add_row(
            reading.candidate.label, str(shown.concurrency), f"{shown.throughput:,.0f}",
            f"{goals.latency(shown) / 1000:.2f}", memory, "yes" if reading.best else "no", style=style,
        )  # fmt: skip
    console.print(table)
    for reading in ranked:
        if reading.failure:
            console.print(f"[red]failed:[/] {reading.candidate.label}: {reading.failure}")
    console.print(
        f"{outcome.measurements_used} measurements ({outcome.measured_now} new) of "
        f"{len(outcome.result.readings)} configs, {outcome.duration_s:.0f} s, search {outcome.mode}"
        + ("" if outcome.result.complete else " [yellow](stopped by --max-duration)[/]")
    )
    if outcome.met and outcome.chosen and outcome.chosen.best:
        best = outcome.chosen.best
        console.print(
            f"[bold green]recommended:[/] {outcome.chosen.candidate.label}: {best.throughput:,.0f} infer/s "
            f"at concurrency {best.concurrency}, {goals.latency_metric} {goals.latency(best) / 1000:.2f} ms"
        )
        console.print(f"config: {directory / 'config.pbtxt'}  report: {directory / 'report.md'}")
    else:
        console.print(f"[bold red]no config meets {goals.target_text}[/]")
        if outcome.closest:
            reading, measurement = outcome.closest
            console.print(
                f"closest: {reading.candidate.label} at concurrency {measurement.concurrency}: "
                + "; ".join(goals.violations(measurement))
            )
        console.print(f"report: {directory / 'report.md'}")


def analyze_command(
    model: str = typer.Argument(..., help="Model name in the repository."),
    model_repository: Path = typer.Option(Path("model_repository"), "--model-repository", "-r"),
    target_p99: str | None = typer.Option(None, "--target-p99", metavar="DURATION", help="e.g. 20ms."),
    target_p95: str | None = typer.Option(None, "--target-p95", metavar="DURATION"),
    target_p90: str | None = typer.Option(None, "--target-p90", metavar="DURATION"),
    target_avg: str | None = typer.Option(None, "--target-avg", metavar="DURATION"),
    min_throughput: float | None = typer.Option(None, "--min-throughput", help="infer/s."),
    max_memory: str | None = typer.Option(None, "--max-memory", metavar="SIZE", help="Server RSS, e.g. 2GB."),
    max_gpu_memory: str | None = typer.Option(
        None, "--max-gpu-memory", metavar="SIZE", help="GPU memory of the server (NVML), e.g. 8GB."
    ),
    objective: Objective = typer.Option(Objective.THROUGHPUT, "--objective"),
    max_rel_error: float = typer.Option(1e-2, "--max-rel-error", help="Accuracy guard for fp16/int8."),
    mode: Mode = typer.Option(Mode.QUICK, "--mode"),
    max_duration: str | None = typer.Option(None, "--max-duration", metavar="DURATION", help="e.g. 10m."),
    output_dir: Path | None = typer.Option(None, "--output-dir", help="Default reports/<model>."),
    url: str | None = typer.Option(None, "--url", help="Tune on a running server (HTTP host:port)."),
    apply: bool = typer.Option(False, "--apply", help="Write the recommendation into the repository."),
    fresh: bool = typer.Option(False, "--fresh", help="Ignore the checkpoint of an earlier run."),
    json_output: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
    concurrency: str = typer.Option("1:64", "--concurrency", metavar="START:END", help="Doubling ladder."),
    max_batch_size: str | None = typer.Option(None, "--max-batch-size", metavar="N,N"),
    batching: str | None = typer.Option(None, "--dynamic-batching", metavar="on,off"),
    queue_delay: str | None = typer.Option(None, "--queue-delay", metavar="US,US"),
    preferred_batch_size: list[str] = typer.Option(
        None, "--preferred-batch-size", metavar="N[,N]|none", help="A set to try; repeatable."
    ),
    instances: str | None = typer.Option(None, "--instances", metavar="N,N"),
    kind: str | None = typer.Option(None, "--kind", metavar="cpu,gpu"),
    precision: str | None = typer.Option(None, "--precision", metavar="fp32,fp16,int8"),
    threads: str | None = typer.Option(None, "--threads", metavar="N,N", help="Intra-op threads."),
    streams: str | None = typer.Option(
        None, "--streams", metavar="N,N", help="OpenVINO NUM_STREAMS; 0 = one per instance."
    ),
    hint: str | None = typer.Option(
        None, "--hint", metavar="none,latency,throughput", help="OpenVINO PERFORMANCE_HINT."
    ),
    protocol: Protocol = typer.Option(Protocol.HTTP, "-i", "--protocol", case_sensitive=False),
    measurement_interval: int = typer.Option(1000, "-p", "--measurement-interval", help="Window, ms."),
    stability_percentage: float = typer.Option(10.0, "-s", "--stability-percentage"),
    max_trials: int = typer.Option(6, "--max-trials"),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No line per measurement."),
    target_ttft: str | None = typer.Option(
        None, "--target-ttft", metavar="DURATION", help="Generative: time to first token, e.g. 500ms."
    ),
    target_itl: str | None = typer.Option(
        None, "--target-itl", metavar="DURATION", help="Generative: inter-token latency, e.g. 50ms."
    ),
    target_statistic: str = typer.Option(
        "p99", "--target-statistic", help="Generative: what the targets bound: avg, p50, p90, p95, p99."
    ),
    tokenizer: Path | None = typer.Option(
        None,
        "--tokenizer",
        help="Generative: the model's tokenizer.json (default: the one in its folder).",
    ),
    parameter: list[str] = typer.Option(
        None, "--parameter", metavar="NAME=V,V", help="Generative: a config parameter to sweep; repeatable."
    ),
    input_tokens: int = typer.Option(128, "--synthetic-input-tokens-mean"),
    output_tokens: int = typer.Option(32, "--output-tokens-mean"),
    request_count: int = typer.Option(0, "--request-count", help="Generative: requests a level."),
) -> None:
    """Find the config.pbtxt that serves MODEL best on this machine within the latency target; for a
    generative model (--target-ttft / --target-itl), the most output tokens/s within them."""
    err, out = make_console(stderr=True), make_console(stderr=json_output)
    interrupt_on_sigterm()  # so that the scratch server it starts is stopped
    if target_ttft or target_itl:
        run_generative_analysis(
            GenerativeArguments(
                model=model,
                repository=model_repository,
                target_ttft=target_ttft,
                target_itl=target_itl,
                statistic=target_statistic,
                tokenizer=tokenizer,
                instances=instances,
                parameters=tuple(parameter or ()),
                concurrency=concurrency,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                request_count=request_count,
                output_dir=output_dir,
                json_output=json_output,
                quiet=quiet,
            ),
            out,
            err,
        )
        return
    observer = ConsoleObserver(err, quiet or json_output)
    try:
        goals = _goals(
            target_p99,
            target_p95,
            target_p90,
            target_avg,
            min_throughput,
            max_memory,
            max_gpu_memory,
            objective,
        )
        preferred = None
        if preferred_batch_size:
            preferred = tuple(
                () if value.lower() == "none" else _ints(value, "--preferred-batch-size", 1) or ()
                for value in preferred_batch_size
            )
        limits = SpaceLimits(
            max_batch_sizes=_ints(max_batch_size, "--max-batch-size", 1),
            queue_delays_us=_ints(queue_delay, "--queue-delay"),
            preferred_batch_sizes=preferred,
            instances=_ints(instances, "--instances", 1),
            kinds=_choices(kind, "--kind", {"cpu": "KIND_CPU", "gpu": "KIND_GPU"}),  # type: ignore[arg-type]
            precisions=_choices(precision, "--precision", {p: p for p in PRECISIONS}),  # type: ignore[arg-type]
            threads=_ints(threads, "--threads", 1),
            streams=_ints(streams, "--streams"),
            hints=_choices(hint, "--hint", {"none": "", "latency": "LATENCY", "throughput": "THROUGHPUT"}),  # type: ignore[arg-type]
            dynamic_batching=_choices(batching, "--dynamic-batching", {"on": True, "off": False}),  # type: ignore[arg-type]
        )
        try:
            levels = tuple(concurrency_levels(concurrency, True))
        except OptionError as exc:
            raise AnalyzeError(str(exc)) from None
        request = AnalyzeRequest(
            model=model,
            repository=model_repository,
            goals=goals,
            mode=mode,
            limits=limits,
            concurrency=levels,
            settings=MeasureSettings(
                protocol=protocol,
                measurement_interval_ms=measurement_interval,
                stability_percentage=stability_percentage,
                max_trials=max_trials,
                warmup_ms=min(500, measurement_interval),
            ),
            max_duration_s=parse_duration_s(max_duration, "--max-duration", "s") if max_duration else None,
            max_rel_error=max_rel_error,
            output_dir=output_dir,
            url=url,
            fresh=fresh,
            apply=apply,
        )
        try:
            outcome = analyze(request, observer)
        finally:
            observer.close()
    except AnalyzeError as error:
        err.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(error.exit_code) from None
    except KeyboardInterrupt:
        err.print("interrupted: the checkpoint keeps what was measured; run again to continue")
        raise typer.Exit(130) from None
    _print_summary(out if not json_output else err, outcome, request.directory)
    if json_output:
        print(json.dumps(summary(outcome), indent=2))
    if not outcome.met:
        raise typer.Exit(EXIT_NOT_MET)

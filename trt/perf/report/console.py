"""The console: a live view while measuring (a line per finished level, a bar for the sweep), the final
table, perf_analyzer's closing summary lines, and gate verdicts."""

from __future__ import annotations

import math

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from trt.perf.measurement import LevelResult
from trt.perf.options import LoadKind
from trt.perf.report.gates import GateResult
from trt.perf.results import ProfileReport


def _ms(us: float) -> str:
    return "-" if not math.isfinite(us) else f"{us / 1000:.2f}"


def level_bar(console: Console) -> Progress:
    """The started progress bar a sweep shows its levels on (transient: gone once the table prints)."""
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    bar.start()
    return bar


class ConsoleProgress:
    """``perf.profiler.Progress`` on a rich console (stderr by default, so stdout can carry --json)."""

    def __init__(
        self, console: Console, mode: LoadKind, percentile: int | None, verbose: bool = False
    ) -> None:
        self.console, self.mode, self.percentile, self.verbose = console, mode, percentile, verbose
        self._bar: Progress | None = None
        self._task = TaskID(0)

    def _label(self, level: float) -> str:
        if self.mode is LoadKind.CONCURRENCY:
            return f"concurrency {int(level)}"
        if self.mode is LoadKind.REQUEST_RATE:
            return f"request rate {level:g}/s"
        return "custom intervals"

    def level_started(self, index: int, total: int, level: float) -> None:
        if self._bar is None:
            # Started only now: the worker processes are forked before any display thread exists.
            self._bar = level_bar(self.console)
            self._task = self._bar.add_task("starting", total=total)
        self._bar.update(self._task, description=f"{self._label(level)}: warming up")
        if self.verbose:
            self.console.print(f"Request {self._label(level)}")

    def window_done(self, level: float, trial: int, throughput: float, latency_us: float) -> None:
        kind = f"p{self.percentile}" if self.percentile else "avg"
        if self._bar is not None:
            self._bar.update(
                self._task,
                description=f"{self._label(level)}: window {trial}, {throughput:,.0f} infer/s, "
                f"{kind} {_ms(latency_us)} ms",
            )
        if self.verbose:
            self.console.print(
                f"  Pass [{trial}] throughput: {throughput:g} infer/sec. {kind} latency: "
                f"{int(latency_us) if math.isfinite(latency_us) else 'n/a'} usec"
            )

    def level_done(self, result: LevelResult) -> None:
        p99 = result.latency.percentiles[99]
        note = "" if result.stable else " [yellow](unstable)[/]"
        self.console.print(
            f"{self._label(result.level)}: {result.throughput:,.1f} infer/s, "
            f"avg {_ms(result.latency.avg_us)} ms, p99 {_ms(p99)} ms, {result.error_count} errors, "
            f"{result.trials} windows{note}"
        )
        if self._bar is not None:
            self._bar.advance(self._task)

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}", highlight=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def results_table(report: ProfileReport) -> Table:
    table = Table(
        title=f"trt perf: {report.model} over {report.protocol} ({report.url}), batch {report.batch_size}"
    )
    level = "concurrency" if report.mode is LoadKind.CONCURRENCY else "rate/s"
    table.add_column(level, justify="right")
    table.add_column("infer/s", justify="right")
    for name in ("avg", "p50", "p90", "p95", "p99"):
        table.add_column(f"{name} ms", justify="right")
    if report.percentile and report.percentile not in (50, 90, 95, 99):
        table.add_column(f"p{report.percentile} ms", justify="right")
    table.add_column("errors", justify="right")
    table.add_column("server queue ms", justify="right")
    table.add_column("server infer ms", justify="right")
    table.add_column("batches", justify="right")
    table.add_column("client CPU", justify="right")
    table.add_column("stable")
    for r in report.results:
        server = r.server
        cells = [
            f"{int(r.level)}" if report.mode is LoadKind.CONCURRENCY else f"{r.level:g}",
            f"{r.throughput:,.1f}",
            _ms(r.latency.avg_us),
            *(_ms(r.latency.percentiles[p]) for p in (50, 90, 95, 99)),
        ]
        if report.percentile and report.percentile not in (50, 90, 95, 99):
            cells.append(_ms(r.latency.percentiles[report.percentile]))
        batches = ", ".join(f"{k}x{v}" for k, v in sorted(server.batch_sizes.items())[:4]) if server else "-"
        cells += [
            str(r.error_count),
            _ms(server.queue_us) if server else "-",
            _ms(server.compute_infer_us) if server else "-",
            batches or "-",
            f"{r.client.cpu_cores:.0%}" + (" [red]sat[/]" if r.client.saturated else ""),
            "yes" if r.stable else "[yellow]no[/]",
        ]
        table.add_row(*cells)
    return table


def print_summary(console: Console, report: ProfileReport) -> None:
    """The table, then perf_analyzer's closing lines (scripts that grep them keep working)."""
    console.print(results_table(report))
    kind = f"p{report.percentile}" if report.percentile else "Average"
    console.print(f"Inferences/Second vs. Client {kind} Batch Latency", highlight=False)
    for r in report.results:
        label = (
            f"Concurrency: {int(r.level)}"
            if report.mode is LoadKind.CONCURRENCY
            else f"Request Rate: {r.level:g}"
        )
        latency = int(r.stabilizing_latency_us) if math.isfinite(r.stabilizing_latency_us) else 0
        console.print(
            f"{label}, throughput: {r.throughput:g} infer/sec, latency {latency} usec", highlight=False
        )


def print_gates(console: Console, outcomes: list[GateResult]) -> None:
    for outcome in outcomes:
        style = "green" if outcome.passed else "bold red"
        console.print(
            f"[{style}]{'PASS' if outcome.passed else 'FAIL'}[/] {outcome.message}", highlight=False
        )

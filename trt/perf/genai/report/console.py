"""The console of a generative run: a line per level while measuring, then genai-perf's table for each
level (metric rows; avg, min, max, p99, p90, p75) and a sweep table, with goodput where goals were set."""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

from trt.perf.genai.metrics import RECORD_METRICS, TIME_METRICS, LevelMetrics
from trt.perf.genai.profiler import GenAIReport
from trt.perf.report.console import level_bar

SHOWN = ("avg", "min", "max", "p99", "p90", "p75")


def _label(report_level: str, level: float) -> str:
    return f"concurrency {int(level)}" if report_level == "concurrency" else f"request rate {level:g}/s"


def _ms(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value / 1e6:,.2f}"


class GenAIConsoleProgress:
    def __init__(self, console: Console, level_name: str) -> None:
        self.console, self.level_name = console, level_name
        self._bar: Progress | None = None
        self._task = TaskID(0)

    def level_started(self, index: int, total: int, level: float, requests: int) -> None:
        if self._bar is None:
            self._bar = level_bar(self.console)
            self._task = self._bar.add_task("levels", total=total)
        self._bar.update(self._task, description=f"{_label(self.level_name, level)}: {requests} requests")

    def level_done(self, metrics: LevelMetrics) -> None:
        ttft = metrics.stats.get("time_to_first_token")
        itl = metrics.stats.get("inter_token_latency")
        latency = metrics.stats.get("request_latency")
        goodput = "" if metrics.request_goodput is None else f", goodput {metrics.request_goodput:.2f}/s"
        if ttft is None and latency is not None:  # embeddings: no tokens generated
            figures = f"latency p99 {_ms(latency.get('p99'))} ms"
        else:
            figures = (
                f"{metrics.output_token_throughput:,.1f} tokens/s, "
                f"TTFT p99 {_ms(ttft.get('p99') if ttft else None)} ms, "
                f"ITL p99 {_ms(itl.get('p99') if itl else None)} ms"
            )
        self.console.print(
            f"{_label(self.level_name, metrics.level)}: {metrics.request_throughput:.2f} requests/s, "
            f"{figures}{goodput}, {metrics.error_count} errors",
            highlight=False,
        )
        if self._bar is not None:
            self._bar.advance(self._task)

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}", highlight=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def level_table(report: GenAIReport, level: LevelMetrics) -> Table:
    table = Table(
        title=f"trt perf | {'LLM' if report.options.endpoint_type.generates else 'Embeddings'} metrics: "
        f"{report.options.model}, {report.options.endpoint_type.value}, "
        f"{_label(report.level_name, level.level)}"
    )
    table.add_column("Statistic")
    for stat in SHOWN:
        table.add_column(stat, justify="right")
    for metric in RECORD_METRICS:
        stats = level.stats.get(metric)
        if stats is None:
            continue
        time = metric in TIME_METRICS
        name = metric.replace("_", " ").capitalize() + (" (ms)" if time else "")
        table.add_row(name, *((_ms(stats.get(s)) if time else f"{stats.get(s):,.2f}") for s in SHOWN))
    return table


def sweep_table(report: GenAIReport) -> Table:
    table = Table(
        title=f"trt perf: {report.options.model} over {report.options.endpoint_type.value} ({report.url})"
    )
    text = report.options.endpoint_type.generates

    def pick(level: LevelMetrics, metric: str, stat: str) -> float | None:
        found = level.stats.get(metric)
        return None if found is None else found.get(stat)

    columns: list[tuple[str, Callable[[LevelMetrics], str]]] = [
        ("output tokens/s", lambda lv: f"{lv.output_token_throughput:,.1f}"),
        ("requests/s", lambda lv: f"{lv.request_throughput:.2f}"),
        ("goodput/s", lambda lv: "-" if lv.request_goodput is None else f"{lv.request_goodput:.2f}"),
        ("TTFT p50 ms", lambda lv: _ms(pick(lv, "time_to_first_token", "p50"))),
        ("TTFT p99 ms", lambda lv: _ms(pick(lv, "time_to_first_token", "p99"))),
        ("ITL p50 ms", lambda lv: _ms(pick(lv, "inter_token_latency", "p50"))),
        ("ITL p99 ms", lambda lv: _ms(pick(lv, "inter_token_latency", "p99"))),
        ("latency p50 ms", lambda lv: _ms(pick(lv, "request_latency", "p50"))),
        ("latency p99 ms", lambda lv: _ms(pick(lv, "request_latency", "p99"))),
        ("ISL avg", lambda lv: f"{pick(lv, 'input_sequence_length', 'avg') or 0:,.1f}"),
        ("OSL avg", lambda lv: f"{pick(lv, 'output_sequence_length', 'avg') or 0:,.1f}"),
        ("errors", lambda lv: str(lv.error_count)),
    ]
    # Embeddings generate no tokens: their columns would only ever read 0 and "-".
    tokens_only = ("output tokens/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "OSL avg")
    columns = [(name, cell) for name, cell in columns if text or name not in tokens_only]
    table.add_column(report.level_name.replace("_", " "), justify="right")
    for name, _ in columns:
        table.add_column(name, justify="right")
    for lv in report.levels:
        level = f"{int(lv.level)}" if report.level_name == "concurrency" else f"{lv.level:g}"
        table.add_row(level, *(cell(lv) for _, cell in columns))
    return table


def print_report(console: Console, report: GenAIReport) -> None:
    for level in report.levels:
        console.print(level_table(report, level))
        if report.options.endpoint_type.generates:
            console.print(
                f"Output token throughput (tokens/sec): {level.output_token_throughput:,.2f}", highlight=False
            )
        console.print(f"Request throughput (per sec): {level.request_throughput:,.2f}", highlight=False)
        if level.request_goodput is not None:
            goals = ", ".join(g.text for g in report.options.goals)
            console.print(
                f"Request goodput (per sec): {level.request_goodput:,.2f} "
                f"({level.good_request_count} of {level.request_count} requests met {goals})",
                highlight=False,
            )
        console.print(f"Request count: {level.request_count} ({level.error_count} failed)", highlight=False)
    if len(report.levels) > 1:
        console.print(sweep_table(report))

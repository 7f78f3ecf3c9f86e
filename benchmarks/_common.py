"""Helpers shared by the benchmark scripts: ports, server CPU time, request counts, perf_analyzer."""

from __future__ import annotations

import csv
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_tree_cpu(pid: int) -> float:
    """CPU seconds of a server and every process under it (Python model processes, stubs)."""
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def answered_requests(http_port: int, model: str) -> int:
    """Successful requests so far, from the statistics extension (works on trt and Triton)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{model}/stats") as reply:
        stats = json.loads(reply.read())["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


def perf_analyzer_run(
    binary: str, model: str, url: str, protocol: str, concurrency: int, interval_ms: int,
    cpus: set[int] | None = None,
) -> dict[str, float]:  # fmt: skip
    """One perf_analyzer measurement at one concurrency; its CSV row as numbers, and ``stable``.

    A run whose windows do not agree within 25% (others load this shared machine) is tried again,
    up to three times. Then, rather than lose the rounds measured so far, it is taken as three
    windows give it, with ``stable`` 0.0: the tables mark such rows. ``cpus``: run it on these
    cores only."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.csv"
        stable = 1.0
        for attempt in range(4):
            if attempt == 3:
                stable = 0.0
            result = subprocess.run(
                [binary, "-m", model, "-u", url, "-i", protocol, "-p", str(interval_ms),
                 "-s", "25" if stable else "10000", "-r", "10",  # 10000%: any three windows
                 "--concurrency-range", f"{concurrency}:{concurrency}", "-f", str(out)],
                capture_output=True, text=True, timeout=300,
                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
            )  # fmt: skip
            if result.returncode == 0 or not _unstable(result):
                break
        if result.returncode != 0:
            raise RuntimeError(f"perf_analyzer failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        row = next(csv.DictReader(out.open()))
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_us": float(row["p50 latency"]),
        "p99_us": float(row["p99 latency"]),
        "stable": stable,
    }


def _unstable(result: subprocess.CompletedProcess[str]) -> bool:
    return "Failed to obtain stable measurement" in result.stdout + result.stderr


UNSTABLE_MARK = "*"
UNSTABLE_CAPTION = (
    f"{UNSTABLE_MARK} perf_analyzer's windows did not agree within 25% in three tries: "
    "taken as three windows gave it"
)


def measured_with_perf_analyzer(
    binary: str,
    model: str,
    protocol: str,
    port: int,
    http_port: int,
    pid: int,
    concurrency: int,
    interval_ms: int,
) -> dict[str, float]:
    """perf_analyzer's figures plus the server's CPU time per answered request over the same run."""
    cpu_before, count_before = process_tree_cpu(pid), answered_requests(http_port, model)
    figures = perf_analyzer_run(binary, model, f"127.0.0.1:{port}", protocol, concurrency, interval_ms)
    cpu_used = process_tree_cpu(pid) - cpu_before
    count = answered_requests(http_port, model) - count_before
    return {**figures, "server_cpu_us_per_request": cpu_used / max(count, 1) * 1e6}


def wait_model_ready(port: int, process: subprocess.Popen[bytes], model: str, timeout: float = 120) -> None:
    """Wait until the server on ``port`` says ``model`` is ready; exit if it dies or takes too long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"a server exited with {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/ready", timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"a server did not have {model} ready within {timeout:g} s")


def rotated(count: int, round_index: int) -> list[int]:
    """The order ``count`` servers are measured in, in round ``round_index``: each goes first in turn,
    so that what going first costs falls on all of them."""
    return [(index + round_index) % count for index in range(count)]


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each server, then SIGKILL any that has not exited within 20 s."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def summary_against_first(
    results: Sequence[Any], labels: Sequence[str], rounds: int, measure: str, medians: Sequence[str]
) -> list[dict[str, Any]]:
    """Per label (the first is the base): each round's ``measure`` divided by the base's in that round,
    the median of those ratios, and the median of each of ``medians`` over the rounds. ``results``
    hold ``label``, ``round`` and the named attributes."""

    def of(label: str, number: int) -> Any:
        return next(r for r in results if r.label == label and r.round == number)

    summary = []
    for label in labels:
        ratios = [getattr(of(label, n), measure) / getattr(of(labels[0], n), measure) for n in range(rounds)]
        mine = [r for r in results if r.label == label]
        row: dict[str, Any] = {"label": label, "ratios": ratios, "median_ratio": statistics.median(ratios)}
        row.update({f"median_{name}": statistics.median(getattr(r, name) for r in mine) for name in medians})
        summary.append(row)
    return summary


def ratio_cells(row: dict[str, Any], *medians: str) -> list[str]:
    """A ``summary_against_first`` row as table cells: the label, each round's ratio, their median,
    then the medians named (as whole numbers)."""
    cells = [row["label"], " / ".join(f"{r:.2f}" for r in row["ratios"]), f"{row['median_ratio']:.2f}"]
    return cells + [f"{row[f'median_{name}']:,.0f}" for name in medians]


def report_against_first(
    console: Console,
    title: str,
    columns: Sequence[str],
    summary: list[dict[str, Any]],
    medians: Sequence[str],
    json_path: Path,
    document: dict[str, Any],
) -> None:
    """Print ``summary`` (``summary_against_first``'s, with ``medians`` after its ratios) as a table
    of ``columns``, and write ``document`` with the summary added to ``json_path``."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right")
    for row in summary:
        table.add_row(*ratio_cells(row, *medians))
    console.print(table)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({**document, "summary": summary}, indent=2))

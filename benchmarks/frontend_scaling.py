"""`trt serve --frontend-workers N`: what N front-end worker processes serve, and what they cost.

For each N (0: today's single process), one `trt serve --frontend-workers N` serves the ONNX `simple`
model (INT32 add/sub, [1,16]); all of them run side by side and NVIDIA's perf_analyzer (`-p 3000 -s
25`, binary tensors) measures each in turn, in rounds, over HTTP and gRPC at one concurrency (32), so
every configuration sees the same load from the rest of this shared machine. Per configuration:
throughput, the server's CPU per answered request (the core process with its model threads, and the
workers), the client's CPU per request, and the ratios N / 0 and 2 / 1 (issue 19's done-when asks 2
workers >= 1.4x 1 worker on 2 cores). Medians over the rounds. `--pin` runs the client on cores apart
from the servers' when the machine has at least 4 (otherwise it says so and does not pin).

Then the cost model, from this run's own figures: with W the workers' and C the core process's CPU per
request at N = 1, and S the single process's, N workers on a host of M cores (the client elsewhere)
serve at most min(N / W, 1 / C, M / (W + C)) requests/s, against 1 / S for the single process, whose
one event loop does nearly all of its work. Printed for ``--model-cores`` hosts.

    flock /tmp/trt-bench.lock python benchmarks/frontend_scaling.py \\
        --perf-analyzer /tmp/trt-peers/perf/perf_analyzer [--workers 0,1,2] [--rounds 2] [--pin]

Writes reports/benchmarks/frontend_scaling.json and .csv.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import cast

import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import answered_requests, free_port, perf_analyzer_run, wait_model_ready  # noqa: E402


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cpu(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
        return float(times.user + times.system)
    except psutil.NoSuchProcess:
        return 0.0


def _tree_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of the core process (with its model threads) and of its worker processes."""
    root = psutil.Process(pid)
    return _cpu(root), sum(_cpu(child) for child in root.children(recursive=True))


def _start(workers: int, cpus: set[int] | None) -> tuple[subprocess.Popen[bytes], int, int]:
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [
        sys.executable, "-m", "trt", "serve", f"--model-repository={ROOT / 'model_repository'}",
        "--model-control-mode=explicit", "--load-model=simple", "--log-info=false",
        "--http-address=127.0.0.1", f"--http-port={http}", "--grpc-address=127.0.0.1", f"--grpc-port={grpc}",
        f"--metrics-port={metrics}", f"--frontend-workers={workers}",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )  # fmt: skip
    return process, http, grpc


def _split_cores(pin: bool, console: Console) -> tuple[set[int] | None, set[int] | None]:
    """(server cores, client cores); None, None when not pinned."""
    if not pin:
        return None, None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 4:
        console.print(
            f"[yellow]--pin: {len(cores)} cores cannot keep the client apart from the servers: not pinned"
        )
        return None, None
    client = max(1, len(cores) // 4)
    return set(cores[:-client]), set(cores[-client:])


def _measure(
    args: argparse.Namespace, pid: int, http: int, port: int, protocol: str, client_cpus: set[int] | None
) -> dict[str, float]:
    core_before, workers_before = _tree_cpu(pid)
    client_before, count_before = _children_cpu(), answered_requests(http, "simple")
    figures = perf_analyzer_run(
        args.perf_analyzer, "simple", f"127.0.0.1:{port}", protocol, args.concurrency, args.interval_ms,
        client_cpus,
    )  # fmt: skip
    count = max(answered_requests(http, "simple") - count_before, 1)
    core_after, workers_after = _tree_cpu(pid)
    return {
        **figures,
        "core_cpu_us": (core_after - core_before) / count * 1e6,
        "workers_cpu_us": (workers_after - workers_before) / count * 1e6,
        "server_cpu_us": (core_after - core_before + workers_after - workers_before) / count * 1e6,
        "client_cpu_us": (_children_cpu() - client_before) / count * 1e6,
    }


def _summary(
    rows: list[dict[str, object]], workers: list[int], protocols: list[str]
) -> list[dict[str, object]]:
    summary = []
    for protocol in protocols:
        medians: dict[int, dict[str, float]] = {}
        for n in workers:
            mine = [row for row in rows if row["protocol"] == protocol and row["workers"] == n]
            keys = ("throughput", "p99_us", "core_cpu_us", "workers_cpu_us", "server_cpu_us", "client_cpu_us")
            medians[n] = {key: statistics.median(float(row[key]) for row in mine) for key in keys}  # type: ignore[arg-type]
        for n in workers:
            entry: dict[str, object] = {"protocol": protocol, "workers": n, **medians[n]}
            if 0 in medians:
                entry["vs_0"] = medians[n]["throughput"] / medians[0]["throughput"]
            if n == 2 and 1 in medians:
                entry["2_vs_1"] = medians[2]["throughput"] / medians[1]["throughput"]
            summary.append(entry)
    return summary


def _seconds(entry: dict[str, object], key: str) -> float:
    return cast(float, entry[key]) / 1e6


def cost_model(summary: list[dict[str, object]], hosts: list[int]) -> list[dict[str, object]]:
    """Requests/s allowed on hosts of each size by the single process and by N workers, from the
    N = 0 and N = 1 medians of ``summary``."""
    rows: list[dict[str, object]] = []
    for protocol in dict.fromkeys(str(entry["protocol"]) for entry in summary):
        by_n = {cast(int, e["workers"]): e for e in summary if e["protocol"] == protocol}
        if 0 not in by_n or 1 not in by_n:
            continue
        single = _seconds(by_n[0], "server_cpu_us")
        worker, core = _seconds(by_n[1], "workers_cpu_us"), _seconds(by_n[1], "core_cpu_us")
        for cores in hosts:
            allowed = {
                n: min(n / worker, 1 / core, cores / (worker + core)) for n in (1, 2, 4, 8, 16) if n < cores
            }
            rows.append({"protocol": protocol, "cores": cores, "single": 1 / single, "workers": allowed})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--perf-analyzer", default="/tmp/trt-peers/perf/perf_analyzer")
    parser.add_argument("--workers", default="0,1,2", help="values of --frontend-workers to compare")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pin", action="store_true", help="the client on cores apart from the servers'")
    parser.add_argument("--model-cores", default="2,16,64", help="host sizes the cost model is printed for")
    parser.add_argument(
        "--json", type=Path, default=ROOT / "reports" / "benchmarks" / "frontend_scaling.json"
    )
    args = parser.parse_args()
    console = Console()
    if not os.path.exists(args.perf_analyzer):
        raise SystemExit(f"perf_analyzer not found at {args.perf_analyzer} (see ../shared/PEERS.md)")
    workers = [int(n) for n in args.workers.split(",")]
    protocols = args.protocols.split(",")
    server_cpus, client_cpus = _split_cores(args.pin, console)
    servers = {n: _start(n, server_cpus) for n in workers}
    rows: list[dict[str, object]] = []
    try:
        for process, http, _ in servers.values():
            wait_model_ready(http, process, "simple")
        total = args.rounds * len(protocols) * len(workers)
        with console.status("") as status:
            for round_index in range(args.rounds):
                for protocol in protocols:
                    for n in workers:
                        process, http, grpc = servers[n]
                        status.update(
                            f"round {round_index + 1}: {protocol}, {n} workers ({len(rows) + 1}/{total})"
                        )
                        port = http if protocol == "http" else grpc
                        result = _measure(args, process.pid, http, port, protocol, client_cpus)
                        rows.append({"round": round_index + 1, "protocol": protocol, "workers": n, **result})
    finally:
        for process, _, _ in servers.values():
            process.terminate()
        for process, _, _ in servers.values():
            process.wait(30)
    summary = _summary(rows, workers, protocols)
    table = Table(title=f"trt serve --frontend-workers N, simple (ONNX), perf_analyzer c={args.concurrency}, "
                        f"{os.cpu_count()} cores, medians of {args.rounds} interleaved rounds")  # fmt: skip
    for column in ("protocol", "N", "infer/s", "p99 ms", "server CPU us/req", "core", "workers",
                   "client CPU us/req", "N / 0", "2 / 1"):  # fmt: skip
        table.add_column(column, justify="left" if column == "protocol" else "right")
    for entry in summary:
        ratios = [f"{entry[key]:.2f}" if key in entry else "" for key in ("vs_0", "2_vs_1")]
        costs = ("server_cpu_us", "core_cpu_us", "workers_cpu_us", "client_cpu_us")
        table.add_row(
            str(entry["protocol"]), str(entry["workers"]), f"{entry['throughput']:,.0f}",
            f"{float(entry['p99_us']) / 1000:.1f}",
            *(f"{entry[key]:.0f}" for key in costs),
            *ratios,
        )  # fmt: skip
    console.print(table)
    model = cost_model(summary, [int(c) for c in args.model_cores.split(",")])
    if model:
        sizes = (1, 2, 4, 8, 16)
        predicted = Table(title="Cost model from this run's N = 0 and N = 1 figures: requests/s a host "
                                "of M cores allows (client elsewhere)")  # fmt: skip
        for column in ("protocol", "M cores", "single process", *(f"N={n}" for n in sizes)):
            predicted.add_column(column, justify="left" if column == "protocol" else "right")
        for row in model:
            allowed = cast(dict[int, float], row["workers"])
            predicted.add_row(
                str(row["protocol"]), str(row["cores"]), f"{cast(float, row['single']):,.0f}",
                *(f"{allowed[n]:,.0f}" if n in allowed else "" for n in sizes),
            )  # fmt: skip
        console.print(predicted)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "concurrency": args.concurrency, "interval_ms": args.interval_ms, "cores": os.cpu_count(),
        "pinned": server_cpus is not None, "rounds": rows, "summary": summary, "cost_model": model,
    }  # fmt: skip
    args.json.write_text(json.dumps(document, indent=2))
    with args.json.with_suffix(".csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    console.print(f"wrote {args.json} and {args.json.with_suffix('.csv')}")


if __name__ == "__main__":
    main()

"""`trt perf` against NVIDIA's perf_analyzer, measuring the same `trt serve` in one run.

Serves `model_repository/simple` (INT32 add/sub [1,16], about as cheap as a model gets) and, at each
concurrency, runs perf_analyzer and `trt perf` with the same flags (`-p`, `-s 25`, `-r 10`, binary
tensors), alternating which goes first on each repeat. Prints both tools' throughput and p99, their
ratios, and each client's own CPU time per request (its process tree's CPU over the requests the server
answered during the run, start-up included). The last row compares the highest rate each tool drove.

    WITH_PY_PEERS=0 bash ../shared/peers/setup.sh /tmp/trt-peers   # once: installs perf_analyzer
    python benchmarks/perf_vs_perf_analyzer.py [--protocol http] [--concurrency 1,8,32] [--repeats 2]
    python benchmarks/perf_vs_perf_analyzer.py --pin    # server on CPU 0, the measuring tool on CPU 1

On two shared cores a client's own CPU is taken from the server it measures, so a cheaper client
measures a faster server. ``--pin`` keeps them apart, which shows whether the tools agree on the server
rather than how much each one costs (other processes on the machine still float over both cores).

Acceptance (issue 5): throughput within 10% and p99 within 20% at concurrency 1, 8 and 32, and trt perf
at least perf_analyzer's peak rate. These 2-core machines are shared and noisy: medians of repeats.
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
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import answered_requests, free_port, process_tree_cpu  # noqa: E402

DEFAULT_PERF_ANALYZER = os.environ.get("TRT_PERF_ANALYZER", "/tmp/trt-peers/perf/perf_analyzer")


def start_server(http_port: int, grpc_port: int, cpus: set[int] | None) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "trt", "serve", f"--model-repository={ROOT / 'model_repository'}",
        "--model-control-mode=explicit", "--load-model=simple", "--http-address=127.0.0.1",
        f"--http-port={http_port}", "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}",
        "--allow-metrics=false", "--log-info=false",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/simple/ready", timeout=1):
                return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"server did not start: {process.stderr.read().decode() if process.stderr else ''}")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(
    tool: str,
    command: list[str],
    csv_path: Path,
    http_port: int,
    server_pid: int,
    cpus: set[int] | None = None,
) -> dict[str, float]:
    """Run one tool once; its CSV row plus client and server CPU per answered request."""
    cpu_before, server_before = children_cpu(), process_tree_cpu(server_pid)
    count_before = answered_requests(http_port, "simple")
    result = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
    )
    count = answered_requests(http_port, "simple") - count_before
    client_cpu, server_cpu = children_cpu() - cpu_before, process_tree_cpu(server_pid) - server_before
    if not csv_path.exists():
        raise SystemExit(
            f"{tool} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    row = next(csv.DictReader(csv_path.open()))
    csv_path.unlink()
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_us": float(row["p50 latency"]),
        "p99_us": float(row["p99 latency"]),
        "client_cpu_us_per_request": client_cpu / max(count, 1) * 1e6,
        "server_cpu_us_per_request": server_cpu / max(count, 1) * 1e6,
        "exit": result.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--perf-analyzer", default=DEFAULT_PERF_ANALYZER, metavar="PATH")
    parser.add_argument("--protocol", default="http", choices=["http", "grpc"])
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--interval-ms", type=int, default=3000, help="-p for both tools")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--trt-mode", default="sync", choices=["sync", "async"], help="trt perf's clients")
    parser.add_argument("--pin", action="store_true", help="server on CPU 0, the measuring tool on CPU 1")
    parser.add_argument(
        "--json", type=Path, default=ROOT / "reports" / "benchmarks" / "perf_vs_perf_analyzer.json"
    )
    args = parser.parse_args()
    if not Path(args.perf_analyzer).exists():
        raise SystemExit(f"perf_analyzer not found at {args.perf_analyzer}: see ../shared/PEERS.md")
    levels = [int(c) for c in args.concurrency.split(",")]

    http_port, grpc_port = free_port(), free_port()
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("--pin needs two CPUs")
    available = sorted(os.sched_getaffinity(0))
    server_cpus, tool_cpus = ({available[0]}, {available[1]}) if args.pin else (None, None)
    server = start_server(http_port, grpc_port, server_cpus)
    url = f"127.0.0.1:{http_port if args.protocol == 'http' else grpc_port}"
    common = [
        "-m",
        "simple",
        "-u",
        url,
        "-i",
        args.protocol,
        "-p",
        str(args.interval_ms),
        "-s",
        "25",
        "-r",
        "10",
    ]
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.csv"
            tools = {
                "perf_analyzer": [args.perf_analyzer, *common],
                "trt perf": [sys.executable, "-m", "trt", "perf", *common, f"--{args.trt_mode}",
                             "--allow-unstable"],
            }  # fmt: skip
            # One short warm-up run so neither tool meets a cold server.
            subprocess.run(
                [args.perf_analyzer, *common[:6], "-p", "1000", "-s", "100", "-f", str(out)],
                capture_output=True,
            )
            for concurrency in levels:
                for repeat in range(args.repeats):
                    order = list(tools) if repeat % 2 == 0 else list(reversed(tools))
                    for tool in order:
                        command = [
                            *tools[tool],
                            "--concurrency-range",
                            f"{concurrency}:{concurrency}",
                            "-f",
                            str(out),
                        ]
                        figures = measure(tool, command, out, http_port, server.pid, tool_cpus)
                        runs.setdefault((tool, concurrency), []).append(figures)
                        print(f"{tool:>13} c={concurrency:<3} {json.dumps(figures)}", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(20)

    def median(tool: str, concurrency: int, key: str) -> float:
        return statistics.median(r[key] for r in runs[(tool, concurrency)])

    table = Table(
        title=f"trt perf vs perf_analyzer on trt serve, model 'simple', {args.protocol}, "
        f"-p {args.interval_ms} -s 25, trt perf --{args.trt_mode}; medians of {args.repeats}"
        + ("; server and tool pinned to one CPU each" if args.pin else "")
    )
    for column in (
        "concurrency", "PA infer/s", "trt infer/s", "ratio", "PA p99 us", "trt p99 us", "ratio",
        "PA CPU/req us", "trt CPU/req us", "verdict",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    rows = []
    for concurrency in levels:
        pa_tp, trt_tp = (
            median("perf_analyzer", concurrency, "throughput"),
            median("trt perf", concurrency, "throughput"),
        )
        pa_p99, trt_p99 = (
            median("perf_analyzer", concurrency, "p99_us"),
            median("trt perf", concurrency, "p99_us"),
        )
        tp_ratio, p99_ratio = trt_tp / pa_tp, trt_p99 / pa_p99
        ok = abs(tp_ratio - 1) <= 0.10 and abs(p99_ratio - 1) <= 0.20
        row = {
            "concurrency": concurrency, "perf_analyzer_throughput": pa_tp, "trt_perf_throughput": trt_tp,
            "throughput_ratio": tp_ratio, "perf_analyzer_p99_us": pa_p99, "trt_perf_p99_us": trt_p99,
            "p99_ratio": p99_ratio,
            "perf_analyzer_client_cpu_us": median("perf_analyzer", concurrency, "client_cpu_us_per_request"),
            "trt_perf_client_cpu_us": median("trt perf", concurrency, "client_cpu_us_per_request"),
            "within_limits": ok,
        }  # fmt: skip
        rows.append(row)
        table.add_row(
            str(concurrency), f"{pa_tp:,.0f}", f"{trt_tp:,.0f}", f"{tp_ratio:.3f}", f"{pa_p99:,.0f}",
            f"{trt_p99:,.0f}", f"{p99_ratio:.3f}", f"{row['perf_analyzer_client_cpu_us']:,.0f}",
            f"{row['trt_perf_client_cpu_us']:,.0f}", "ok" if ok else "OUT",
        )  # fmt: skip
    peak_pa = max(max(r["throughput"] for r in runs[("perf_analyzer", c)]) for c in levels)
    peak_trt = max(max(r["throughput"] for r in runs[("trt perf", c)]) for c in levels)
    table.add_row(
        "peak", f"{peak_pa:,.0f}", f"{peak_trt:,.0f}", f"{peak_trt / peak_pa:.3f}", "", "", "", "", "",
        "ok" if peak_trt >= peak_pa else "LOWER",
    )  # fmt: skip
    Console(width=160).print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {"protocol": args.protocol, "trt_mode": args.trt_mode, "interval_ms": args.interval_ms,
                "pinned": args.pin,
                "rows": rows, "peak": {"perf_analyzer": peak_pa, "trt_perf": peak_trt},
                "runs": {f"{t}@{c}": v for (t, c), v in runs.items()},
                "cpu_count": psutil.cpu_count()}  # fmt: skip
    args.json.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()

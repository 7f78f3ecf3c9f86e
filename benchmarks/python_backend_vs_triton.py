"""trt serve vs NVIDIA Triton on the same Python-backend model, under the same perf_analyzer load.

Both servers load one repository holding Triton's own `add_sub` example (identical model.py). For
each server and concurrency, NVIDIA's perf_analyzer (HTTP with binary tensors, or gRPC with
``--protocol grpc``) measures throughput and p99; the server's CPU time (its process and every
model process under it) divided by the requests it answered (statistics extension) gives CPU per
request, and the share of it spent in the model processes (trt's model process, Triton's python
stub) is shown apart. One run, same machine: compare ratios.

Needs the peers (../shared/PEERS.md):  WITH_PY_PEERS=0 bash ../shared/peers/setup.sh /tmp/trt-peers

    python benchmarks/python_backend_vs_triton.py --peers /tmp/trt-peers [--concurrency 1,8,16]
        [--protocol grpc]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import answered_requests, free_port, measured_with_perf_analyzer  # noqa: E402

from tests.server.backends.python.python_models import ADD_SUB, ADD_SUB_CONFIG  # noqa: E402


def write_repository(folder: Path) -> Path:
    model = folder / "add_sub"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(ADD_SUB)
    (model / "config.pbtxt").write_text(ADD_SUB_CONFIG)
    return folder


def wait_ready(port: int, process: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/add_sub/ready", timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("server did not become ready")


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peers", type=Path, default=Path("/tmp/trt-peers"))
    parser.add_argument("--concurrency", default="1,8,16")
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument(
        "--protocol", choices=("http", "grpc"), default="http", help="what perf_analyzer speaks"
    )
    parser.add_argument(
        "--json", type=Path, help="default: reports/benchmarks/python_backend_vs_triton[_grpc].json"
    )
    args = parser.parse_args()
    suffix = "" if args.protocol == "http" else f"_{args.protocol}"
    args.json = args.json or ROOT / "reports" / "benchmarks" / f"python_backend_vs_triton{suffix}.json"
    port_index = 0 if args.protocol == "http" else 1  # of (HTTP, gRPC, metrics)
    perf_analyzer = str(args.peers / "perf" / "perf_analyzer")
    if not os.path.exists(perf_analyzer):
        raise SystemExit(f"perf_analyzer not found under {args.peers}: run ../shared/peers/setup.sh first")
    levels = [int(c) for c in args.concurrency.split(",")]
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_repository(Path(tmp) / "repo")

        def trt_command(h: int, g: int, m: int) -> list[str]:
            serve = [sys.executable, "-m", "trt", "serve", f"--model-repository={repo}"]
            serve.append("--log-info=false")
            return [*serve, "--http-address=127.0.0.1", f"--http-port={h}", "--grpc-address=127.0.0.1",
                    f"--grpc-port={g}", f"--metrics-port={m}"]  # fmt: skip

        def triton_command(h: int, g: int, m: int) -> list[str]:
            script = str(SHARED / "peers" / "run-triton.sh")
            return ["bash", script, str(args.peers), str(repo), str(h), str(g), str(m), "--log-info=false"]

        servers = {"trt": trt_command, "triton": triton_command}
        for name, command in servers.items():
            ports = free_port(), free_port(), free_port()
            process = subprocess.Popen(
                command(*ports), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                wait_ready(ports[0], process)
                for concurrency in levels:
                    root = psutil.Process(process.pid)
                    own_before, count_before = _cpu_seconds(root), answered_requests(ports[0], "add_sub")
                    result = measured_with_perf_analyzer(
                        perf_analyzer,
                        "add_sub",
                        args.protocol,
                        ports[port_index],
                        ports[0],
                        process.pid,
                        concurrency,
                        args.interval_ms,
                    )
                    count = answered_requests(ports[0], "add_sub") - count_before
                    own_us = (_cpu_seconds(root) - own_before) / max(count, 1) * 1e6
                    model_us = max(result["server_cpu_us_per_request"] - own_us, 0.0)
                    result["model_cpu_us_per_request"] = model_us
                    rows.append({"server": name, "concurrency": concurrency, **result})
            finally:
                process.terminate()
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
        shutil.rmtree(repo, ignore_errors=True)

    protocol = "HTTP, binary" if args.protocol == "http" else "gRPC"
    table = Table(title=f"Python-backend add_sub under perf_analyzer ({protocol}), one run")
    columns = ("server", "concurrency", "infer/s", "p99 (us)", "server CPU/req (us)", "of it, model process")
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(str(row["server"]), str(row["concurrency"]), f"{row['throughput']:,.0f}",
                      f"{row['p99_us']:,.0f}", f"{row['server_cpu_us_per_request']:,.0f}",
                      f"{row['model_cpu_us_per_request']:,.0f}")  # fmt: skip
    ratios = Table(title="trt / Triton")
    for column in ("concurrency", "throughput ratio", "p99 ratio", "CPU/req ratio"):
        ratios.add_column(column, justify="right")
    for concurrency in levels:
        ours = next(r for r in rows if r["server"] == "trt" and r["concurrency"] == concurrency)
        theirs = next(r for r in rows if r["server"] == "triton" and r["concurrency"] == concurrency)
        ratios.add_row(
            str(concurrency),
            f"{float(ours['throughput']) / float(theirs['throughput']):.2f}",  # type: ignore[arg-type]
            f"{float(ours['p99_us']) / float(theirs['p99_us']):.2f}",  # type: ignore[arg-type]
            f"{float(ours['server_cpu_us_per_request']) / float(theirs['server_cpu_us_per_request']):.2f}",  # type: ignore[arg-type]
        )
    console = Console()
    console.print(table)
    console.print(ratios)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

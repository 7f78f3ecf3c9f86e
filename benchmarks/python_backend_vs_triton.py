"""trt serve vs NVIDIA Triton on the same Python-backend model, under the same perf_analyzer load.

Both servers load one repository holding Triton's own `add_sub` example (identical model.py). For
each server and concurrency, NVIDIA's perf_analyzer (HTTP, binary tensors) measures throughput and
p99; the server's CPU time (its process and every model process under it) divided by the requests
it answered (statistics extension) gives CPU per request. One run, same machine: compare ratios.

Needs the peers (../shared/PEERS.md):  WITH_PY_PEERS=0 bash ../shared/peers/setup.sh /tmp/trt-peers

    python benchmarks/python_backend_vs_triton.py --peers /tmp/trt-peers [--concurrency 1,8,16]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import socket
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

from tests.backends.python_models import ADD_SUB, ADD_SUB_CONFIG  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def tree_cpu(pid: int) -> float:
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def answered(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/add_sub/stats") as reply:
        stats = json.loads(reply.read())["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


def measure(perf_analyzer: str, port: int, pid: int, concurrency: int, interval_ms: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.csv"
        cpu_before, count_before = tree_cpu(pid), answered(port)
        result = subprocess.run(
            [perf_analyzer, "-m", "add_sub", "-u", f"127.0.0.1:{port}", "-i", "http",
             "--concurrency-range", f"{concurrency}:{concurrency}", "-p", str(interval_ms), "-s", "25",
             "-r", "10", "-f", str(out)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        cpu_used, count = tree_cpu(pid) - cpu_before, answered(port) - count_before
        if result.returncode != 0:
            raise SystemExit(f"perf_analyzer failed:\n{result.stdout}\n{result.stderr}")
        row = next(csv.DictReader(out.open()))
    return {
        "throughput": float(row["Inferences/Second"]),
        "p99_us": float(row["p99 latency"]),
        "cpu_us_per_request": cpu_used / max(count, 1) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peers", type=Path, default=Path("/tmp/trt-peers"))
    parser.add_argument("--concurrency", default="1,8,16")
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument(
        "--json", type=Path, default=ROOT / "reports" / "benchmarks" / "python_backend_vs_triton.json"
    )
    args = parser.parse_args()
    perf_analyzer = str(args.peers / "perf" / "perf_analyzer")
    if not os.path.exists(perf_analyzer):
        raise SystemExit(f"perf_analyzer not found under {args.peers}: run ../shared/peers/setup.sh first")
    levels = [int(c) for c in args.concurrency.split(",")]
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_repository(Path(tmp) / "repo")

        def trt_command(h: int, g: int, m: int) -> list[str]:
            serve = [sys.executable, "-m", "cli.main", "serve", f"--model-repository={repo}"]
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
                    result = measure(perf_analyzer, ports[0], process.pid, concurrency, args.interval_ms)
                    rows.append({"server": name, "concurrency": concurrency, **result})
            finally:
                process.terminate()
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
        shutil.rmtree(repo, ignore_errors=True)

    table = Table(title="Python-backend add_sub under perf_analyzer (HTTP, binary), one run")
    for column in ("server", "concurrency", "infer/s", "p99 (us)", "server CPU/req (us)"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(str(row["server"]), str(row["concurrency"]), f"{row['throughput']:,.0f}",
                      f"{row['p99_us']:,.0f}", f"{row['cpu_us_per_request']:,.0f}")  # fmt: skip
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
            f"{float(ours['cpu_us_per_request']) / float(theirs['cpu_us_per_request']):.2f}",  # type: ignore[arg-type]
        )
    console = Console()
    console.print(table)
    console.print(ratios)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

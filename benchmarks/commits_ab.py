"""Server CPU per request of several trt checkouts side by side, in interleaved rounds (a bisect aid).

A figure taken a minute after another on this shared machine is not comparable, so this script serves
every checkout at once (``--rev COMMIT``, unpacked with ``git archive`` into a folder under /tmp, or
``--trt-root FOLDER``; each ``trt serve`` runs with its own folder as cwd so it imports its own code),
all on one repository in /tmp holding Triton's Python ``add_sub`` example, and in each round drives
each server in turn (the order rotates) with NVIDIA's perf_analyzer at one concurrency. The CPU time of
the server process and its Python model process (from /proc) over the answered requests gives CPU per
request; each checkout's figure is divided by the first checkout's in the same round, and the table
gives those ratios and their median. Compare ratios within one run, never absolute figures across runs.

    flock /tmp/trt-bench.lock python benchmarks/commits_ab.py --rev a215a4d --rev main \\
        [--protocol http|grpc] [--concurrency 1] [--rounds 5] [--window-ms 2000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import (  # noqa: E402
    answered_requests,
    free_port,
    perf_analyzer_run,
    report_against_first,
    rotated,
    stop_all,
    summary_against_first,
    wait_model_ready,
)

from tests.server.backends.python.python_models import ADD_SUB, ADD_SUB_CONFIG  # noqa: E402


@dataclass(frozen=True)
class Checkout:
    label: str
    root: Path


@dataclass
class Measurement:
    round: int
    label: str
    throughput: float
    p50_us: float
    server_cpu_us: float  # the server process and its model processes, per request
    model_cpu_us: float  # of it, the model processes


def unpacked(rev: str, into: Path) -> Checkout:
    """``git archive REV`` into a folder of its own (kept between runs: a commit's tree never changes)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short=9", f"{rev}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    folder = into / f"c_{commit}"
    if not (folder / ".complete").exists():
        folder.mkdir(parents=True, exist_ok=True)
        archive = subprocess.Popen(["git", "archive", commit], cwd=ROOT, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(folder)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit(f"git archive {commit} failed")
        (folder / ".complete").touch()
    return Checkout(f"{rev} ({commit})" if rev != commit else commit, folder)


def serve_command(root: Path, repo: Path, ports: tuple[int, int, int]) -> list[str]:
    # Before the package move (dc5904d) the CLI was the top-level package cli.
    entry = ["-m", "trt"] if (root / "trt" / "__main__.py").exists() else ["-m", "cli.main"]
    http, grpc, metrics = ports
    return [sys.executable, *entry, "serve", f"--model-repository={repo}", "--log-info=false",
            "--http-address=127.0.0.1", f"--http-port={http}", "--grpc-address=127.0.0.1",
            f"--grpc-port={grpc}", f"--metrics-port={metrics}"]  # fmt: skip


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the whole tree, the children alone): CPU seconds of a server and of its model processes."""
    root = psutil.Process(pid)
    own = sum(root.cpu_times()[:2])
    children = 0.0
    for child in root.children(recursive=True):
        try:
            children += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return own + children, children


def measure(
    perf_analyzer: str, protocol: str, pid: int, ports: tuple[int, int, int], concurrency: int, window_ms: int
) -> tuple[dict[str, float], float, float]:
    port = ports[0] if protocol == "http" else ports[1]
    (total_before, model_before), count_before = cpu_seconds(pid), answered_requests(ports[0], "add_sub")
    figures = perf_analyzer_run(
        perf_analyzer, "add_sub", f"127.0.0.1:{port}", protocol, concurrency, window_ms
    )
    total_after, model_after = cpu_seconds(pid)
    count = max(answered_requests(ports[0], "add_sub") - count_before, 1)
    return figures, (total_after - total_before) / count * 1e6, (model_after - model_before) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rev", action="append", default=[], help="a commit to unpack and serve (repeat)")
    parser.add_argument(
        "--trt-root", type=Path, action="append", default=[], help="a checkout folder (repeat)"
    )
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window-ms", type=int, default=2000)
    parser.add_argument("--checkouts", type=Path, default=Path("/tmp/commits_ab"), help="where revs unpack")
    parser.add_argument("--peers", type=Path, default=Path("/tmp/trt-peers"))
    parser.add_argument("--json", type=Path, default=ROOT / "reports" / "benchmarks" / "commits_ab.json")
    args = parser.parse_args()
    checkouts = [unpacked(rev, args.checkouts) for rev in args.rev]
    checkouts += [Checkout(str(root), root.resolve()) for root in args.trt_root]
    if len(checkouts) < 2:
        raise SystemExit("give two or more checkouts (--rev, --trt-root)")
    perf_analyzer = str(args.peers / "perf" / "perf_analyzer")
    console = Console(width=160)
    results: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="commits_ab_repo_") as tmp:
        model = Path(tmp) / "add_sub"
        (model / "1").mkdir(parents=True)
        (model / "1" / "model.py").write_text(ADD_SUB)
        (model / "config.pbtxt").write_text(ADD_SUB_CONFIG)
        servers: list[tuple[subprocess.Popen[bytes], tuple[int, int, int]]] = []
        try:
            for checkout in checkouts:
                ports = free_port(), free_port(), free_port()
                command = serve_command(checkout.root, Path(tmp), ports)
                process = subprocess.Popen(
                    command, cwd=checkout.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                servers.append((process, ports))
            for process, ports in servers:
                wait_model_ready(ports[0], process, "add_sub")
            for process, ports in servers:  # warm: first requests pay imports and allocator growth
                measure(perf_analyzer, args.protocol, process.pid, ports, args.concurrency, 500)
            for number in range(args.rounds):
                for index in rotated(len(servers), number):
                    process, ports = servers[index]
                    figures, total_us, model_us = measure(
                        perf_analyzer, args.protocol, process.pid, ports, args.concurrency, args.window_ms
                    )
                    results.append(
                        Measurement(
                            number,
                            checkouts[index].label,
                            figures["throughput"],
                            figures["p50_us"],
                            total_us,
                            model_us,
                        )
                    )
                console.print(
                    f"round {number + 1}: "
                    + "; ".join(f"{m.label}: {m.server_cpu_us:,.0f} us" for m in results if m.round == number)
                )
        finally:
            stop_all([process for process, _ in servers])

    labels = [checkout.label for checkout in checkouts]
    medians = ("server_cpu_us", "model_cpu_us", "throughput")
    report_against_first(
        console,
        f"add_sub under perf_analyzer ({args.protocol}, c={args.concurrency}), server CPU per request "
        f"against {labels[0]} in each round",
        ("checkout", "CPU/req ratio, each round", "median ratio", "median CPU/req (us)",
         "of it, model process", "median infer/s"),
        summary_against_first(results, labels, args.rounds, "server_cpu_us", medians),
        medians,
        args.json,
        {"protocol": args.protocol, "concurrency": args.concurrency, "window_ms": args.window_ms,
         "rounds": [asdict(m) for m in results]},
    )  # fmt: skip


if __name__ == "__main__":
    main()

"""JSON inference requests through `trt serve --frontend-workers N`: checkouts side by side.

Every checkout (``--rev COMMIT``, unpacked with ``git archive``, or ``--trt-root FOLDER``) serves the
example repository's ``--model`` with ``--frontend-workers N`` for each N of ``--workers``, all at
once, and in each round this checkout's ``trt perf`` drives each server in turn (the order rotates)
at one concurrency with its tensors as JSON data (``--input-tensor-format json``; the answers' format
is ``--output-tensor-format``). Per server and round: throughput, and the CPU per answered request of
the core process (the one event loop every request passes through, where a multi-core front end hits
its ceiling) and of the workers together. Each round's throughput is divided by the first server's in
the same round; medians over the rounds. Compare ratios within one run, never figures across runs.

    flock /tmp/trt-bench.lock python benchmarks/json_in_workers.py --rev HEAD~1 --trt-root . \\
        [--model mlp_onnx] [--workers 0,2] [--concurrency 16] [--rounds 4] [--window-ms 2000]

Writes reports/benchmarks/json_in_workers.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
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
    report_against_first,
    rotated,
    stop_all,
    summary_against_first,
    wait_model_ready,
)
from commits_ab import Checkout, unpacked  # noqa: E402


@dataclass
class Measurement:
    round: int
    label: str
    throughput: float
    p50_us: float
    core_cpu_us: float  # the core process alone (its model threads included), per request
    workers_cpu_us: float  # the front-end workers together, per request


def cpu_split(pid: int) -> tuple[float, float]:
    """(the core process, its front-end workers): CPU seconds so far."""
    core = psutil.Process(pid)
    workers = 0.0
    for child in core.children():
        try:
            if "trt.server.frontend.worker" in " ".join(child.cmdline()):
                workers += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return sum(core.cpu_times()[:2]), workers


def perf(
    model: str, port: int, concurrency: int, window_ms: int, input_format: str, output_format: str
) -> dict[str, float]:
    command = [sys.executable, "-m", "trt", "perf", "-m", model, "-u", f"127.0.0.1:{port}",
               f"--concurrency={concurrency}", "-p", str(window_ms), f"--input-tensor-format={input_format}",
               f"--output-tensor-format={output_format}", "--json"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"trt perf failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(done.stdout)["results"][0]
    if result["error_count"]:
        raise SystemExit(f"trt perf counted {result['error_count']} errors: {result['error_samples']}")
    return {"throughput": result["throughput"], "p50_us": result["latency_us"]["p50"]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rev", action="append", default=[], help="a commit to unpack and serve (repeat)")
    parser.add_argument(
        "--trt-root", type=Path, action="append", default=[], help="a checkout folder (repeat)"
    )
    parser.add_argument("--model", default="mlp_onnx", help="a model of the example repository")
    parser.add_argument("--workers", default="2", help="--frontend-workers, comma-separated: a server each")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--window-ms", type=int, default=2000)
    parser.add_argument("--input-tensor-format", choices=("json", "binary"), default="json")
    parser.add_argument("--output-tensor-format", choices=("json", "binary"), default="json")
    parser.add_argument("--checkouts", type=Path, default=Path("/tmp/commits_ab"), help="where revs unpack")
    parser.add_argument("--json", type=Path, default=ROOT / "reports" / "benchmarks" / "json_in_workers.json")
    args = parser.parse_args()
    checkouts = [unpacked(rev, args.checkouts) for rev in args.rev]
    checkouts += [Checkout(str(root), root.resolve()) for root in args.trt_root]
    if not checkouts:
        raise SystemExit("give one or more checkouts (--rev, --trt-root)")
    console = Console(width=160)
    formats = (args.input_tensor_format, args.output_tensor_format)
    results: list[Measurement] = []
    servers: list[tuple[str, subprocess.Popen[bytes], int]] = []
    try:
        for checkout in checkouts:
            for workers in [int(n) for n in args.workers.split(",")]:
                port = free_port()
                repository = ROOT / "model_repository"
                command = [sys.executable, "-m", "trt", "serve", f"--model-repository={repository}",
                           "--model-control-mode=explicit", f"--load-model={args.model}", "--log-info=false",
                           "--http-address=127.0.0.1", f"--http-port={port}", f"--grpc-port={free_port()}",
                           f"--metrics-port={free_port()}", f"--frontend-workers={workers}"]  # fmt: skip
                process = subprocess.Popen(
                    command, cwd=checkout.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                servers.append((f"{checkout.label}, {workers} workers", process, port))
        for _, process, port in servers:
            wait_model_ready(port, process, args.model)
        for _, _, port in servers:  # warm: first requests pay imports and allocator growth
            perf(args.model, port, args.concurrency, 500, *formats)
        for number in range(args.rounds):
            for index in rotated(len(servers), number):
                label, process, port = servers[index]
                (core_before, workers_before), count_before = (
                    cpu_split(process.pid),
                    answered_requests(port, args.model),
                )
                figures = perf(args.model, port, args.concurrency, args.window_ms, *formats)
                core_after, workers_after = cpu_split(process.pid)
                count = max(answered_requests(port, args.model) - count_before, 1)
                results.append(
                    Measurement(number, label, figures["throughput"], figures["p50_us"],
                                (core_after - core_before) / count * 1e6,
                                (workers_after - workers_before) / count * 1e6)
                )  # fmt: skip
            console.print(
                f"round {number + 1}: "
                + "; ".join(f"{m.label}: {m.throughput:,.0f}/s" for m in results if m.round == number)
            )
    finally:
        stop_all([process for _, process, _ in servers])

    labels = [label for label, _, _ in servers]
    medians = ("throughput", "core_cpu_us", "workers_cpu_us")
    report_against_first(
        console,
        f"{args.model}, tensors as {args.input_tensor_format}, answers as {args.output_tensor_format}, "
        f"trt perf at c={args.concurrency}: against {labels[0]} in each round",
        ("server", "infer/s ratio, each round", "median ratio", "median infer/s", "core CPU/req (us)",
         "workers CPU/req (us)"),
        summary_against_first(results, labels, args.rounds, "throughput", medians),
        medians,
        args.json,
        {"arguments": {k: str(v) for k, v in vars(args).items()}, "rounds": [asdict(m) for m in results]},
    )  # fmt: skip


if __name__ == "__main__":
    main()

"""Where `trt serve`'s CPU per request goes on a small model, and what N front-end cores could serve.

Serves the ONNX `simple` model (INT32 add/sub, [1,16]) and loads it with NVIDIA's perf_analyzer over
HTTP and gRPC. For each protocol and concurrency it reports, per answered request:
- the server's event-loop thread (transport, decode, core scheduling, encode: one Python thread),
  its other threads (the backend's executor and ONNX Runtime), and the client's CPU;
- how busy the machine was (cores in use: server, client, everything else);
- with ``--profile PY_SPY``, a second pass under py-spy that splits the loop thread's time into
  transport / decode / core / encode / event loop (benchmarks/_stages.py says how).
Then it measures what handing a request to another process and back costs with the shared-memory
rings the Python backend uses (benchmarks/_handoff.py), and prints the cost model of a front end of
N worker processes in front of one core process that keeps the schedulers:

    per request: worker = F + h_w (transport, decode, encode, handoff), core loop = S + h_c,
                 backend = B, client = K (on this machine the client shares the cores)
    throughput <= min(N / (F + h_w),  1 / (S + h_c),  cores / (F + h_w + S + h_c + B [+ K]))

against today's single process: min(1 / (F + S), cores / (F + S + B [+ K])).

    python benchmarks/frontend_costs.py --perf-analyzer /tmp/trt-peers/perf/perf_analyzer \
        [--concurrency 32] [--profile /path/to/py-spy] [--cores 2,16]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import answered_requests, free_port, perf_analyzer_run  # noqa: E402
from _handoff import HandoffCost, measure_handoff  # noqa: E402
from _stages import STAGES, stage_samples  # noqa: E402
from serve_addsub import start_server  # noqa: E402


@dataclass
class Split:
    protocol: str
    concurrency: int
    throughput: float
    loop_us: float  # the event loop's thread, per request
    threads_us: float  # every other thread of the server (backend executor, ONNX Runtime)
    client_us: float  # perf_analyzer
    machine_cores_busy: float  # the whole machine, during the run
    server_cores: float
    client_cores: float
    stages_us: dict[str, float]  # the loop's time split by py-spy's samples (empty without --profile)


def _thread_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of the process's main thread and of its other threads."""
    ticks = os.sysconf("SC_CLK_TCK")
    main = others = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        if task.name == str(pid):
            main += seconds
        else:
            others += seconds
    return main, others


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _busy(times: psutil._common.scputimes) -> float:  # type: ignore[name-defined]
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def measure(
    binary: str, protocol: str, port: int, http_port: int, pid: int, concurrency: int, interval_ms: int
) -> Split:
    main0, others0 = _thread_cpu(pid)
    client0, machine0, count0 = _children_cpu(), psutil.cpu_times(), answered_requests(http_port, "simple")
    started = time.monotonic()
    figures = perf_analyzer_run(binary, "simple", f"127.0.0.1:{port}", protocol, concurrency, interval_ms)
    wall = time.monotonic() - started
    main1, others1 = _thread_cpu(pid)
    client = _children_cpu() - client0
    machine = _busy(psutil.cpu_times()) - _busy(machine0)
    count = max(answered_requests(http_port, "simple") - count0, 1)
    server = (main1 - main0) + (others1 - others0)
    return Split(
        protocol, concurrency, figures["throughput"], (main1 - main0) / count * 1e6,
        (others1 - others0) / count * 1e6, client / count * 1e6, machine / wall, server / wall,
        client / wall, {},
    )  # fmt: skip


def profile_stages(
    py_spy: str, binary: str, protocol: str, port: int, pid: int, concurrency: int, interval_ms: int
) -> dict[str, float]:
    """Shares of the loop thread's samples per stage over one more perf_analyzer run under py-spy."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "stacks.txt"
        spy = subprocess.Popen(
            [py_spy, "record", "--pid", str(pid), "--rate", "200", "--nonblocking", "--format", "raw",
             "--output", str(raw)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            time.sleep(1.0)  # py-spy attaches
            perf_analyzer_run(binary, "simple", f"127.0.0.1:{port}", protocol, concurrency, interval_ms)
        finally:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        stages, _ = stage_samples(raw)
    total = sum(stages.values()) or 1
    return {stage: stages[stage] / total for stage in STAGES}


def cost_model(split: Split, handoff: HandoffCost, cores: int, workers: int, client_shares: bool) -> float:
    """Requests/s the model allows for ``workers`` front-end processes (0: today's single process)."""
    core_share = split.stages_us.get("core", 0.0)
    front = split.loop_us - core_share  # transport, decode, encode, loop dispatch
    client = split.client_us if client_shares else 0.0
    if workers == 0:
        bounds = [1e6 / split.loop_us, cores * 1e6 / (split.loop_us + split.threads_us + client)]
    else:
        worker_us = front + handoff.worker_us
        core_loop_us = core_share + handoff.core_us
        total = worker_us + core_loop_us + split.threads_us + client
        bounds = [min(workers, cores) * 1e6 / worker_us, 1e6 / core_loop_us, cores * 1e6 / total]
    return min(bounds)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--perf-analyzer", required=True, metavar="PATH")
    parser.add_argument("--profile", metavar="PY_SPY", help="py-spy binary: split the loop's time by stage")
    parser.add_argument("--concurrency", default="32")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--cores", default="2,16", help="machines the cost model is printed for")
    parser.add_argument("--json", type=Path, default=ROOT / "reports" / "benchmarks" / "frontend_costs.json")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    http_port, grpc_port = free_port(), free_port()
    server = start_server(http_port, grpc_port)
    splits: list[Split] = []
    try:
        for protocol in args.protocols.split(","):
            port = http_port if protocol == "http" else grpc_port
            for concurrency in levels:
                split = measure(
                    args.perf_analyzer, protocol, port, http_port, server.pid, concurrency, args.interval_ms
                )
                if args.profile:
                    shares = profile_stages(
                        args.profile, args.perf_analyzer, protocol, port, server.pid, concurrency,
                        args.interval_ms,
                    )  # fmt: skip
                    split.stages_us = {stage: share * split.loop_us for stage, share in shares.items()}
                splits.append(split)
    finally:
        server.terminate()
        server.wait(20)
    handoffs = [measure_handoff(in_flight) for in_flight in (1, 16)]

    console = Console(width=max(Console().width, 180))
    table = Table(title="trt serve, ONNX `simple` under perf_analyzer: CPU per request (us) and cores busy")
    for column in ("protocol", "c", "infer/s", "loop thread", *STAGES, "other threads", "client",
                   "cores busy: all", "server", "client "):  # fmt: skip
        table.add_column(column, justify="right")
    for s in splits:
        stage_cells = [f"{s.stages_us[stage]:.0f}" if s.stages_us else "-" for stage in STAGES]
        cores = (s.machine_cores_busy, s.server_cores, s.client_cores)
        table.add_row(s.protocol, str(s.concurrency), f"{s.throughput:,.0f}", f"{s.loop_us:.0f}",
                      *stage_cells, f"{s.threads_us:.0f}", f"{s.client_us:.0f}",
                      *(f"{c:.2f}" for c in cores))  # fmt: skip
    console.print(table)
    ipc = Table(title="Handing a request to another process and back (shared-memory rings + eventfd)")
    for column in ("in flight", "round trips/s", "worker side us/req", "core side us/req"):
        ipc.add_column(column, justify="right")
    for h in handoffs:
        ipc.add_row(str(h.in_flight), f"{h.messages_per_s:,.0f}", f"{h.worker_us:.1f}", f"{h.core_us:.1f}")
    console.print(ipc)
    model_rows = []
    if any(s.stages_us for s in splits):
        model = Table(title="Cost model: requests/s allowed, N front-end workers + one core process")
        for column in ("protocol", "c", "measured", "cores", "client shares cores", "today (1 process)",
                       "N=1", "N=2", "N=4", "N=8", "N=16", "2 workers / today"):  # fmt: skip
            model.add_column(column, justify="right")
        # At concurrency 1 a request's latency, not the CPU, sets the rate: the model is for loads
        # that keep the server busy.
        for s in (s for s in splits if s.stages_us and s.concurrency > 1):
            handoff = handoffs[0] if s.concurrency == 1 else handoffs[1]
            for cores in (int(c) for c in args.cores.split(",")):
                shares = cores <= 2  # on this machine the client runs beside the server
                figures = [cost_model(s, handoff, cores, n, shares) for n in (0, 1, 2, 4, 8, 16)]
                model_rows.append({"protocol": s.protocol, "concurrency": s.concurrency, "cores": cores,
                                   "client_shares": shares, "allowed": figures})  # fmt: skip
                model.add_row(s.protocol, str(s.concurrency), f"{s.throughput:,.0f}", str(cores),
                              "yes" if shares else "no",
                              *(f"{f:,.0f}" for f in figures), f"{figures[2] / figures[0]:.2f}")  # fmt: skip
        console.print(model)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "splits": [asdict(s) for s in splits],
        "handoff": [asdict(h) for h in handoffs],
        "cost_model": model_rows,
    }
    args.json.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()

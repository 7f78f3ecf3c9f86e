"""trt serve vs NVIDIA Triton on the same Python-backend model, under the same perf_analyzer load.

Both servers load one repository holding Triton's own `add_sub` example (identical model.py) and run
side by side. For each round and concurrency, NVIDIA's perf_analyzer (HTTP with binary tensors, or
gRPC with ``--protocol grpc``) measures one server, then the other, in an order that rotates from
round to round (so both see the same load from the rest of the machine, and neither always goes
first), and the ratios are taken within the round. The server's CPU time (its
process and every model process under it) divided by the requests it answered (statistics
extension) gives CPU per request, and the share of it spent in the model processes (trt's model
process, Triton's python stub) is shown apart. Compare ratios, never absolute figures across runs.

Needs the peers (../shared/PEERS.md):  WITH_PY_PEERS=0 bash ../shared/peers/setup.sh /tmp/trt-peers

    python benchmarks/python_backend_vs_triton.py --peers /tmp/trt-peers [--concurrency 1,8,16]
        [--protocol grpc] [--rounds 3] [--compiled]

``--compiled`` builds this checkout's compiled request path in a copy (``scripts/build_compiled.py``)
and measures it as a third server, ``trt-compiled``, in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
# ../shared beside the checkout (a worktree under /work/wt has it two levels up).
SHARED = next(
    (p for p in (ROOT.parent / "shared", ROOT.parent.parent / "shared") if p.exists()), ROOT.parent / "shared"
)
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import (  # noqa: E402
    UNSTABLE_CAPTION,
    UNSTABLE_MARK,
    answered_requests,
    free_port,
    measured_with_perf_analyzer,
    wait_model_ready,
)

from tests.server.backends.python.python_models import ADD_SUB, ADD_SUB_CONFIG  # noqa: E402


def write_repository(folder: Path) -> Path:
    model = folder / "add_sub"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(ADD_SUB)
    (model / "config.pbtxt").write_text(ADD_SUB_CONFIG)
    return folder


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
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each measuring both servers in turn")
    parser.add_argument(
        "--protocol", choices=("http", "grpc"), default="http", help="what perf_analyzer speaks"
    )
    parser.add_argument(
        "--compiled", action="store_true",
        help="also serve a compiled build of this checkout (TRT_COMPILE=1; needs mypy and a C compiler)",
    )  # fmt: skip
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

        # (name, command, folder it runs from, environment added): trt as checked out, its compiled
        # build (--compiled) and Triton.
        Command = Callable[[int, int, int], list[str]]
        launches: list[tuple[str, Command, Path, dict[str, str]]] = [("trt", trt_command, ROOT, {})]
        if args.compiled:
            copy = Path(tmp) / "trt-compiled"
            print("building the compiled request path (scripts/build_compiled.py) ...", flush=True)
            build = [sys.executable, str(ROOT / "scripts" / "build_compiled.py"), str(copy)]
            subprocess.run(build, check=True)
            launches.append(("trt-compiled", trt_command, copy, {"PYTHONPATH": str(copy)}))
        launches.append(("triton", triton_command, ROOT, {}))
        servers: dict[str, tuple[subprocess.Popen[bytes], tuple[int, int, int]]] = {}
        try:
            for name, command, folder, env in launches:
                ports = free_port(), free_port(), free_port()
                servers[name] = (
                    subprocess.Popen(
                        command(*ports),
                        cwd=folder, env={**os.environ, **env},
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    ),
                    ports,
                )  # fmt: skip
            for process, ports in servers.values():
                wait_model_ready(ports[0], process, "add_sub")
            for round_index in range(args.rounds):
                for concurrency in levels:
                    # The order rotates from round to round: the server measured first in a round was
                    # seen to use about a tenth more CPU per request (commits_ab.py rotates too).
                    names = list(servers)
                    shift = round_index % len(names)
                    for name in names[shift:] + names[:shift]:
                        process, ports = servers[name]
                        root = psutil.Process(process.pid)  # run-triton.sh execs tritonserver
                        own_before, count_before = _cpu_seconds(root), answered_requests(ports[0], "add_sub")
                        result = measured_with_perf_analyzer(
                            perf_analyzer, "add_sub", args.protocol, ports[port_index], ports[0], process.pid,
                            concurrency, args.interval_ms,
                        )  # fmt: skip
                        count = answered_requests(ports[0], "add_sub") - count_before
                        own_us = (_cpu_seconds(root) - own_before) / max(count, 1) * 1e6
                        result["model_cpu_us_per_request"] = max(
                            result["server_cpu_us_per_request"] - own_us, 0.0
                        )
                        rows.append(
                            {"round": round_index + 1, "server": name, "concurrency": concurrency, **result}
                        )
        finally:
            for process, _ in servers.values():
                process.terminate()
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
        shutil.rmtree(repo, ignore_errors=True)

    protocol = "HTTP, binary" if args.protocol == "http" else "gRPC"
    unsteady = any(not row.get("stable", 1.0) for row in rows)
    table = Table(
        title=f"Python-backend add_sub under perf_analyzer ({protocol})",
        caption=UNSTABLE_CAPTION if unsteady else None,
    )
    columns = ("round", "server", "concurrency", "infer/s", "p99 (us)", "server CPU/req (us)",
               "of it, model process")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        cells = [
            row["throughput"],
            row["p99_us"],
            row["server_cpu_us_per_request"],
            row["model_cpu_us_per_request"],
        ]
        texts = [f"{float(cell):,.0f}" for cell in cells]  # type: ignore[arg-type]
        if not row.get("stable", 1.0):
            texts[0] += UNSTABLE_MARK
        table.add_row(str(row["round"]), str(row["server"]), str(row["concurrency"]), *texts)
    ratios = Table(title="trt / Triton, within each round")
    for column in ("round", "server", "concurrency", "throughput ratio", "p99 ratio", "CPU/req ratio"):
        ratios.add_column(column, justify="right")
    ours_names = ["trt", "trt-compiled"] if args.compiled else ["trt"]
    for round_index in range(1, args.rounds + 1):
        for concurrency in levels:
            for ours_name in ours_names:
                ours, theirs = (
                    next(
                        r
                        for r in rows
                        if r["server"] == s and r["concurrency"] == concurrency and r["round"] == round_index
                    )
                    for s in (ours_name, "triton")
                )
                ratio = {
                    key: float(ours[key]) / float(theirs[key])  # type: ignore[arg-type]
                    for key in ("throughput", "p99_us", "server_cpu_us_per_request")
                }
                ratios.add_row(
                    str(round_index),
                    ours_name,
                    str(concurrency),
                    f"{ratio['throughput']:.2f}",
                    f"{ratio['p99_us']:.2f}",
                    f"{ratio['server_cpu_us_per_request']:.2f}",
                )
    console = Console()
    console.print(table)
    console.print(ratios)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

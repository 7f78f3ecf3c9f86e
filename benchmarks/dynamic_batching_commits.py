"""Dynamic batching on issue 19's case, several checkouts of trt side by side, in interleaved rounds.

On a machine that others load, a figure taken a minute after another is not comparable: this script
starts one `trt serve` per checkout (``--trt-root``, repeated; e.g. ``git archive COMMIT | tar -x``
into a folder), all serving the same seeded 2048x8 MLP (one instance, ``preferred_batch_size:
[ 32 ]``, ``--delay-us`` queue delay), and in each round measures, back to back: ONNX Runtime
in-process at batch 32 with its default threads, then each server under NVIDIA's perf_analyzer
(HTTP, concurrency 32, ``--window-ms`` windows). Each served figure is divided by that round's
in-process figure (the better of one before and one after the round; the checkouts take turns at
going first); the table gives every round's ratio and the median, with the batch sizes formed
and the CPU per request of the serving loop, the model threads and perf_analyzer.

    python benchmarks/dynamic_batching_commits.py --trt-root /tmp/before --trt-root . [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import perf_analyzer_run  # noqa: E402
from dynamic_batching import (  # noqa: E402
    PERF_ANALYZER,
    ServerMeter,
    _children_cpu_s,
    build_mlp,
    config,
    in_process,
    start_server,
)
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

WIDTH, LAYERS, CONCURRENCY = 2048, 8, 32


def served(binary: Path, pid: int, port: int, window_ms: int) -> dict[str, Any]:
    meter = ServerMeter(pid, port, "mlp")
    cpu_before = _children_cpu_s()
    figures = perf_analyzer_run_fixed(binary, port, window_ms)
    client_cpu = _children_cpu_s() - cpu_before
    meters = meter.finish()
    requests = max(meters.pop("inferences"), 1)
    return {**figures, **meters, "client_cpu_us": client_cpu / requests * 1e6, "batches": meter.batch_sizes}


def perf_analyzer_run_fixed(binary: Path, port: int, window_ms: int) -> dict[str, float]:
    return perf_analyzer_run(str(binary), "mlp", f"127.0.0.1:{port}", "http", CONCURRENCY, window_ms)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trt-root", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--delay-us", type=int, default=5000)
    parser.add_argument(
        "--queue-delay-from", choices=("arrival", "instance_free"), default="arrival",
        help="the model's queue_delay_from parameter (checkouts before it ignore it)",
    )  # fmt: skip
    parser.add_argument(
        "--serve-args", action="append", default=[],
        help="more flags for the server of the --trt-root at the same position ('' for none), e.g. "
        "--trt-root . --trt-root . --serve-args='' --serve-args=--frontend-workers=1",
    )  # fmt: skip
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--perf-analyzer", type=Path, default=PERF_ANALYZER)
    parser.add_argument(
        "--json", type=Path, default=ROOT / "reports" / "benchmarks" / "dynamic_batching_commits.json"
    )
    args = parser.parse_args()
    roots = [root.resolve() for root in args.trt_root]
    if len(args.serve_args) > len(roots):
        parser.error("more --serve-args than --trt-root")
    flags = [tuple(a.split()) for a in args.serve_args] + [()] * (len(roots) - len(args.serve_args))
    labels = [" ".join((str(root), *extra)) for root, extra in zip(roots, flags, strict=True)]
    console = Console(width=180)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        source = repo / "source.onnx"
        build_mlp(source, WIDTH, LAYERS)
        (repo / "mlp" / "1").mkdir(parents=True)
        shutil.copy(source, repo / "mlp" / "1" / "model.onnx")
        batching = (
            f"dynamic_batching {{ preferred_batch_size: [ 32 ] "
            f"max_queue_delay_microseconds: {args.delay_us} }}\n"
            f'parameters {{ key: "queue_delay_from" value {{ string_value: "{args.queue_delay_from}" }} }}\n'
        )
        (repo / "mlp" / "config.pbtxt").write_text(config("mlp", WIDTH, batching))
        servers = [start_server(repo, root, extra) for root, extra in zip(roots, flags, strict=True)]
        try:
            for _, port in servers:  # warm each: the first batches pay the allocator's growth
                perf_analyzer_run_fixed(args.perf_analyzer, port, 1000)
            for number in range(args.rounds):
                # The reference is taken before and after the round and the better kept (a reference
                # taken while something else runs would flatter the ratio); the checkouts take turns
                # at going first, since this machine's load drifts within a round too.
                reference = in_process(source, WIDTH, 32, 2.0, threads="default")
                order = [(index + number) % len(servers) for index in range(len(servers))]
                figures: list[dict[str, Any]] = [{} for _ in servers]
                for index in order:
                    server, port = servers[index]
                    figures[index] = served(args.perf_analyzer, server.pid, port, args.window_ms)
                reference = max(reference, in_process(source, WIDTH, 32, 2.0, threads="default"))
                rounds.append({"round": number, "in_process_default": reference, "served": figures})
                console.print(
                    f"round {number + 1}: in-process {reference:,.0f}/s; "
                    + "; ".join(
                        f"{label}: {f['throughput']:,.0f}/s ({f['batches']})"
                        for label, f in zip(labels, figures, strict=True)
                    )
                )
                time.sleep(0.5)
        finally:
            for server, _ in servers:
                server.terminate()
                server.wait(30)
    table = Table(
        title=f"MLP {WIDTH}x{LAYERS}, pref 32, {args.delay_us / 1000:g} ms queue delay, "
        f"perf_analyzer HTTP c={CONCURRENCY}, one instance"
    )
    for column in (
        "checkout",
        "served / in-process (default threads), each round",
        "median",
        "batches (last round)",
        "CPU/request (us): serving / model / client, median",
    ):
        table.add_column(column, justify="right")
    for index, label in enumerate(labels):
        ratios = [r["served"][index]["throughput"] / r["in_process_default"] for r in rounds]

        def med(key: str, index: int = index) -> float:
            return statistics.median(r["served"][index][key] for r in rounds)

        table.add_row(
            label,
            " / ".join(f"{x:.2f}" for x in ratios),
            f"{statistics.median(ratios):.2f}",
            rounds[-1]["served"][index]["batches"],
            f"{med('serving_cpu_us'):,.0f} / {med('model_cpu_us'):,.0f} / {med('client_cpu_us'):,.0f}",
        )
    console.print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"roots": [str(r) for r in roots], "serve_args": flags, "rounds": rounds}, indent=2)
    )


if __name__ == "__main__":
    main()

"""The channel between a front-end worker and the core: a Unix socket pair or the Python backend's
shared-memory rings with eventfd wake-ups, carrying the same frames (a gRPC ``simple`` request,
encoded and decoded with ``trt.server.frontend.codec`` on both sides), between two real processes.

Per request, the CPU of the sending side (the worker: encode, send, wait, decode the answer) and of
the receiving side (the core: wait, decode, encode the answer, send), with 1 and 16 in flight (one
wake-up, or one write, then carries several). `--frontend-workers` uses the socket: see the README.

    flock /tmp/trt-bench.lock python benchmarks/frontend_channel.py [--count 20000] [--rounds 3]

Writes reports/benchmarks/frontend_channel.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _handoff import HandoffCost, measure_ring_frames, measure_socket_handoff  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=20_000, help="round trips per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are shown")
    parser.add_argument(
        "--json", type=Path, default=ROOT / "reports" / "benchmarks" / "frontend_channel.json"
    )
    args = parser.parse_args()
    channels = {"unix socket": measure_socket_handoff, "shm rings + eventfd": measure_ring_frames}
    results: dict[tuple[str, int], list[HandoffCost]] = {}
    for _ in range(args.rounds):
        for in_flight in (1, 16):
            for name, measure in channels.items():
                results.setdefault((name, in_flight), []).append(measure(in_flight, args.count))
    table = Table(title=f"worker <-> core channel, request-sized frames, medians of {args.rounds} rounds")
    for column in ("channel", "in flight", "round trips/s", "worker us/req", "core us/req", "both us/req"):
        table.add_column(column, justify="left" if column == "channel" else "right")
    rows = []
    for (name, in_flight), costs in results.items():
        worker = statistics.median(cost.worker_us for cost in costs)
        core = statistics.median(cost.core_us for cost in costs)
        rate = statistics.median(cost.messages_per_s for cost in costs)
        table.add_row(
            name, str(in_flight), f"{rate:,.0f}", f"{worker:.1f}", f"{core:.1f}", f"{worker + core:.1f}"
        )
        rows.append({"channel": name, "in_flight": in_flight, "runs": [asdict(cost) for cost in costs]})
    Console().print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

"""Triton 2.51 and trt serving one repository at once, for the ``*_vs_triton`` benchmarks that measure
both in alternating rounds, and the table of each round's trt / Triton ratio they print."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from _common import wait_model_ready
from generative_vs_triton import distinct_ports, genai_venv, start_triton, start_trt
from rich.console import Console
from rich.table import Table

SERVERS = ("triton", "trt")
ROOT = Path(__file__).resolve().parents[1]


def add_options(parser: argparse.ArgumentParser, name: str, requests: int) -> None:
    """The options every side-by-side benchmark takes: where Triton is, its Python environment, the
    requests per run, the rounds and where the results go (``reports/benchmarks/<name>``)."""
    parser.add_argument("--peers", type=Path, default=Path("/tmp/trt-peers"))
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "trt-triton-genai-venv")
    parser.add_argument("--requests", type=int, default=requests, help="requests per run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=ROOT / "reports" / "benchmarks" / name)


@dataclass(frozen=True)
class Served:
    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int


@contextmanager
def triton_and_trt(
    peers: Path, venv: Path, repository: Path, ready_model: str, trt_flags: Sequence[str] = ()
) -> Iterator[dict[str, Served]]:
    """Both servers on ``repository`` (Triton's Python backend in ``venv``), once ``ready_model`` is
    ready on each; stopped on the way out. ``trt_flags``: what trt needs where Triton 2.51's defaults
    differ (``--allow-client-shm=true``: 2.51 has no such flag and takes registrations)."""
    if not (peers / "triton" / "bin" / "tritonserver").exists():
        raise SystemExit(f"Triton not found under {peers}: run ../shared/peers/setup.sh first")
    environment = genai_venv(peers, venv)
    ports = distinct_ports(7)  # the kernel may hand out a port twice in a row once it is closed
    with tempfile.TemporaryDirectory() as logs:
        servers = {
            "triton": Served(
                start_triton(
                    peers, environment, repository, (ports[0], ports[1], ports[2]), Path(logs) / "t"
                ),
                ports[0],
                ports[1],
            ),
            "trt": Served(
                start_trt(
                    repository, (ports[3], ports[4], ports[5]), ports[6], list(trt_flags), Path(logs) / "trt"
                ),
                ports[3],
                ports[4],
            ),
        }
        try:
            for served in servers.values():
                wait_model_ready(served.http_port, served.process, ready_model, 180)
            yield servers
        finally:
            servers["triton"].process.kill()  # it waits on kept-alive connections otherwise
            servers["trt"].process.terminate()
            for served in servers.values():
                served.process.wait(30)


def rounds_in_turn(rounds: int) -> Iterator[tuple[int, Sequence[str]]]:
    """Each round's index and the order the servers are measured in (alternating, so that whatever
    being measured first costs falls on both)."""
    for index in range(rounds):
        yield index, SERVERS if index % 2 == 0 else SERVERS[::-1]


def ratio_table(
    title: str, rows: list[dict[str, object]], groups: dict[str, list[str]], group_key: str = ""
) -> tuple[Table, list[dict[str, object]]]:
    """A table of trt / Triton per round for each measure (``groups``: a group's value of
    ``group_key`` to its measures; "" and no key for one group), and the same as a summary."""
    table = Table(title=title)
    for column in (
        "group",
        "measure",
        "Triton (median)",
        "trt (median)",
        "trt / Triton, each round",
        "median",
    ):
        table.add_column(column, justify="left" if column in ("group", "measure") else "right")
    summary: list[dict[str, object]] = []
    for group, measures in groups.items():
        mine = [r for r in rows if not group_key or r[group_key] == group]
        for measure in measures:
            ours = [float(r[measure]) for r in mine if r["server"] == "trt"]
            theirs = [float(r[measure]) for r in mine if r["server"] == "triton"]
            ratios = [a / b if b else float("nan") for a, b in zip(ours, theirs, strict=True)]
            summary.append(
                {"group": group, "measure": measure, "ratios": ratios, "median": statistics.median(ratios)}
            )
            table.add_row(
                group, measure, f"{statistics.median(theirs):,.1f}", f"{statistics.median(ours):,.1f}",
                " / ".join(f"{r:.2f}" for r in ratios), f"{statistics.median(ratios):.2f}",
            )  # fmt: skip
    return table, summary


def write_results(
    output: Path, rows: list[dict[str, object]], summary: list[dict[str, object]], console: Console
) -> None:
    """Every run and the per-measure summary as ``<output>.json``, and say where."""
    path = output.with_suffix(".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"runs": rows, "summary": summary}, indent=2))
    console.print(f"wrote {path}")

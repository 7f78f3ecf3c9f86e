"""perf_analyzer's ``-f`` CSV, column for column (report_writer.cc), so existing dashboards read it.

Times are integer microseconds; rows are sorted by increasing Inferences/Second, as perf_analyzer does."""

from __future__ import annotations

import csv
from pathlib import Path

from trt.perf.measurement import LevelResult
from trt.perf.options import LoadKind
from trt.perf.results import ProfileReport


def _number(value: float) -> str:
    """A double as C++ ``ostream <<`` prints it (6 significant digits)."""
    return format(value, "g")


def header(report: ProfileReport, verbose: bool = False) -> list[str]:
    columns = [report.level_name, "Inferences/Second"]
    if report.decoupled:
        columns.append("Response Throughput")
    columns.append("Client Send")
    columns += [
        "Network+Server Send/Recv",
        "Server Queue",
        "Server Compute Input",
        "Server Compute Infer",
        "Server Compute Output",
    ]
    if report.response_cache:
        columns += ["Server Cache Hit", "Server Cache Miss"]
    columns.append("Client Recv")
    columns += (
        [f"p{p} latency" for p in sorted(report.results[0].latency.percentiles)] if report.results else []
    )
    if verbose:
        if report.percentile is None:
            columns.append("Avg latency")
        columns += ["request/response", "response wait"]
    return columns


def row(report: ProfileReport, result: LevelResult, verbose: bool = False) -> list[str]:
    if report.mode is LoadKind.CONCURRENCY:
        level = str(int(result.level))
    elif report.mode is LoadKind.REQUEST_RATE:
        level = _number(result.level)
    else:
        level = _number(round(result.request_throughput, 2))
    cells = [level, _number(result.throughput)]
    if report.decoupled:
        cells.append(_number(result.response_throughput))
    send, recv = result.client_send_us, result.client_recv_us
    cells.append(str(int(send)))
    server = result.server
    queue = server.queue_us if server else 0.0
    compute = (
        (server.compute_input_us + server.compute_infer_us + server.compute_output_us) if server else 0.0
    )
    cache = (server.cache_hit_us + server.cache_miss_us) if server else 0.0
    network = max(0.0, (result.latency.avg_us - send - recv) - (queue + compute + cache))
    cells += [
        str(int(network)),
        str(int(queue)),
        str(int(server.compute_input_us if server else 0)),
        str(int(server.compute_infer_us if server else 0)),
        str(int(server.compute_output_us if server else 0)),
    ]
    if report.response_cache:
        cells += [
            str(int(server.cache_hit_us if server else 0)),
            str(int(server.cache_miss_us if server else 0)),
        ]
    cells.append(str(int(recv)))
    cells += [str(result.latency.percentiles[p]) for p in sorted(result.latency.percentiles)]
    if verbose:
        if report.percentile is None:
            cells.append(str(int(result.latency.avg_us)))
        cells += [str(int(send + recv)), str(int(max(0.0, result.latency.avg_us - send - recv)))]
    return cells


def write_csv(report: ProfileReport, path: Path, verbose: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header(report, verbose))
        for result in sorted(report.results, key=lambda r: r.throughput):
            writer.writerow(row(report, result, verbose))

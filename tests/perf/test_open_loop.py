"""``trt perf`` in open loop: fixed request rates (constant, Poisson) and a custom interval file."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.perf.perf_support import FAST, run_perf
from tests.support import ServerProcess


def test_constant_rates_are_held(perf_server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "rate.csv"
    run = run_perf(
        "-m",
        "simple",
        "-u",
        perf_server.http_url,
        "--async",
        "--request-rate-range",
        "100:300:200",
        "-f",
        str(out),
        "--json",
        *FAST,
    )
    assert run.returncode == 0, run
    results = run.report["results"]
    assert run.report["mode"] == "request_rate" and [r["level"] for r in results] == [100, 300]
    for result in results:
        assert result["request_throughput"] == pytest.approx(result["level"], rel=0.1)
        assert result["error_count"] == 0
    rows = list(csv.reader(out.open()))
    assert rows[0][:2] == ["Request Rate", "Inferences/Second"]
    assert [r[0] for r in rows[1:]] == ["100", "300"]


def test_poisson_arrivals_with_blocking_clients(perf_server: ServerProcess) -> None:
    run = run_perf(
        "-m",
        "simple",
        "-u",
        perf_server.grpc_url,
        "-i",
        "grpc",
        "--sync",
        "--request-rate-range",
        "200",
        "--request-distribution",
        "poisson",
        "--json",
        *FAST,
    )
    assert run.returncode == 0, run
    (result,) = run.report["results"]
    assert result["request_throughput"] == pytest.approx(200, rel=0.3)


def test_custom_intervals(perf_server: ServerProcess, tmp_path: Path) -> None:
    intervals = tmp_path / "intervals.txt"
    intervals.write_text("2000\n6000\n")  # 4 ms on average: 250 requests/s
    run = run_perf(
        "-m", "simple", "-u", perf_server.http_url, "--request-intervals", str(intervals), "--json", *FAST
    )
    assert run.returncode == 0, run
    (result,) = run.report["results"]
    assert run.report["mode"] == "custom_intervals"
    assert result["request_throughput"] == pytest.approx(250, rel=0.15)

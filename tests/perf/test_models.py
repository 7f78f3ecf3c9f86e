"""``trt perf`` on models that are not plain tensors in, tensors out: strings, sequences, decoupled."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.perf.perf_support import FAST, run_perf
from tests.support import ServerProcess


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_string_model(perf_server: ServerProcess, protocol: str) -> None:
    url = perf_server.http_url if protocol == "http" else perf_server.grpc_url
    run = run_perf(
        "-m",
        "strings",
        "-u",
        url,
        "-i",
        protocol,
        "--shape",
        "INPUT0:4",
        "--string-length",
        "16",
        "-b",
        "2",
        "--concurrency",
        "2",
        "--json",
        *FAST,
    )
    assert run.returncode == 0, run
    (result,) = run.report["results"]
    assert result["error_count"] == 0 and result["request_count"] > 20
    assert result["server"]["batch_sizes"] == {"2": result["server"]["execution_count"]}


@pytest.mark.parametrize(("protocol", "mode"), [("http", "--async"), ("grpc", "--sync"), ("grpc", "--async")])
def test_sequence_model(perf_server: ServerProcess, protocol: str, mode: str) -> None:
    # The server refuses a request of an unknown sequence without sequence_start, or one without an id:
    # any mistake in what trt perf sends shows up as errors here.
    url = perf_server.http_url if protocol == "http" else perf_server.grpc_url
    run = run_perf(
        "-m",
        "accumulate",
        "-u",
        url,
        "-i",
        protocol,
        mode,
        "--concurrency",
        "1:2",
        "--sequence-length",
        "5",
        "--json",
        *FAST,
    )
    assert run.returncode == 0, run
    assert run.report["sequence_model"]
    for result in run.report["results"]:
        assert result["error_count"] == 0, result["error_samples"]
        # About one sequence ends per five requests (lengths 4 to 6).
        assert result["sequences_completed"] == pytest.approx(result["request_count"] / 5, rel=0.35, abs=2)


def test_decoupled_model_counts_every_response(perf_server: ServerProcess, tmp_path: Path) -> None:
    data = tmp_path / "three.json"
    data.write_bytes(orjson.dumps({"data": [{"IN": [3]}]}))  # three responses per request
    run = run_perf(
        "-m",
        "square",
        "-u",
        perf_server.grpc_url,
        "-i",
        "grpc",
        "--streaming",
        "--async",
        "--input-data",
        str(data),
        "--concurrency",
        "2",
        "--json",
        *FAST,
    )
    assert run.returncode == 0, run
    (result,) = run.report["results"]
    assert result["error_count"] == 0
    assert result["response_throughput"] == pytest.approx(3 * result["request_throughput"], rel=0.05)
    run = run_perf("-m", "square", "-u", perf_server.grpc_url, "-i", "grpc")
    assert run.returncode == 2 and "decoupled: measure it with -i grpc --streaming" in run.stderr, run

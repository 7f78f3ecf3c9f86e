"""``trt perf`` in closed loop against ``trt serve``: both protocols, sync and async, and its reports."""

from __future__ import annotations

import csv
from pathlib import Path

import orjson
import psutil
import pytest

from tests.perf.perf_support import FAST, run_perf
from tests.support import ServerProcess
from trt import cuda_runtime

CSV_HEADER = [
    "Concurrency",
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
]


def test_sweep_writes_csv_json_and_plot(perf_server: ServerProcess, tmp_path: Path) -> None:
    out, plot = tmp_path / "results.csv", tmp_path / "curve.png"
    run = run_perf(
        "-m",
        "simple",
        "-u",
        perf_server.http_url,
        "--concurrency",
        "1:4",
        "--async",
        "-f",
        str(out),
        "--plot-file",
        str(plot),
        "--json",
        *FAST,
    )
    assert run.returncode == 0, run
    report = run.report
    assert [r["level"] for r in report["results"]] == [1, 2, 4]  # 1:4 doubles
    assert (report["protocol"], report["async"], report["input_format"], report["model_source"]) == (
        "http",
        True,
        "binary",
        "config",
    )
    for result in report["results"]:
        latency = result["latency_us"]
        assert result["error_count"] == 0 and result["request_count"] > 50
        assert (
            latency["min"]
            <= latency["p50"]
            <= latency["p90"]
            <= latency["p95"]
            <= latency["p99"]
            <= latency["max"]
        )
        assert result["throughput"] == pytest.approx(
            result["request_count"] / (0.24 * result_windows(result)), rel=0.3
        )
        server = result["server"]
        # The server saw what the client counted (give or take requests straddling window edges).
        assert server["success_count"] == pytest.approx(result["request_count"], rel=0.1, abs=5)
        assert server["batch_sizes"] and server["compute_infer_us"] > 0
        assert result["client"]["cpu_us_per_request"] > 0
    rows = list(csv.reader(out.open()))
    assert rows[0] == CSV_HEADER
    assert sorted(int(r[0]) for r in rows[1:]) == [1, 2, 4]
    throughputs = [float(r[1]) for r in rows[1:]]
    assert throughputs == sorted(throughputs)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def result_windows(result: dict[str, object]) -> int:
    trials = result["trials"]
    assert isinstance(trials, int)
    return min(3, trials)


@pytest.mark.parametrize(("protocol", "mode"), [("http", "--sync"), ("grpc", "--sync"), ("grpc", "--async")])
def test_protocols_and_client_modes(perf_server: ServerProcess, protocol: str, mode: str) -> None:
    url = perf_server.http_url if protocol == "http" else perf_server.grpc_url
    run = run_perf(
        "-m", "simple", "-u", url, "-i", protocol, mode, "--concurrency-range", "2", "--json", *FAST
    )
    assert run.returncode == 0, run
    (result,) = run.report["results"]
    assert run.report["async"] is (mode == "--async")
    assert result["level"] == 2 and result["error_count"] == 0 and result["request_count"] > 20
    assert result["server"]["success_count"] > 0


def test_grpc_streaming(perf_server: ServerProcess) -> None:
    run = run_perf(
        "-m",
        "simple",
        "-u",
        perf_server.grpc_url,
        "-i",
        "grpc",
        "--streaming",
        "--async",
        "--concurrency",
        "2",
        "--json",
        *FAST,
    )
    assert run.returncode == 0, run
    (result,) = run.report["results"]
    assert run.report["streaming"] and result["error_count"] == 0 and result["request_count"] > 20


def test_batches_json_tensors_input_file_and_count_windows(
    perf_server: ServerProcess, tmp_path: Path
) -> None:
    data = tmp_path / "data.json"
    data.write_bytes(orjson.dumps({"data": [{"INPUT0": [i] * 16, "INPUT1": [1] * 16} for i in range(3)]}))
    run = run_perf(
        "-m",
        "simple",
        "-u",
        perf_server.http_url,
        "-b",
        "4",
        "--input-data",
        str(data),
        "--input-tensor-format",
        "json",
        "--output-tensor-format",
        "json",
        "--measurement-request-count",
        "60",
        "--concurrency",
        "2",
        "--json",
        *FAST,
    )
    assert run.returncode == 0, run
    (result,) = run.report["results"]
    assert result["throughput"] == pytest.approx(4 * result["request_throughput"], rel=1e-3)
    assert run.report["input_format"] == "json"
    assert result["server"]["batch_sizes"] == {"4": result["server"]["execution_count"]}
    assert result["request_count"] >= 3 * 60  # three count windows of at least 60 requests


def test_system_shared_memory_inputs(perf_server: ServerProcess) -> None:
    run = run_perf(
        "-m",
        "simple",
        "-u",
        perf_server.http_url,
        "--shared-memory",
        "system",
        "--concurrency",
        "2",
        "--json",
        *FAST,
    )
    assert run.returncode == 0, run
    assert run.report["results"][0]["error_count"] == 0
    # Another test's run may hold regions now: only those of runs that have ended would be left behind.
    regions = Path("/dev/shm").glob("trt_perf_*")
    assert not [p for p in regions if not psutil.pid_exists(int(p.name.split("_")[2]))]


def test_cuda_shared_memory_without_a_gpu_is_an_option_error(perf_server: ServerProcess) -> None:
    try:
        cuda_runtime.device_count()
    except cuda_runtime.CudaUnavailable:
        pass
    else:
        pytest.skip("this machine has a GPU: test_cuda_shared_memory_gpu.py covers it")
    run = run_perf("-m", "simple", "-u", perf_server.http_url, "--shared-memory", "cuda", *FAST)
    assert run.returncode == 2, run
    assert "--shared-memory cuda needs a CUDA GPU on this machine" in run.stderr, run
    assert not list(Path("/dev/shm").glob("trt_perf_*cuda*"))


def test_unstable_measurements_are_reported_and_exit_3_only_when_required(perf_server: ServerProcess) -> None:
    args = [
        "-m",
        "simple",
        "-u",
        perf_server.http_url,
        "-p",
        "150",
        "--warmup",
        "50",
        "-s",
        "0.0001",
        "-r",
        "3",
    ]
    run = run_perf(*args, "--json")
    assert run.returncode == 0, run
    assert "Failed to obtain stable measurement within 3 measurement windows for concurrency 1" in run.stderr
    assert "unstable: concurrency 1 did not settle within -s 0.0001%" in run.stderr
    assert run.report["stable"] is False and run.report["results"][0]["stable"] is False
    assert run.report["results"][0]["request_count"] > 0  # reported all the same
    strict = run_perf(*args, "--require-stable")
    assert strict.returncode == 3, strict
    assert "(--require-stable: exit 3)" in strict.stderr
    assert "Concurrency: 1, throughput:" in strict.stdout


def test_errors_name_the_problem(perf_server: ServerProcess) -> None:
    run = run_perf("-m", "no_such_model", "-u", perf_server.http_url)
    assert run.returncode == 4 and "model 'no_such_model' is not available" in run.stderr, run
    run = run_perf("-m", "strings", "-u", perf_server.http_url)
    assert run.returncode == 2 and "pass --shape INPUT0:4" in run.stderr, run
    run = run_perf("-m", "simple", "-u", "127.0.0.1:9", *FAST)
    assert run.returncode == 4 and "cannot reach the server at 127.0.0.1:9" in run.stderr, run
    run = run_perf("-m", "simple", "--concurrency", "1:4", "--request-rate-range", "10")
    assert run.returncode == 2 and "give one" in run.stderr, run

"""``trt perf --shared-memory cuda``: inputs and outputs in GPU memory the run allocates, as
perf_analyzer's ``--shared-memory cuda``. Skipped where CUDA sees no GPU (CI); ``scripts/gpu_check.sh``
runs these on a GPU host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import tritonclient.http as httpclient

from tests.perf.perf_support import FAST, run_perf
from tests.support import ROOT, ServerProcess, wait_until
from trt import cuda_runtime

try:
    cuda_runtime.device_count()
except cuda_runtime.CudaUnavailable as exc:
    pytest.skip(f"needs a CUDA GPU ({exc})", allow_module_level=True)


def _pid(name: str) -> int:
    return int(name.split("_")[2])


def _living() -> set[int]:
    return set(psutil.pids())


def _cuda_regions(server: ServerProcess) -> set[str]:
    client = httpclient.InferenceServerClient(server.http_url)
    return {region["name"] for region in client.get_cuda_shared_memory_status()}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_run_through_cuda_shared_memory_answers_every_request_and_leaves_nothing(
    perf_server: ServerProcess, protocol: str
) -> None:
    url = perf_server.http_url if protocol == "http" else perf_server.grpc_url
    run = run_perf("-m", "simple", "-u", url, "-i", protocol, "--shared-memory", "cuda",
                   "--concurrency", "2", "--json", *FAST)  # fmt: skip
    assert run.returncode == 0, run
    (result,) = run.report["results"]
    assert result["error_count"] == 0 and result["request_count"] > 0
    assert not {name for name in _cuda_regions(perf_server) if name.startswith("trt_perf_")}
    assert not [p for p in Path("/dev/shm").glob("trt_perf_*_cuda_*") if _pid(p.name) not in _living()]


def test_the_cuda_regions_a_killed_run_left_registered_are_released_by_the_next_run(
    perf_server: ServerProcess, tmp_path: Path
) -> None:
    killed = subprocess.Popen(
        [sys.executable, "-m", "trt", "perf", "-m", "simple", "-u", perf_server.http_url, "--shared-memory",
         "cuda", "--concurrency-range", "2", "--measurement-interval", "60000"],
        cwd=ROOT, stdout=(tmp_path / "killed.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        regions = {f"trt_perf_{killed.pid}_cuda_in", f"trt_perf_{killed.pid}_cuda_out"}
        wait_until(lambda: regions <= _cuda_regions(perf_server), 60)
        killed.kill()
        killed.wait(timeout=30)
        assert regions <= _cuda_regions(perf_server)
        run = run_perf("-m", "simple", "-u", perf_server.http_url, "--shared-memory", "cuda",
                       "--concurrency", "1", *FAST)  # fmt: skip
        assert run.returncode == 0, run
        assert "released 2 shared-memory region(s)" in run.stderr, run
        assert not regions & _cuda_regions(perf_server)
        assert not [name for name in regions if (Path("/dev/shm") / name).exists()]  # their lock files
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait(timeout=30)

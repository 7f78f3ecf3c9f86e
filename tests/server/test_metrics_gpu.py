"""Triton's per-GPU gauges (`nv_gpu_*`, `nv_energy_consumption`) read from NVML, checked against NVML.

Skipped where NVML (nvidia-ml-py) finds no GPU, as on CI; `scripts/gpu_check.sh` runs these on a GPU host.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import ServerProcess, write_simple
from trt.server.core.devices import gpu_count

if gpu_count() == 0:
    pytest.skip("needs a GPU that NVML can see", allow_module_level=True)

import pynvml  # present wherever gpu_count() saw a GPU

GPU_FAMILIES = (
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
)


def _uuids() -> list[str]:
    pynvml.nvmlInit()
    uuids = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
        uuids.append(uuid.decode() if isinstance(uuid, bytes) else uuid)
    return uuids


def _scrape(server: ServerProcess) -> dict[str, dict[str, float]]:
    """{family: {gpu_uuid: value}} for the GPU families."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    values: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name in GPU_FAMILIES:
            values[family.name] = {s.labels["gpu_uuid"]: s.value for s in family.samples}
    return values


def _serve(tmp: Path, *flags: str) -> ServerProcess:
    repo = tmp / "repo"
    repo.mkdir(exist_ok=True)
    if not (repo / "simple").exists():
        write_simple(repo)
    return ServerProcess([repo], list(flags)).start(tmp)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = _serve(tmp_path_factory.mktemp("gpu_metrics"))
    yield proc
    proc.stop()


def test_every_gpu_has_each_family_labelled_by_its_uuid(server: ServerProcess) -> None:
    values = _scrape(server)
    for family in GPU_FAMILIES:
        assert sorted(values[family]) == sorted(_uuids()), family


def test_memory_and_power_match_what_nvml_reports(server: ServerProcess) -> None:
    values = _scrape(server)
    for index, uuid in enumerate(_uuids()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        assert values["nv_gpu_memory_total_bytes"][uuid] == pynvml.nvmlDeviceGetMemoryInfo(handle).total
        assert 0 < values["nv_gpu_memory_used_bytes"][uuid] <= values["nv_gpu_memory_total_bytes"][uuid]
        assert 0 <= values["nv_gpu_utilization"][uuid] <= 1
        limit = pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0
        assert values["nv_gpu_power_limit"][uuid] == limit
        assert 0 < values["nv_gpu_power_usage"][uuid] <= limit * 1.5  # a reading may briefly overshoot


def test_energy_counts_from_the_servers_start_not_the_drivers(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = _serve(tmp_path)
    try:
        first = _scrape(proc)["nv_energy_consumption"]
        time.sleep(1.0)
        second = _scrape(proc)["nv_energy_consumption"]
        alive = time.monotonic() - started
    finally:
        proc.stop()
    for index, uuid in enumerate(_uuids()):
        limit = pynvml.nvmlDeviceGetPowerManagementLimit(pynvml.nvmlDeviceGetHandleByIndex(index)) / 1000.0
        # No GPU can have spent more than its power limit for as long as the server has lived.
        assert 0 <= first[uuid] <= second[uuid] <= limit * 1.5 * alive
        assert second[uuid] > first[uuid]  # a powered GPU draws something every second


def test_allow_gpu_metrics_false_leaves_the_gpu_families_out(tmp_path: Path) -> None:
    proc = _serve(tmp_path, "--allow-gpu-metrics=false")
    try:
        assert _scrape(proc) == {}
    finally:
        proc.stop()

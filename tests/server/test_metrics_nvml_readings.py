"""What ``GpuMetrics`` makes of NVML's readings where a GPU cannot give one, and how it counts energy.

A real GPU (tests/server/test_metrics_gpu.py, run on an H100) gives every reading; the cases here are
the ones no GPU at hand can be made to produce on demand: a reading the device does not support (as
some GPUs and virtual machines answer for power or energy) and an energy counter that started long
before the server. NVML itself is stood in for by a small module with its call names; the collector
is the real one.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from trt.server.metrics import GpuMetrics


class _NotSupported(Exception):
    pass


class _FakeNvml(types.ModuleType):
    """Two GPUs: the first reports everything, the second neither power nor energy."""

    NVMLError = _NotSupported

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.energy_mj = [5_000_000_000, 0]  # the first GPU's counter ran long before the server

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(total=80 << 30, used=(handle + 1) << 30)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return types.SimpleNamespace(gpu=40)

    def _first_only(self, handle: int, value: int) -> int:
        if handle:
            raise _NotSupported("Not Supported")
        return value

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._first_only(handle, 70_000)

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        return self._first_only(handle, 700_000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return self._first_only(handle, self.energy_mj[handle])


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> _FakeNvml:
    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def _samples(metrics: GpuMetrics) -> dict[str, dict[str, float]]:
    """{family: {gpu_uuid: value}}, read from the text each family renders for the metrics port."""
    families: dict[str, dict[str, float]] = {}
    for family in metrics.collect():
        values = families.setdefault(family.name, {})
        for line in family.render().splitlines():
            if not line.startswith("#"):
                labels, _, value = line.rpartition(" ")
                values[labels.split('gpu_uuid="')[1].rstrip('"}')] = float(value)
    return families


def test_a_reading_a_gpu_does_not_support_leaves_out_that_gauge_for_that_gpu_alone(nvml: _FakeNvml) -> None:
    samples = _samples(GpuMetrics())
    assert samples["nv_gpu_memory_used_bytes"] == {"GPU-0": 1 << 30, "GPU-1": 2 << 30}
    assert samples["nv_gpu_utilization"] == {"GPU-0": 0.4, "GPU-1": 0.4}
    assert samples["nv_gpu_power_usage"] == {"GPU-0": 70.0}
    assert samples["nv_gpu_power_limit"] == {"GPU-0": 700.0}
    assert "GPU-1" not in samples["nv_energy_consumption"]


def test_energy_counts_joules_since_the_server_started(nvml: _FakeNvml) -> None:
    metrics = GpuMetrics()
    assert _samples(metrics)["nv_energy_consumption"] == {"GPU-0": 0.0}
    nvml.energy_mj[0] += 1_500
    assert _samples(metrics)["nv_energy_consumption"] == {"GPU-0": 1.5}

"""``--shared-memory cuda``'s bookkeeping that needs no GPU: how a later run tells a region of a run that
ended from one of a run still going (the GPU paths are in test_cuda_shared_memory_gpu.py)."""

from __future__ import annotations

import os
from typing import Any

from trt.perf.cuda_shared_memory import CudaShmRegions
from trt.perf.encoding import ShmOutputs
from trt.perf.shared_memory import SHM_FOLDER, abandoned


def test_a_cuda_region_is_abandoned_once_no_run_holds_its_file() -> None:
    name = f"trt_perf_{os.getpid()}_cuda_in"
    control: Any = None  # hold() talks to no server
    regions = CudaShmRegions(control, [], ShmOutputs(f"trt_perf_{os.getpid()}_cuda_out", 1))
    regions.hold(name)
    try:
        assert not abandoned(name)  # its run holds it
    finally:
        for _, lock in regions._locks:
            os.close(lock)
    try:
        assert abandoned(name)  # the file is left, nobody holds it: a run killed outright
    finally:
        (SHM_FOLDER / name).unlink()
    assert not abandoned(name)  # gone, and the process of its number (this one) lives

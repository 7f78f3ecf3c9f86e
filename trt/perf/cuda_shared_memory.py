"""``--shared-memory cuda``: every request's inputs copied once into GPU memory this process allocates,
outputs into a second allocation; the server opens both from their CUDA IPC handles, as it does for
perf_analyzer's ``--shared-memory cuda``. The server runs on this machine, with ``--allow-client-shm``.

GPU memory dies with the process that allocated it, but a server keeps what it opened mapped until the
region is unregistered: a run killed outright leaves its regions registered. As with system shared
memory, each run holds a lock on a file of each region's name in /dev/shm while it lives (a process id
alone would not do: a run in another container may not be visible from this one), and the next run with
CUDA shared memory unregisters the regions whose file nobody holds (``release_abandoned_cuda_regions``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass, field

import numpy as np

from trt import cuda_runtime
from trt.perf.control import ControlClient
from trt.perf.encoding import ShmOutputs, ShmSlot
from trt.perf.errors import OptionError
from trt.perf.input_data import InputData
from trt.perf.model_info import ModelInfo
from trt.perf.shared_memory import OURS_CUDA, SHM_FOLDER, locked_file, release_where_abandoned
from trt.perf.tensors import to_wire

DEVICE_ID = 0  # perf_analyzer's too
_IPC_HANDLE_SIZE = 64


@dataclass
class CudaShmRegions:
    """Owns the allocations: registers them with the server and, on close, unregisters and frees them."""

    control: ControlClient
    input_slots: list[list[dict[str, ShmSlot]]]  # [stream][request] -> input name -> slot
    outputs: ShmOutputs
    _allocations: list[tuple[str, int]] = field(default_factory=list)  # region name, device pointer
    _locks: list[tuple[str, int]] = field(default_factory=list)  # region name, its locked file

    def close(self) -> None:
        cudart = cuda_runtime.runtime()
        for name, pointer in self._allocations:
            self.control.unregister_cuda_shm(name)
            with contextlib.suppress(cuda_runtime.CudaCallFailed):
                cuda_runtime.checked(cudart.cudaFree(pointer), "cudaFree")
        self._allocations = []
        for name, lock in self._locks:
            with contextlib.suppress(FileNotFoundError):
                (SHM_FOLDER / name).unlink()
            os.close(lock)
        self._locks = []

    def hold(self, name: str) -> None:
        """Make and lock a file of region ``name``'s name for as long as this run lives."""
        self._locks.append((name, locked_file(name, create=True)))

    def allocate(self, name: str, content: bytes | bytearray, byte_size: int) -> None:
        """GPU memory of ``byte_size`` bytes starting with ``content``, registered as region ``name``."""
        cudart = cuda_runtime.runtime()
        pointer = int(cuda_runtime.checked(cudart.cudaMalloc(byte_size), "cudaMalloc"))
        self._allocations.append((name, pointer))
        if content:
            host = np.frombuffer(content, dtype=np.uint8)
            to_device = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
            cuda_runtime.checked(
                cudart.cudaMemcpy(pointer, host.ctypes.data, host.size, to_device), "cudaMemcpy"
            )
        handle = cuda_runtime.checked(cudart.cudaIpcGetMemHandle(pointer), "cudaIpcGetMemHandle")
        raw_handle = ctypes.string_at(handle.getPtr(), _IPC_HANDLE_SIZE)
        self.hold(name)
        self.control.register_cuda_shm(name, raw_handle, DEVICE_ID, byte_size)


def release_abandoned_cuda_regions(control: ControlClient) -> list[str]:
    """Unregister the CUDA regions of trt perf runs that ended without doing so; their names."""
    return release_where_abandoned(control.cuda_shm_regions(), OURS_CUDA, control.unregister_cuda_shm)


def create_cuda_regions(
    control: ControlClient, info: ModelInfo, data: InputData, output_size: int
) -> CudaShmRegions:
    try:
        cuda_runtime.device_count()
        cuda_runtime.checked(cuda_runtime.runtime().cudaSetDevice(DEVICE_ID), "cudaSetDevice")
    except (cuda_runtime.CudaUnavailable, cuda_runtime.CudaCallFailed) as exc:
        raise OptionError(f"--shared-memory cuda needs a CUDA GPU on this machine: {exc}") from None
    tag = f"trt_perf_{os.getpid()}_cuda"
    content = bytearray()
    regions = CudaShmRegions(control, [], ShmOutputs(f"{tag}_out", output_size))
    for stream in data.streams:
        slots = []
        for request in stream:
            entry = {}
            for spec in info.inputs:
                blob = to_wire(request.arrays[spec.name], spec.datatype)
                entry[spec.name] = ShmSlot(f"{tag}_in", len(content), len(blob))
                content += blob
            slots.append(entry)
        regions.input_slots.append(slots)
    try:
        regions.allocate(f"{tag}_in", content, max(len(content), 1))
        regions.allocate(f"{tag}_out", b"", max(1, output_size * len(info.outputs)))
    except cuda_runtime.CudaCallFailed as exc:
        regions.close()
        raise OptionError(f"--shared-memory cuda: {exc}") from None
    except BaseException:
        regions.close()
        raise
    return regions

"""A client's GPU allocation, opened from the ``cudaIpcMemHandle_t`` it registered as CUDA shared memory.

A client (``tritonclient.utils.cuda_shared_memory``) allocates GPU memory with ``cudaMalloc``, takes its
IPC handle and registers the handle's 64 bytes with a device id and a byte size. The server opens the
handle, which maps the whole allocation into this process, and checks the registered size against the
allocation's own (as Triton does, so a request can never reach past what the client allocated).

Tensors cross by copy through host memory (``cudaMemcpy``, synchronous, on the calling thread): the
core hands backends host arrays. A model on the GPU therefore gets its inputs copied back to a GPU by its
backend, where Triton would hand a GPU backend the device pointer; that is a cost, not a difference
clients can see.
"""

from __future__ import annotations

import ctypes

import numpy as np

from trt import cuda_runtime
from trt.cuda_runtime import CudaCallFailed

IPC_HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t), CUDA_IPC_HANDLE_SIZE
_LAZY_ENABLE_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess, the flag Triton opens handles with


class CudaIpcMemory:
    """One opened allocation: ``size`` bytes at ``pointer`` on GPU ``device_id``, until ``close``."""

    def __init__(self, pointer: int, size: int, device_id: int) -> None:
        self.pointer = pointer
        self.size = size
        self.device_id = device_id

    @classmethod
    def open(cls, raw_handle: bytes, device_id: int) -> CudaIpcMemory:
        """Open a handle another process made (CudaCallFailed if CUDA refuses it).

        The caller has checked the handle's length and the device id against ``device_count()``.
        """
        cudart = cuda_runtime.runtime()
        handle = cudart.cudaIpcMemHandle_t()
        # cuda-python 13 keeps the handle's bytes out of reach but for its address (tritonclient reads
        # them the same way).
        ctypes.memmove(handle.getPtr(), raw_handle, IPC_HANDLE_SIZE)
        cuda_runtime.checked(cudart.cudaSetDevice(device_id), "cudaSetDevice")
        pointer = int(
            cuda_runtime.checked(
                cudart.cudaIpcOpenMemHandle(handle, _LAZY_ENABLE_PEER_ACCESS), "cudaIpcOpenMemHandle"
            )
        )
        memory = cls(pointer, 0, device_id)
        try:
            cuda_driver = cuda_runtime.driver()
            _, size = cuda_runtime.checked(
                cuda_driver.cuMemGetAddressRange(cuda_driver.CUdeviceptr(pointer)), "cuMemGetAddressRange"
            )
            memory.size = int(size)
        except BaseException:
            memory.close()
            raise
        return memory

    def read(self, offset: int, byte_size: int) -> memoryview:
        """A host copy of ``byte_size`` bytes at ``offset`` (the caller has checked the window)."""
        host = np.empty(byte_size, dtype=np.uint8)
        if byte_size:
            self._copy(host.ctypes.data, self.pointer + offset, byte_size)
        return host.data.toreadonly()

    def write(self, offset: int, data: bytes | memoryview) -> None:
        """Copy ``data`` to ``offset`` (the caller has checked the window)."""
        host = np.frombuffer(data, dtype=np.uint8)
        if host.size:
            self._copy(self.pointer + offset, host.ctypes.data, host.size)

    def close(self) -> None:
        """Unmap the allocation; the client still owns (and frees) it."""
        cudart = cuda_runtime.runtime()
        cuda_runtime.checked(cudart.cudaSetDevice(self.device_id), "cudaSetDevice")
        cuda_runtime.checked(cudart.cudaIpcCloseMemHandle(self.pointer), "cudaIpcCloseMemHandle")

    def _copy(self, destination: int, source: int, byte_size: int) -> None:
        cudart = cuda_runtime.runtime()
        # The calling thread's current device may be another model's: set it for every copy.
        cuda_runtime.checked(cudart.cudaSetDevice(self.device_id), "cudaSetDevice")
        default = cudart.cudaMemcpyKind.cudaMemcpyDefault  # unified addressing tells host from device
        cuda_runtime.checked(cudart.cudaMemcpy(destination, source, byte_size, default), "cudaMemcpy")


__all__ = ["IPC_HANDLE_SIZE", "CudaCallFailed", "CudaIpcMemory"]

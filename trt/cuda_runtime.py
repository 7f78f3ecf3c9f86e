"""The CUDA runtime through cuda-python, for the parts of trt that touch GPU memory themselves (the
server's CUDA shared memory, trt perf's).

Imported on first use, never at start-up: cuda-python is an extra (``gpu``, ``tensorrt``), and a
machine without a GPU or a driver serves everything else. cuda-python returns ``(error, *values)``
from every call; ``checked`` turns an error into an exception that names the call.
"""

from __future__ import annotations

from typing import Any


class CudaUnavailable(Exception):
    """No CUDA here: cuda-python is not installed, or it finds no driver or no GPU."""


class CudaCallFailed(Exception):
    """A CUDA call returned an error; the message names the call and CUDA's own words."""


def runtime() -> Any:
    """cuda-python's runtime module (``cudart``)."""
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # type: ignore[no-redef,unused-ignore]  # older cuda-python 12
        except ImportError:
            raise CudaUnavailable("cuda-python is not installed (pip install 'trt-serve[gpu]')") from None
    return cudart


def driver() -> Any:
    """cuda-python's driver module, for the few things the runtime does not tell."""
    try:
        from cuda.bindings import driver as cuda_driver
    except ImportError:
        from cuda import cuda as cuda_driver  # type: ignore[no-redef,unused-ignore]  # older cuda-python 12
    return cuda_driver


def checked(result: tuple[Any, ...], call: str) -> Any:
    """The value of a cuda-python call's ``(error, *values)``, or CudaCallFailed naming the call."""
    error, *values = result
    if int(error) != 0:  # cudaSuccess and CUDA_SUCCESS are both 0
        raise CudaCallFailed(f"CUDA {call} failed: {getattr(error, 'name', error)}: {_error_text(error)}")
    return values[0] if len(values) == 1 else (None if not values else tuple(values))


def device_count() -> int:
    """The GPUs CUDA can use here; CudaUnavailable (with CUDA's reason) when there are none."""
    cudart = runtime()
    try:
        count = int(checked(cudart.cudaGetDeviceCount(), "cudaGetDeviceCount"))
    except CudaCallFailed as exc:
        raise CudaUnavailable(str(exc)) from None
    if count == 0:
        raise CudaUnavailable("CUDA sees no GPU")
    return count


def _error_text(error: Any) -> str:
    cudart = runtime()
    try:
        if isinstance(error, cudart.cudaError_t):
            _, text = cudart.cudaGetErrorString(error)
        else:
            _, text = driver().cuGetErrorString(error)
    except Exception:
        return "no description"
    return text.decode() if isinstance(text, bytes) else str(text)

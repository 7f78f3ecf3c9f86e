"""What compute the machine has: CPU cores and, through nvidia-ml-py when installed, GPUs."""

from __future__ import annotations

import functools
import logging
import os

logger = logging.getLogger("trt.devices")


def cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@functools.cache
def gpu_count() -> int:
    """Number of NVIDIA GPUs visible through NVML; 0 without a GPU or without nvidia-ml-py."""
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as exc:
        logger.debug("NVML unavailable: %s", exc)
        return 0

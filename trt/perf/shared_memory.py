"""``--shared-memory system``: every request's inputs written once into a POSIX region the server maps,
outputs into a second region; requests then carry only region names and offsets.

A ``trt perf`` killed outright (SIGKILL, the OOM killer, a CI timeout) cannot unregister its regions:
the server kept them mapped, their memory held until it restarted. So each run holds a lock on its
regions' files while it lives, and a run with shared memory first releases the regions of runs that
no longer do (``release_abandoned_regions``): named as trt perf names them, and whose file is
unlocked, or gone (Python's resource tracker unlinks it when its process dies) with no process of
that number left.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from pathlib import Path

from trt.perf.control import ControlClient
from trt.perf.encoding import ShmOutputs, ShmSlot
from trt.perf.input_data import InputData
from trt.perf.model_info import ModelInfo
from trt.perf.tensors import to_wire


@dataclass
class SystemShmRegions:
    """Owns the regions: registers them with the server and, on close, unregisters and unlinks them."""

    control: ControlClient
    input_slots: list[list[dict[str, ShmSlot]]]  # [stream][request] -> input name -> slot
    outputs: ShmOutputs
    _segments: list[tuple[str, shared_memory.SharedMemory]]
    _locks: list[int] = field(default_factory=list)  # an open file holding each region's lock

    def close(self) -> None:
        for name, segment in self._segments:
            self.control.unregister_system_shm(name)
            segment.close()
            with contextlib.suppress(FileNotFoundError):
                segment.unlink()
        self._segments = []
        for lock in self._locks:
            os.close(lock)
        self._locks = []

    def hold(self, name: str) -> None:
        """Lock region ``name``'s file for as long as this run lives (the kernel lets go at its death)."""
        self._locks.append(locked_file(name))


SHM_FOLDER = Path("/dev/shm")


def locked_file(name: str, create: bool = False) -> int:
    """``/dev/shm/<name>`` open (made first if ``create``) and locked for as long as it stays open:
    what tells a later run that the run which named the region still lives."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    lock = os.open(SHM_FOLDER / name, flags, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(lock)
        raise
    return lock


_OURS = re.compile(r"trt_perf_(?P<pid>\d+)_(?:in|out)")
# --shared-memory cuda keeps an empty file of each region's name locked the same way (cuda_shared_memory.py).
OURS_CUDA = re.compile(r"trt_perf_(?P<pid>\d+)_cuda_(?:in|out)")


def abandoned(name: str) -> bool:
    """Whether the region trt perf named ``name`` (system or CUDA) belongs to a run that has ended."""
    try:
        lock = os.open(SHM_FOLDER / name, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        match = _OURS.fullmatch(name) or OURS_CUDA.fullmatch(name)
        assert match is not None
        try:
            os.kill(int(match["pid"]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # a process of that number lives (another user's)
        return False
    except OSError:
        return False
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its run holds it
    finally:
        os.close(lock)
    return True


def release_abandoned_regions(control: ControlClient) -> list[str]:
    """Unregister (and unlink) the regions of trt perf runs that ended without doing so; their names."""
    ours = [name for name, key in control.system_shm_regions().items() if key == f"/{name}"]
    return release_where_abandoned(ours, _OURS, control.unregister_system_shm)


def release_where_abandoned(
    names: list[str], pattern: re.Pattern[str], unregister: Callable[[str], None]
) -> list[str]:
    """Unregister (and unlink the file of) each region of ``names`` that trt perf named (``pattern``)
    and whose run has ended; their names."""
    released = []
    for name in sorted(names):
        if pattern.fullmatch(name) is None or not abandoned(name):
            continue
        unregister(name)
        with contextlib.suppress(FileNotFoundError):
            (SHM_FOLDER / name).unlink()
        released.append(name)
    return released


def create_regions(
    control: ControlClient, info: ModelInfo, data: InputData, output_size: int
) -> SystemShmRegions:
    tag = f"trt_perf_{os.getpid()}"
    blobs: list[list[dict[str, bytes]]] = [
        [{spec.name: to_wire(r.arrays[spec.name], spec.datatype) for spec in info.inputs} for r in stream]
        for stream in data.streams
    ]
    total = sum(len(b) for stream in blobs for request in stream for b in request.values())
    segments: list[tuple[str, shared_memory.SharedMemory]] = []
    regions = SystemShmRegions(control, [], ShmOutputs(f"{tag}_out", output_size), segments)
    try:
        inputs = shared_memory.SharedMemory(name=f"{tag}_in", create=True, size=max(total, 1))
        segments.append((f"{tag}_in", inputs))
        regions.hold(f"{tag}_in")
        offset = 0
        for stream in blobs:
            slots = []
            for request in stream:
                entry = {}
                for name, blob in request.items():
                    buffer = inputs.buf
                    assert buffer is not None
                    buffer[offset : offset + len(blob)] = blob
                    entry[name] = ShmSlot(f"{tag}_in", offset, len(blob))
                    offset += len(blob)
                slots.append(entry)
            regions.input_slots.append(slots)
        control.register_system_shm(f"{tag}_in", f"/{tag}_in", max(total, 1))
        outputs = shared_memory.SharedMemory(
            name=f"{tag}_out", create=True, size=max(1, output_size * len(info.outputs))
        )
        segments.append((f"{tag}_out", outputs))
        regions.hold(f"{tag}_out")
        control.register_system_shm(f"{tag}_out", f"/{tag}_out", max(1, output_size * len(info.outputs)))
    except BaseException:
        regions.close()
        raise
    return regions

"""``--shared-memory system``: every request's inputs written once into a POSIX region the server maps,
outputs into a second region; requests then carry only region names and offsets."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from multiprocessing import shared_memory

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

    def close(self) -> None:
        for name, segment in self._segments:
            self.control.unregister_system_shm(name)
            segment.close()
            with contextlib.suppress(FileNotFoundError):
                segment.unlink()
        self._segments = []


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
        control.register_system_shm(f"{tag}_out", f"/{tag}_out", max(1, output_size * len(info.outputs)))
    except BaseException:
        regions.close()
        raise
    return regions

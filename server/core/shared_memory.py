"""Triton's system shared memory extension: clients hand tensors over through POSIX shm regions.

A client creates ``/dev/shm/<key>`` (``tritonclient.utils.shared_memory``), registers a window of it
(``offset``, ``byte_size``) under a name, then names that region in an input's or output's
parameters (``shared_memory_region``, ``shared_memory_byte_size``, ``shared_memory_offset``). Inputs
are read as views of the mapping, outputs written straight into it. Every offset and size is
checked against the registered window, so a request that reaches past it is a 400, never an
out-of-bounds access. Resolution happens here, in the core, so HTTP and gRPC behave the same.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Any

from server.core.datatypes import tensor_from_bytes, tensor_to_bytes
from server.core.errors import AlreadyExists, InvalidArgument, InvalidInput, NotFound
from server.core.types import InferenceRequest, InferenceResponse

_RESERVED_PREFIX = "triton_python_backend_shm_region_"
_PARAMETERS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")


@dataclass
class SystemRegion:
    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap


def _shm_path(key: str) -> str:
    return os.path.join("/dev/shm", key.lstrip("/"))


class SharedMemoryRegistry:
    def __init__(self) -> None:
        self._regions: dict[str, SystemRegion] = {}
        self._lingering: list[mmap.mmap] = []  # unregistered while a request still held a view

    # -- the extension's operations ---------------------------------------------------------------

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if not name:
            raise InvalidArgument("a shared memory region needs a name")
        if name.startswith(_RESERVED_PREFIX):
            raise InvalidArgument(f"region names starting with '{_RESERVED_PREFIX}' are reserved")
        if name in self._regions:
            raise AlreadyExists(f"shared memory region '{name}' is already registered; unregister it first")
        if offset < 0 or byte_size <= 0:
            raise InvalidArgument(f"shared memory region '{name}': offset must be >= 0 and byte_size > 0")
        path = _shm_path(key)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise InvalidArgument(
                f"unable to open shared memory key '{key}' for region '{name}': {exc.strerror}"
            ) from None
        try:
            size = os.fstat(fd).st_size
            if offset + byte_size > size:
                raise InvalidArgument(
                    f"shared memory region '{name}': offset {offset} + byte_size {byte_size} exceeds the "
                    f"{size} bytes of '{key}'"
                )
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._regions[name] = SystemRegion(name, key, offset, byte_size, mapping)

    def unregister(self, name: str = "") -> None:
        """Unregister one region, or every region when ``name`` is empty (unknown names are fine)."""
        names = [name] if name else list(self._regions)
        for region_name in names:
            region = self._regions.pop(region_name, None)
            if region is not None:
                self._close(region.mapping)
        self._retry_lingering()

    def status(self, name: str = "") -> list[SystemRegion]:
        if name:
            if name not in self._regions:
                raise NotFound(f"Unable to find system shared memory region: '{name}'")
            return [self._regions[name]]
        return list(self._regions.values())

    def close(self) -> None:
        self.unregister()

    def _close(self, mapping: mmap.mmap) -> None:
        try:
            mapping.close()
        except BufferError:  # a request still reads a view: close it later
            self._lingering.append(mapping)

    def _retry_lingering(self) -> None:
        waiting, self._lingering = self._lingering, []
        for mapping in waiting:
            self._close(mapping)

    # -- inference ----------------------------------------------------------------------------------

    def _window(self, what: str, parameters: dict[str, Any]) -> tuple[SystemRegion, int, int]:
        name = parameters.get("shared_memory_region")
        size = parameters.get("shared_memory_byte_size")
        offset = parameters.get("shared_memory_offset", 0)
        if not isinstance(name, str) or not isinstance(size, int) or not isinstance(offset, int):
            raise InvalidInput(
                f"{what}: shared memory needs shared_memory_region (a string) and "
                "shared_memory_byte_size (an integer)"
            )
        region = self._regions.get(name)
        if region is None:
            raise InvalidInput(f"{what}: shared memory region '{name}' is not registered")
        if offset < 0 or size < 0 or offset + size > region.byte_size:
            raise InvalidInput(
                f"{what}: offset {offset} + byte_size {size} reaches past shared memory region '{name}' "
                f"({region.byte_size} bytes)"
            )
        return region, region.offset + offset, size

    def resolve_inputs(self, request: InferenceRequest) -> None:
        """Give every input that names a region its data: a view of the region, checked for size."""
        for tensor in request.inputs:
            if tensor.data is not None or "shared_memory_region" not in tensor.parameters:
                continue
            what = f"input '{tensor.name}'"
            region, start, size = self._window(what, tensor.parameters)
            view = memoryview(region.mapping)[start : start + size]
            tensor.data = tensor_from_bytes(view, tensor.datatype, tensor.shape, tensor.name)
            tensor.parameters = {k: v for k, v in tensor.parameters.items() if k not in _PARAMETERS}

    def check_outputs(self, request: InferenceRequest) -> None:
        """Refuse requests whose output regions are unusable before running the model."""
        for output in request.outputs or ():
            if "shared_memory_region" in output.parameters:
                if output.class_count:
                    raise InvalidInput(f"output '{output.name}': classification cannot go to shared memory")
                self._window(f"output '{output.name}'", output.parameters)

    def write_outputs(self, request: InferenceRequest, response: InferenceResponse) -> None:
        """Write the outputs that asked for a region into it; their data leaves the response."""
        outputs = request.outputs or ()
        wanted = {o.name: o.parameters for o in outputs if "shared_memory_region" in o.parameters}
        for output in response.outputs:
            parameters = wanted.get(output.name)
            if parameters is None or output.data is None:
                continue
            what = f"output '{output.name}'"
            region, start, size = self._window(what, parameters)
            raw = tensor_to_bytes(output.data, output.datatype)
            if len(raw) > size:
                raise InvalidInput(
                    f"{what}: the result needs {len(raw)} bytes but shared_memory_byte_size is {size}"
                )
            region.mapping[start : start + len(raw)] = bytes(raw) if isinstance(raw, memoryview) else raw
            output.data = None
            output.parameters = {
                "shared_memory_region": parameters["shared_memory_region"],
                "shared_memory_byte_size": len(raw),
            }
            if "shared_memory_offset" in parameters:
                output.parameters["shared_memory_offset"] = parameters["shared_memory_offset"]

"""Triton's system shared memory extension: clients hand tensors over through POSIX shm regions.

A client creates ``/dev/shm/<key>`` (``tritonclient.utils.shared_memory``), registers a window of it
(``offset``, ``byte_size``) under a name, then names that region in an input's or output's
parameters (``shared_memory_region``, ``shared_memory_byte_size``, ``shared_memory_offset``). Every
offset and size is checked against the registered window, so a request that reaches past it is a
400. Resolution happens here, in the core, so HTTP and gRPC behave the same.

The server keeps the object open (its file descriptor) and reads inputs and writes outputs with
``pread`` / ``pwrite``, never through a mapping. A client owns the object and may truncate it at any
time, even after unlinking it: touching a mapped page past the new end raises SIGBUS, which would kill
the server (Triton too), and no check before the access can close that window. ``pread`` on a short
object just returns fewer bytes, which is a 400. The cost is one copy of each input, at memory speed.
CUDA shared memory needs a GPU build; this server answers its register call with UNSUPPORTED.

As in current Triton, clients may register (and unregister) regions only when the server was started
with ``--allow-client-shm=true``: a region is any object in ``/dev/shm`` the server's user can open,
other programs' included. Without it the calls are UNSUPPORTED (HTTP 501, gRPC UNIMPLEMENTED) in
Triton's words, and the status calls answer that nothing is registered.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any, NoReturn

from trt.server.core.datatypes import tensor_from_bytes, tensor_to_bytes
from trt.server.core.errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidInput,
    NotFound,
    ServerError,
    Unsupported,
)
from trt.server.core.paths import shown, unsafe_segment
from trt.server.core.types import InferenceRequest, InferenceResponse

SHM_DIRECTORY = "/dev/shm"
# Keys Triton keeps for its Python backend's own regions; a client mapping them could read or
# corrupt other requests' tensors.
TRITON_RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
CUDA_UNSUPPORTED = "CUDA shared memory needs a GPU build; this server has none"
# Triton's words (its common.h), which its own tests match.
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
_PARAMETERS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")


@dataclass(frozen=True, slots=True)
class RegionStatus:
    """One registered region as the status calls report it."""

    name: str
    key: str
    offset: int
    byte_size: int


@dataclass(slots=True)
class _Region:
    status: RegionStatus
    fd: int  # the shm object, open for as long as the region is registered


class SharedMemoryRegistry:
    """The system shared memory regions clients registered, by name; one per server."""

    def __init__(self, allow_client_shm: bool) -> None:
        self._regions: dict[str, _Region] = {}
        self.allow_client_shm = allow_client_shm  # --allow-client-shm

    def _check_allowed(self) -> None:
        if not self.allow_client_shm:
            raise Unsupported(CLIENT_SHM_DISABLED)

    # -- the extension's operations ---------------------------------------------------------------

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes at ``offset`` of the POSIX shm object ``key`` under ``name``."""
        self._check_allowed()
        if not name:
            raise InvalidArgument("'region name' is necessary to register system shared memory region")
        if name in self._regions:
            raise AlreadyExists(f"shared memory region '{name}' already in manager")
        stem = key[1:] if key.startswith("/") else key
        if unsafe_segment(stem) is not None:
            raise InvalidArgument(
                f"cannot register shared memory region '{name}' - invalid shm key '{shown(key)}' "
                "(expected a POSIX shm name such as '/my_region')"
            )
        for prefix in (TRITON_RESERVED_KEY_PREFIX, _own_key_prefix()):
            if stem.startswith(prefix):
                raise InvalidArgument(
                    f"cannot register shared memory region '{name}' with key '{key}' as the key "
                    f"contains the reserved prefix '{prefix}'"
                )
        if offset < 0 or byte_size <= 0:
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': offset must be >= 0 and "
                f"byte_size > 0 (got offset {offset}, byte_size {byte_size})"
            )
        try:
            # As shm_open does: never follow a link out of /dev/shm.
            fd = os.open(os.path.join(SHM_DIRECTORY, stem), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            # INTERNAL (500), as Triton answers it: its own tests match "[StatusCode.INTERNAL] Unable to
            # open shared memory region: '<key>'", so the text begins as Triton's does.
            raise ServerError(
                f"Unable to open shared memory region: '{key}' ({exc.strerror}); create it first, e.g. "
                "with tritonclient.utils.shared_memory.create_shared_memory_region"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidArgument(f"Invalid shared memory region: '{key}' is not a shared memory object")
            if offset + byte_size > info.st_size:
                raise InvalidArgument(
                    f"failed to register shared memory region '{name}': offset {offset} + byte_size "
                    f"{byte_size} exceeds the {info.st_size} bytes of '{key}'"
                )
        except BaseException:
            os.close(fd)
            raise
        self._regions[name] = _Region(RegionStatus(name, key, offset, byte_size), fd)

    def unregister(self, name: str = "") -> None:
        """Unregister one region, or every region when ``name`` is empty (unknown names are fine)."""
        self._check_allowed()
        names = [name] if name else list(self._regions)
        for region_name in names:
            region = self._regions.pop(region_name, None)
            if region is not None:
                os.close(region.fd)  # a request reading it now has its bytes already: reads copy

    def status(self, name: str = "") -> list[RegionStatus]:
        """Every region, or the one named (NotFound if it is not registered)."""
        if not name:
            return [region.status for region in self._regions.values()]
        region = self._regions.get(name)
        if region is None:
            raise NotFound(f"Unable to find system shared memory region: '{name}'")
        return [region.status]

    def close(self) -> None:
        for region in self._regions.values():
            os.close(region.fd)
        self._regions.clear()

    # CUDA shared memory: a GPU build would map cudaIpcMemHandle_t handles; this one has no GPU.

    def register_cuda(self, name: str) -> NoReturn:
        self._check_allowed()
        raise Unsupported(CUDA_UNSUPPORTED)

    def cuda_status(self, name: str = "") -> list[RegionStatus]:
        if name:
            raise NotFound(f"Unable to find cuda shared memory region: '{name}'")
        return []

    def unregister_cuda(self, name: str = "") -> None:
        """Nothing can be registered, so there is nothing to unregister (OK, as Triton answers)."""
        self._check_allowed()

    # -- bytes in and out of a region -------------------------------------------------------------

    def read(self, name: str, offset: int, byte_size: int, what: str = "") -> memoryview:
        """A read-only copy of ``byte_size`` bytes at ``offset`` into region ``name``."""
        region, position = self._window(name, offset, byte_size, what)
        buffer = bytearray(byte_size)
        got = os.preadv(region.fd, [buffer], position) if byte_size else 0
        if got != byte_size:
            raise self._shrunk(region, position + got)
        return memoryview(buffer).toreadonly()

    def write(self, name: str, offset: int, data: bytes | memoryview, what: str = "") -> None:
        """Copy ``data`` into region ``name`` at ``offset``."""
        region, position = self._window(name, offset, len(data), what)
        view = memoryview(data).cast("B")
        while view:
            written = os.pwrite(region.fd, view, position)
            view, position = view[written:], position + written

    def _window(self, name: str, offset: int, byte_size: int, what: str) -> tuple[_Region, int]:
        """The region and the position of [offset, offset + byte_size) in its object, all checked."""
        prefix = f"{what}: " if what else ""
        region = self._regions.get(name)
        if region is None:  # Triton's text first, as it words it (clients match on it), then whose
            raise NotFound(f"Unable to find shared memory region: '{name}'" + (f" ({what})" if what else ""))
        size = region.status.byte_size
        if offset < 0 or byte_size < 0 or offset + byte_size > size:
            raise InvalidInput(
                f"{prefix}offset {offset} + byte_size {byte_size} reaches past shared memory region "
                f"'{name}' ({size} bytes); keep offset + byte size within the registered region"
            )
        return region, region.status.offset + offset

    @staticmethod
    def _shrunk(region: _Region, available: int) -> InvalidInput:
        needed = region.status.offset + region.status.byte_size
        return InvalidInput(
            f"shared memory region '{region.status.name}': '{region.status.key}' shrank to {available} "
            f"bytes after it was registered ({needed} needed); register it again"
        )

    # -- inference ----------------------------------------------------------------------------------

    def resolve_inputs(self, request: InferenceRequest) -> None:
        """Give every input that names a region its data: a view of the region, checked for size."""
        for tensor in request.inputs:
            if tensor.data is not None:
                continue
            what = f"input '{tensor.name}'"
            if "shared_memory_region" not in tensor.parameters:
                raise InvalidInput(f"{what} has no data and no shared memory region")
            name, offset, size = _window_parameters(what, tensor.parameters)
            view = self.read(name, offset, size, what)
            tensor.data = tensor_from_bytes(
                view, tensor.datatype, tensor.shape, tensor.name, request.model_name, request.id
            )
            tensor.parameters = {k: v for k, v in tensor.parameters.items() if k not in _PARAMETERS}

    def check_outputs(self, request: InferenceRequest) -> None:
        """Refuse, before the model runs, requests whose output regions cannot be used."""
        for output in request.outputs or ():
            if "shared_memory_region" not in output.parameters:
                continue
            what = f"output '{output.name}'"
            if output.class_count or "classification" in output.parameters:
                raise InvalidInput(
                    f"{what}: Output can't set both 'shared_memory_region' and 'classification'"
                )
            name, offset, size = _window_parameters(what, output.parameters)
            self._window(name, offset, size, what)

    def write_outputs(self, request: InferenceRequest, response: InferenceResponse) -> None:
        """Write the outputs that asked for a region into it; their data leaves the response."""
        wanted = {
            o.name: o.parameters for o in request.outputs or () if "shared_memory_region" in o.parameters
        }
        for output in response.outputs:
            parameters = wanted.get(output.name)
            if parameters is None or output.data is None:
                continue
            what = f"output '{output.name}'"
            name, offset, size = _window_parameters(what, parameters)
            raw = tensor_to_bytes(output.data, output.datatype)
            if len(raw) > size:
                raise InvalidInput(
                    f"shared memory size specified with the request for output '{output.name}' "
                    f"({size} bytes) should be at least {len(raw)} bytes to hold the results"
                )
            self.write(name, offset, raw, what)
            # As Triton: the output keeps its name, datatype and shape; its data is in the region.
            output.data = None


def _window_parameters(what: str, parameters: dict[str, Any]) -> tuple[str, int, int]:
    """(region, offset, byte_size) from a tensor's shared memory parameters, type-checked."""
    name = parameters.get("shared_memory_region")
    if not isinstance(name, str):
        raise InvalidInput(f"{what}: Unable to parse 'shared_memory_region' (expected a string)")
    offset = _non_negative(what, "shared_memory_offset", parameters.get("shared_memory_offset", 0))
    size = _non_negative(what, "shared_memory_byte_size", parameters.get("shared_memory_byte_size"))
    return name, offset, size


def _non_negative(what: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(f"{what}: Unable to parse '{key}' (expected a non-negative integer)")
    return value


def _own_key_prefix() -> str:
    # Kept as a guard: the Python backend's segments were once ``/dev/shm/trt_<server pid>_...``;
    # they are memfds now (no name anyone can open), and a name of that shape is still not a client's.
    return f"trt_{os.getpid()}_"

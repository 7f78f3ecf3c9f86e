"""Triton's shared memory extensions: clients hand tensors over through POSIX shm or GPU memory.

A client creates ``/dev/shm/<key>`` (``tritonclient.utils.shared_memory``), registers a window of it
(``offset``, ``byte_size``) under a name, then names that region in an input's or output's
parameters (``shared_memory_region``, ``shared_memory_byte_size``, ``shared_memory_offset``). Every
offset and size is checked against the registered window, so a request that reaches past it is a
400. Resolution happens here, in the core, so HTTP and gRPC behave the same.

Regions of both kinds share one namespace, as in Triton: a name registered as system shared memory
cannot be registered as CUDA shared memory, and each kind's status and unregister calls see only their
own kind's regions.

The server keeps the object open (its file descriptor) and reads inputs and writes outputs with
``pread`` / ``pwrite``, never through a mapping. A client owns the object and may truncate it at any
time, even after unlinking it: touching a mapped page past the new end raises SIGBUS, which would kill
the server (Triton too), and no check before the access can close that window. ``pread`` on a short
object just returns fewer bytes, which is a 400. The cost is one copy of each input, at memory speed.
Copies past ``OFF_LOOP_BYTES`` run on a thread (``pread``, ``pwrite`` and ``cudaMemcpy`` let go of the
GIL): on the loop, a 256 MB input and output held every other request for 0.3-0.4 s. A region
unregistered while such a copy runs leaves the namespace at once and is closed when the copy ends, as
Triton defers it until its in-flight requests are done.
CUDA shared memory (``cuda_ipc.py``) needs cuda-bindings and a GPU: without cuda-bindings its register
call answers as a Triton built without GPUs does, without a GPU as Triton's GPU build does there.

As in current Triton, clients may register (and unregister) regions only when the server was started
with ``--allow-client-shm=true``: a region is any object in ``/dev/shm`` the server's user can open,
other programs' included. Without it the calls are UNSUPPORTED (HTTP 501, gRPC UNIMPLEMENTED) in
Triton's words, and the status calls answer that nothing is registered.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from trt import cuda_runtime
from trt.server.core.datatypes import tensor_from_bytes, tensor_to_bytes
from trt.server.core.errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidInput,
    NotFound,
    ServerError,
    Unavailable,
    Unsupported,
)
from trt.server.core.extensions.cuda_ipc import IPC_HANDLE_SIZE, CudaIpcMemory
from trt.server.core.paths import shown, unsafe_segment
from trt.server.core.types import InferenceRequest, InferenceResponse

SHM_DIRECTORY = "/dev/shm"
# Keys Triton keeps for its Python backend's own regions; a client mapping them could read or
# corrupt other requests' tensors.
TRITON_RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
logger = logging.getLogger("trt.shared_memory")
OFF_LOOP_BYTES = 1 << 20  # about 0.2 ms of copying: the thread hop costs less than the loop's wait past it
Copied = TypeVar("Copied")
# Triton's words (its common.h), which its own tests match.
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
_PARAMETERS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")


@dataclass(frozen=True, slots=True)
class RegionStatus:
    """One registered system shared memory region as the status calls report it."""

    name: str
    key: str
    offset: int
    byte_size: int


@dataclass(frozen=True, slots=True)
class CudaRegionStatus:
    """One registered CUDA shared memory region as the status calls report it."""

    name: str
    device_id: int
    byte_size: int


class _Memory(Protocol):
    """Where a region's bytes live; offsets are the region's own, checked against its size."""

    def read(self, offset: int, byte_size: int) -> memoryview: ...

    def write(self, offset: int, data: bytes | memoryview) -> None: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class _Region:
    status: RegionStatus | CudaRegionStatus
    memory: _Memory
    copies: int = 0  # copies running on threads now
    retired: bool = False  # unregistered while copies ran: closed when the last one ends

    @property
    def is_cuda(self) -> bool:
        return isinstance(self.status, CudaRegionStatus)


class _SystemObject:
    """A window of a POSIX shm object, open (its file descriptor) for as long as it is registered."""

    def __init__(self, status: RegionStatus, fd: int) -> None:
        self._status = status
        self._fd = fd

    def read(self, offset: int, byte_size: int) -> memoryview:
        position = self._status.offset + offset
        # Not bytearray(n): it zeroes every byte first, holding the GIL (0.2 s for 256 MB).
        buffer = np.empty(byte_size, dtype=np.uint8)
        got = os.preadv(self._fd, [buffer.data], position) if byte_size else 0
        if got != byte_size:
            needed = self._status.offset + self._status.byte_size
            raise InvalidInput(
                f"shared memory region '{self._status.name}': '{self._status.key}' shrank to "
                f"{position + got} bytes after it was registered ({needed} needed); register it again"
            )
        return buffer.data.toreadonly()

    def write(self, offset: int, data: bytes | memoryview) -> None:
        position = self._status.offset + offset
        view = memoryview(data).cast("B")
        while view:
            written = os.pwrite(self._fd, view, position)
            view, position = view[written:], position + written

    def close(self) -> None:
        os.close(self._fd)  # a request reading it now has its bytes already: reads copy


class SharedMemoryRegistry:
    """The system shared memory regions clients registered, by name; one per server."""

    def __init__(self, allow_client_shm: bool) -> None:
        self._regions: dict[str, _Region] = {}
        self._closed = False  # the server stopped: a handle opened after that must not stay open
        self.allow_client_shm = allow_client_shm  # --allow-client-shm

    def check_allowed(self) -> None:
        """UNSUPPORTED unless clients may register regions (the first check of every change)."""
        if not self.allow_client_shm:
            raise Unsupported(CLIENT_SHM_DISABLED)

    # -- the extension's operations ---------------------------------------------------------------

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes at ``offset`` of the POSIX shm object ``key`` under ``name``."""
        self.check_allowed()
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
        status = RegionStatus(name, key, offset, byte_size)
        self._regions[name] = _Region(status, _SystemObject(status, fd))

    def unregister(self, name: str = "") -> None:
        """Unregister one system region, or every one when ``name`` is empty (unknown names are fine)."""
        self.check_allowed()
        self._unregister(name, cuda=False)

    def status(self, name: str = "") -> list[RegionStatus]:
        """Every system region, or the one named (NotFound if it is not registered as one)."""
        return [r.status for r in self._listed(name, cuda=False) if isinstance(r.status, RegionStatus)]

    def close(self) -> None:
        for region in self._regions.values():
            self._retire(region)
        self._regions.clear()
        self._closed = True

    # CUDA shared memory: clients' GPU allocations, opened from their IPC handles.

    async def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes of the GPU allocation whose IPC handle is ``raw_handle``."""
        self.check_allowed()
        if not name:
            raise InvalidArgument("'region name' is necessary to register cuda shared memory region")
        if name in self._regions:
            raise AlreadyExists(f"shared memory region '{name}' already in manager")
        if len(raw_handle) != IPC_HANDLE_SIZE:
            raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
        if byte_size <= 0:
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': byte_size must be > 0 (got {byte_size})"
            )
        try:
            cuda_runtime.runtime()
        except cuda_runtime.CudaUnavailable as exc:
            # A Triton built without GPUs answers INVALID_ARG in these words; then why.
            raise InvalidArgument(
                f"failed to register CUDA shared memory region: '{name}', GPUs not supported ({exc})"
            ) from None
        try:
            devices = cuda_runtime.device_count()
        except cuda_runtime.CudaUnavailable as exc:
            # A Triton built with GPUs, on a machine without one, fails to open the handle: these words.
            raise InvalidArgument(f"failed to register shared memory region: invalid args ({exc})") from None
        if not 0 <= device_id < devices:
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': invalid args (device_id {device_id}; "
                f"this server has {devices} GPU{'s' if devices != 1 else ''})"
            )
        # Opening a handle can take a while (the first one makes the GPU's context): off the loop.
        try:
            memory = await asyncio.to_thread(CudaIpcMemory.open, raw_handle, device_id)
        except cuda_runtime.CudaCallFailed as exc:
            logger.error("failed to open CUDA IPC handle of region '%s': %s", name, exc)
            # Triton's words; CUDA's reason goes to the log only, as in Triton.
            raise InvalidArgument("failed to register shared memory region: invalid args") from None
        if byte_size > memory.size or name in self._regions or self._closed:
            memory.close()
            if self._closed:
                raise Unavailable("the server is stopping")
            if name in self._regions:  # registered by another call while this one opened its handle
                raise AlreadyExists(f"shared memory region '{name}' already in manager")
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': invalid args (byte_size {byte_size} "
                f"exceeds the {memory.size} bytes of the allocation)"
            )
        self._regions[name] = _Region(CudaRegionStatus(name, device_id, byte_size), memory)

    def cuda_status(self, name: str = "") -> list[CudaRegionStatus]:
        """Every CUDA region, or the one named (NotFound if it is not registered as one)."""
        return [r.status for r in self._listed(name, cuda=True) if isinstance(r.status, CudaRegionStatus)]

    def unregister_cuda(self, name: str = "") -> None:
        """Unregister one CUDA region, or every one when ``name`` is empty (unknown names are fine)."""
        self.check_allowed()
        self._unregister(name, cuda=True)

    def _listed(self, name: str, cuda: bool) -> list[_Region]:
        kind, other = ("cuda", "system") if cuda else ("system", "CUDA")
        if not name:
            return [region for region in self._regions.values() if region.is_cuda == cuda]
        region = self._regions.get(name)
        if region is None:
            raise NotFound(f"Unable to find {kind} shared memory region: '{name}'")
        if region.is_cuda != cuda:
            raise NotFound(
                f"The region named '{name}' is registered as {other} shared memory, not "
                f"{'CUDA' if cuda else 'system'} shared memory"
            )
        return [region]

    def _unregister(self, name: str, cuda: bool) -> None:
        names = [name] if name else [n for n, region in self._regions.items() if region.is_cuda == cuda]
        failed = []
        for region_name in names:
            region = self._regions.get(region_name)
            if region is None or region.is_cuda != cuda:
                continue  # as Triton: a region of the other kind is left alone, and that is OK
            del self._regions[region_name]
            if not self._retire(region):
                failed.append(region_name)
        if failed:
            raise ServerError(f"failed to close the CUDA IPC handle of {', '.join(failed)}; see the log")

    def _retire(self, region: _Region) -> bool:
        """Close a region taken out of the namespace, or mark it to be closed when its copies end;
        False if CUDA would not close it (logged)."""
        if region.copies:
            region.retired = True
            return True
        try:
            region.memory.close()
        except cuda_runtime.CudaCallFailed as exc:
            logger.error("unregistering CUDA shared memory region '%s': %s", region.status.name, exc)
            return False
        return True

    # -- bytes in and out of a region -------------------------------------------------------------

    def read(self, name: str, offset: int, byte_size: int, what: str = "") -> memoryview:
        """A read-only copy of ``byte_size`` bytes at ``offset`` into region ``name``."""
        return self._window(name, offset, byte_size, what).memory.read(offset, byte_size)

    def write(self, name: str, offset: int, data: bytes | memoryview, what: str = "") -> None:
        """Copy ``data`` into region ``name`` at ``offset``."""
        self._window(name, offset, len(data), what).memory.write(offset, data)

    async def _copy(self, region: _Region, byte_size: int, copy: Callable[..., Copied], *args: Any) -> Copied:
        """``copy(*args)`` of ``byte_size`` bytes of ``region``: on the loop if small, else on a thread."""
        if byte_size <= OFF_LOOP_BYTES:
            return copy(*args)
        region.copies += 1
        # The count drops when the thread is done, not when a cancelled request stops waiting for it.
        running = asyncio.ensure_future(asyncio.to_thread(copy, *args))
        running.add_done_callback(lambda done: self._copy_ended(region, done))
        return await asyncio.shield(running)

    def _copy_ended(self, region: _Region, done: asyncio.Future[Any]) -> None:
        if not done.cancelled():
            done.exception()  # a request that stopped waiting would leave it "never retrieved"
        region.copies -= 1
        if region.retired and not region.copies:
            region.retired = False
            self._retire(region)

    def _window(self, name: str, offset: int, byte_size: int, what: str) -> _Region:
        """Region ``name``, once [offset, offset + byte_size) is checked to lie in it."""
        prefix = f"{what}: " if what else ""
        region = self._regions.get(name)
        if region is None:  # Triton's text first, as it words it (clients match on it), then whose
            raise NotFound(f"Unable to find shared memory region: '{name}'" + (f" ({what})" if what else ""))
        size = region.status.byte_size
        # Triton's words first (its shared memory tests match them), then what reached past.
        if offset < 0 or offset >= size:
            raise InvalidInput(
                f"Invalid offset for shared memory region: '{name}' ({prefix}offset {offset}; the region "
                f"has {size} bytes)"
            )
        if byte_size < 0 or offset + byte_size > size:
            raise InvalidInput(
                f"Invalid offset + byte size for shared memory region: '{name}' ({prefix}offset {offset} "
                f"+ byte_size {byte_size} reaches past the region's {size} bytes)"
            )
        return region

    # -- inference ----------------------------------------------------------------------------------

    async def resolve_inputs(self, request: InferenceRequest) -> None:
        """Give every input that names a region its data: a view of the region, checked for size."""
        for tensor in request.inputs:
            if tensor.data is not None:
                continue
            what = f"input '{tensor.name}'"
            if "shared_memory_region" not in tensor.parameters:
                raise InvalidInput(f"{what} has no data and no shared memory region")
            name, offset, size = _window_parameters(what, tensor.parameters)
            region = self._window(name, offset, size, what)
            view = await self._copy(region, size, region.memory.read, offset, size)
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

    async def write_outputs(self, request: InferenceRequest, response: InferenceResponse) -> None:
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
            region = self._window(name, offset, len(raw), what)
            await self._copy(region, len(raw), region.memory.write, offset, raw)
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

"""Frames and tensors between the server and a Python model's process.

Imported by both sides: as ``server.backends.python.stub._ipc`` in the server and as ``_ipc`` in the
model process (whose ``sys.path`` holds only this folder and the model's own environment). It uses
nothing but the standard library and numpy, so it runs under whatever interpreter the model's
``EXECUTION_ENV_PATH`` names.

A frame is a 4-byte little-endian length followed by a pickle. Fixed-size tensors travel through a
shared-memory arena written at offsets; only (name, datatype, shape, offset, size) cross the socket.
BYTES tensors and tensors that do not fit the arena are pickled into the frame.
"""

from __future__ import annotations

import mmap
import os
import pickle
import struct
from typing import Any

import numpy as np

_LENGTH = struct.Struct("<I")
PICKLE_PROTOCOL = 5

# Wire datatype names for numpy dtypes; object arrays are BYTES.
_NUMPY_TO_WIRE = {
    np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "UINT8", np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32", np.dtype(np.uint64): "UINT64", np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16", np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16", np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64",
}  # fmt: skip
WIRE_TO_NUMPY = {name: dtype for dtype, name in _NUMPY_TO_WIRE.items()}


def wire_datatype(array: np.ndarray) -> str:
    if array.dtype.kind in ("O", "S", "U"):
        return "BYTES"
    return _NUMPY_TO_WIRE[array.dtype]


def encode_frame(message: Any) -> bytes:
    payload = pickle.dumps(message, protocol=PICKLE_PROTOCOL)
    return _LENGTH.pack(len(payload)) + payload


class FrameReader:
    """Splits a byte stream into decoded frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        if not self._buffer and len(data) >= 4:  # the common case: exactly one whole frame
            (length,) = _LENGTH.unpack_from(data)
            if len(data) == 4 + length:
                return [pickle.loads(memoryview(data)[4:])]
        self._buffer += data
        messages = []
        while len(self._buffer) >= 4:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if len(self._buffer) < 4 + length:
                break
            messages.append(pickle.loads(bytes(self._buffer[4 : 4 + length])))
            del self._buffer[: 4 + length]
        return messages


class BlockingFrameSource:
    """Blocking reads of whole frames (the model process side), one ``recv`` per frame when it can:
    a system call costs more here than decoding the frame."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._reader = FrameReader()
        self._ready: list[Any] = []

    def next(self) -> Any:
        while not self._ready:
            data = self._sock.recv(1 << 20)
            if not data:
                raise EOFError("the other side closed the connection")
            self._ready = self._reader.feed(data)
        return self._ready.pop(0)


class Arena:
    """A shared-memory region filled front to back for one execution, then reused."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        fd = os.open(f"/dev/shm/{name}", os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._used = 0

    def reset(self) -> None:
        self._used = 0

    def put(self, array: np.ndarray) -> tuple[int, int] | None:
        """Copy ``array`` in; return (offset, nbytes), or None if it does not fit."""
        nbytes = array.nbytes
        offset = (self._used + 63) & ~63  # cache-line aligned
        if offset + nbytes > self.size:
            return None
        if nbytes:
            target = np.ndarray(array.shape, dtype=array.dtype, buffer=self._map, offset=offset)
            np.copyto(target, array, casting="no")
        self._used = offset + nbytes
        return offset, nbytes

    def view(self, datatype: str, shape: tuple[int, ...], offset: int) -> np.ndarray:
        return np.ndarray(shape, dtype=WIRE_TO_NUMPY[datatype], buffer=self._map, offset=offset)

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:
            pass  # a view is still alive; the mapping goes when it does


def pack_tensors(tensors: dict[str, np.ndarray], arena: Arena | None) -> list[tuple[Any, ...]]:
    """Describe tensors for a frame: ("shm", name, datatype, shape, offset) or ("inline", name, array)."""
    packed: list[tuple[Any, ...]] = []
    for name, array in tensors.items():
        datatype = wire_datatype(array)
        if datatype != "BYTES" and arena is not None:
            array = np.ascontiguousarray(array)
            placed = arena.put(array)
            if placed is not None:
                packed.append(("shm", name, datatype, array.shape, placed[0]))
                continue
        packed.append(("inline", name, array))
    return packed


def unpack_tensors(packed: list[tuple[Any, ...]], arena: Arena | None, copy: bool) -> dict[str, np.ndarray]:
    """Inverse of ``pack_tensors``; views into the arena unless ``copy`` (the arena gets reused)."""
    tensors: dict[str, np.ndarray] = {}
    for item in packed:
        if item[0] == "shm":
            _, name, datatype, shape, offset = item
            assert arena is not None
            view = arena.view(datatype, tuple(shape), offset)
            tensors[name] = view.copy() if copy else view
        else:
            tensors[item[1]] = item[2]
    return tensors

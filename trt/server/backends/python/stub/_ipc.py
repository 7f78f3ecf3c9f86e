"""Messages and tensors between the server and a Python model's process.

Imported by both sides: as ``server.backends.python.stub._ipc`` in the server and as ``_ipc`` in the
model process (whose ``sys.path`` holds only this folder and the model's own environment). It uses
nothing but the standard library and numpy, so it runs under whatever interpreter the model's
``EXECUTION_ENV_PATH`` names.

After start-up, messages travel through two single-producer single-consumer rings in a
shared-memory segment, one per direction, and each message is announced by writing to an eventfd:
one cheap system call per side and message, no socket buffers, and no spurious wake-ups (reading a
unix socket wakes its writer's waiters). A message too big for its ring travels in a segment of its
own ("spill": a memfd per direction, one message at a time). Fixed-size tensors travel through a
shared-memory arena written at offsets; only (name, datatype, shape, offset) cross in the message.
BYTES tensors and tensors that do not fit the arena travel in the message. Every message, on a ring,
in a spill or on the start-up socket, is encoded by ``trt_pb_wire``: JSON and blobs, never a pickle,
so no bytes a model process writes can make the server call anything, and a reader checks every
size it is given before allocating. The socket that started the process stays open only so that
each side sees the other exit.

The rings need a reader that sees the new tail to see the bytes before it, and a writer that sees
the new head to find the reader done with the bytes behind it. x86 orders stores (and loads) that
way by itself; elsewhere (aarch64, POWER) ``_fence`` puts a full barrier between the two, made by
handing a held lock back and forth (an unlock then a lock, which those mutexes order). Aligned 8-byte
stores of the head and tail are atomic on both. Only the x86 path has run here.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import os
import platform
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

try:  # in the server, a module of this package; in the model process, a module beside this one
    from . import trt_pb_wire
except ImportError:
    import trt_pb_wire  # type: ignore[no-redef]


def _lock_fence() -> None:
    """A full memory barrier on the calling thread: an unlock followed by a lock of a lock it holds."""
    lock = getattr(_FENCE_LOCKS, "lock", None)
    if lock is None:
        lock = _FENCE_LOCKS.lock = threading.Lock()
        lock.acquire()
    lock.release()
    lock.acquire()


_FENCE_LOCKS = threading.local()  # one held lock per thread: threads fence independently
# x86 keeps stores in order and loads in order: no fence is needed there (None: no call at all).
_fence: Callable[[], None] | None = (
    None if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686") else _lock_fence
)

# How long a model process may take to finish its execute() and run finalize() once the server has
# asked it to end, or has gone away: then the server kills it, or it ends itself.
FINALIZE_GRACE_S = 10.0

_LENGTH = struct.Struct("<I")
_WRAP = 0xFFFFFFFF  # in a ring: the next message starts at the beginning of the data
_SPILL = 0xFFFFFFFE  # in a ring: the message is in the ring's spill

# Wire datatype names for numpy dtypes; object arrays are BYTES.
_NUMPY_TO_WIRE = {
    np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "UINT8", np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32", np.dtype(np.uint64): "UINT64", np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16", np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16", np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64",
}  # fmt: skip


BF16 = trt_pb_wire.BF16
if BF16 is not None:
    _NUMPY_TO_WIRE[BF16] = "BF16"
WIRE_TO_NUMPY = {name: dtype for dtype, name in _NUMPY_TO_WIRE.items()}
BF16_NEEDS = trt_pb_wire.BF16_NEEDS


def raw_view(array: np.ndarray) -> np.ndarray:
    """``array`` as numpy can export its buffer: a bfloat16 array (which cannot) as its uint16 bits."""
    return array.view(np.uint16) if array.dtype == BF16 else array


def wire_datatype(array: np.ndarray) -> str:
    if array.dtype.kind in ("O", "S", "U"):
        return "BYTES"
    return _NUMPY_TO_WIRE[array.dtype]


def encode_frame(codec: trt_pb_wire.Codec, message: Any) -> bytes:
    payload = codec.encode(message)
    return _LENGTH.pack(len(payload)) + payload


class FrameReader:
    """Splits a byte stream into decoded frames; ``codec`` may be replaced between feeds (the
    model process learns the tag from the first frame)."""

    def __init__(self, codec: trt_pb_wire.Codec) -> None:
        self.codec = codec
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        if not self._buffer and len(data) >= 4:  # the common case: exactly one whole frame
            (length,) = _LENGTH.unpack_from(data)
            if len(data) == 4 + length:
                return [self.codec.decode(memoryview(data)[4:])]
        self._buffer += data
        messages = []
        while len(self._buffer) >= 4:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if len(self._buffer) < 4 + length:
                break
            messages.append(self.codec.decode(bytes(self._buffer[4 : 4 + length])))
            del self._buffer[: 4 + length]
        return messages


class BlockingFrameSource:
    """Blocking reads of whole frames (the model process side), one ``recv`` per frame when it can:
    a system call costs more here than decoding the frame."""

    def __init__(self, sock: Any, codec: trt_pb_wire.Codec) -> None:
        self._sock = sock
        self._reader = FrameReader(codec)
        self._ready: list[Any] = []

    @property
    def codec(self) -> trt_pb_wire.Codec:
        return self._reader.codec

    @codec.setter
    def codec(self, codec: trt_pb_wire.Codec) -> None:
        self._reader.codec = codec

    def next(self) -> Any:
        while not self._ready:
            data = self._sock.recv(65536)
            if not data:
                raise EOFError("the other side closed the connection")
            self._ready = self._reader.feed(data)
        return self._ready.pop(0)


class Ring:
    """A single-producer, single-consumer queue of messages in shared memory, encoded by ``codec``.

    The head (read position) and tail (write position) count bytes since the start and never
    wrap; each message is a 4-byte length and its encoding, padded to 8 bytes. A message that would
    cross the end is preceded by a wrap mark; one larger than ``max_message`` is written to the
    ring's ``Spill`` and only a mark crosses the ring.
    """

    HEADER = 128  # tail at 0, head at 64: separate cache lines

    def __init__(
        self,
        buffer: mmap.mmap,
        offset: int,
        capacity: int,
        codec: trt_pb_wire.Codec,
        spill: Spill | None = None,
    ) -> None:
        if capacity & (capacity - 1) or capacity < 64:
            raise ValueError("the ring's capacity must be a power of two")
        self._codec = codec
        self._map = buffer
        self._tail = ctypes.c_uint64.from_buffer(buffer, offset)
        self._head = ctypes.c_uint64.from_buffer(buffer, offset + 64)
        self._data = offset + self.HEADER
        self._capacity = capacity
        self._mask = capacity - 1
        self.max_message = capacity // 4
        self._spill = spill

    @staticmethod
    def bytes_needed(capacity: int) -> int:
        return Ring.HEADER + capacity

    def reset(self) -> None:
        self._tail.value = 0
        self._head.value = 0
        if self._spill is not None:
            self._spill.reset()

    def empty(self) -> bool:
        return self._head.value == self._tail.value

    def put(self, message: Any) -> bool:
        """Append ``message``; False if the ring has no room for it now (the reader is behind)."""
        payload = self._codec.encode(message)
        if len(payload) <= self.max_message:
            return self._put(len(payload), payload)
        if self._spill is None:
            raise ValueError(f"a message of {len(payload)} bytes is too big for this ring")
        if not self._room(self._size_on_ring(0)):
            return False  # checked first: a spill written must reach the ring
        if not self._spill.write(payload):
            return False  # the reader has not taken the last one yet
        return self._put(_SPILL, b"")

    @staticmethod
    def _size_on_ring(size: int) -> int:
        return (size + 11) & ~7  # a 4-byte mark or length first, padded to 8

    def _room(self, need: int) -> bool:
        tail = self._tail.value
        index = tail & self._mask
        skip = self._capacity - index if index + need > self._capacity else 0
        return self._capacity - (tail - self._head.value) >= skip + need

    def _put(self, mark: int, payload: bytes) -> bool:
        size = len(payload)
        tail = self._tail.value
        index = tail & self._mask
        need = (size + 11) & ~7
        skip = self._capacity - index if index + need > self._capacity else 0
        if self._capacity - (tail - self._head.value) < skip + need:
            return False
        if _fence is not None:
            _fence()  # the reader finished with the bytes behind the head before they are overwritten
        start = self._data + index
        if skip:
            _LENGTH.pack_into(self._map, start, _WRAP)
            start = self._data
        _LENGTH.pack_into(self._map, start, mark)
        self._map[start + 4 : start + 4 + size] = payload
        if _fence is not None:
            _fence()
        self._tail.value = tail + skip + need  # published last: the reader trusts what is before it
        return True

    def get(self) -> Any:
        """The next message, or ``EMPTY``."""
        head = self._head.value
        if head == self._tail.value:
            return EMPTY
        if _fence is not None:
            _fence()  # the bytes before the tail just seen are read only after it
        index = head & self._mask
        (mark,) = _LENGTH.unpack_from(self._map, self._data + index)
        if mark == _WRAP:
            head += self._capacity - index
            index = 0
            (mark,) = _LENGTH.unpack_from(self._map, self._data)
        start = self._data + 4 + index
        if mark == _SPILL:
            if _fence is not None:
                _fence()
            self._head.value = head + self._size_on_ring(0)
            assert self._spill is not None
            return self._codec.decode(self._spill.read())
        try:
            # A copy (bytes): the space goes back to the writer, and a refused message holds none of it.
            return self._codec.decode(self._map[start : start + mark])
        finally:  # a refused message is consumed all the same: the next one is readable
            if _fence is not None:
                _fence()  # done with the bytes before handing their space back
            self._head.value = head + self._size_on_ring(mark)

    def close(self) -> None:
        del self._tail, self._head
        if self._spill is not None:
            self._spill.close()


class Spill:
    """Where one direction's messages too big for its ring go: a shared-memory file with no name
    (a memfd both processes hold), one message at a time, and a word in the control segment that
    holds its size until the reader has taken it (0: free). Read with ``pread``, not mapped: a
    file truncated under a mapping raises SIGBUS."""

    def __init__(self, fd: int, buffer: mmap.mmap, offset: int) -> None:
        self._fd = fd
        self._size = ctypes.c_uint64.from_buffer(buffer, offset)

    def reset(self) -> None:
        os.ftruncate(self._fd, 0)
        self._size.value = 0

    def write(self, payload: bytes) -> bool:
        """Hold ``payload``; False while the reader has not taken the last one."""
        if self._size.value:
            return False
        os.ftruncate(self._fd, len(payload))
        with memoryview(payload) as view:
            written = 0
            while written < len(view):
                written += os.pwrite(self._fd, view[written:], written)
        self._size.value = len(payload)  # before the ring's mark, which the ring publishes
        return True

    def read(self) -> bytes:
        """The message it holds; then it is free (and its memory given back)."""
        # No more than the file holds: the size word is shared memory the writer could set to anything.
        size = min(self._size.value, os.fstat(self._fd).st_size)
        chunks = []
        done = 0
        while done < size:
            chunk = os.pread(self._fd, size - done, done)
            if not chunk:
                break  # shorter than announced: the decoder says so
            chunks.append(chunk)
            done += len(chunk)
        os.ftruncate(self._fd, 0)
        self._size.value = 0
        return b"".join(chunks)

    def close(self) -> None:
        del self._size


_ONE = (1).to_bytes(8, sys.byteorder)


def wake(eventfd: int) -> None:
    """Announce a message on an eventfd (``os.eventfd_write`` needs Python 3.10; this does not)."""
    os.write(eventfd, _ONE)


def wait(eventfd: int) -> None:
    """Block until something was announced on ``eventfd`` (and take every announcement so far)."""
    os.read(eventfd, 8)


def new_segment(name: str, size: int) -> int:
    """A shared-memory file of ``size`` bytes with no path (memfd; ``name`` only labels it in
    /proc): no other process can open it. It reaches the model process as an inherited file
    descriptor (close-on-exec, so no other child of the server inherits it)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        raise
    return fd


def map_segment(fd: int, size: int) -> mmap.mmap:
    """Map the first ``size`` bytes of the segment open as ``fd``."""
    if os.fstat(fd).st_size < size:
        raise ValueError(f"the segment has {os.fstat(fd).st_size} bytes, not {size}")
    return mmap.mmap(fd, size)


def ring_pair(
    buffer: mmap.mmap, capacity: int, spills: tuple[int, int], codec: trt_pb_wire.Codec
) -> tuple[Ring, Ring]:
    """The two rings of a control segment, (server to model, model to server), and their spills
    (memfds, in that order). The segment holds the rings, then two words for the spills' sizes."""
    size = Ring.bytes_needed(capacity)
    return (
        Ring(buffer, 0, capacity, codec, Spill(spills[0], buffer, 2 * size)),
        Ring(buffer, size, capacity, codec, Spill(spills[1], buffer, 2 * size + 8)),
    )


def control_bytes(capacity: int) -> int:
    """The size of a control segment: two rings, the two spills' sizes."""
    return 2 * Ring.bytes_needed(capacity) + 16


class _Empty:
    def __repr__(self) -> str:
        return "EMPTY"


EMPTY: Any = _Empty()


# What an arena always keeps of its pages. Past it, pages written stay while executions keep using
# them (writing into pages the kernel must first find and zero took 80 ms for 64 MB here, against 8 ms
# into pages already there), and go back (MADV_REMOVE frees shared memory's pages, for both processes)
# once an execution uses under half of what the arena holds: one large request does not leave its
# memory held for good.
KEPT_BYTES = 16 * 1024 * 1024
# An execution whose tensors in an arena come to more than this has them copied on a thread by the
# server; a model process's result says so ("arena_bytes"), so that the server need not add them up.
LARGE_ARENA_BYTES = 1 << 20
# From here numpy's copy is as fast as an mmap slice's (256 KiB: 10 us both) and lets go of the GIL,
# which the slice's holds: another thread's copy then leaves the event loop free.
_COPYTO_BYTES = 1 << 18


class Arena:
    """A shared-memory region filled front to back for one execution, then reused: the ``size``
    bytes from ``start`` of the segment open as ``fd`` (a segment holds one arena per execution
    slot; ``start`` is a multiple of the page size). Offsets are from the arena's own start."""

    def __init__(self, fd: int, size: int, start: int = 0) -> None:
        if os.fstat(fd).st_size < start + size:
            raise ValueError(f"the segment has {os.fstat(fd).st_size} bytes, not {start + size}")
        self.size = size
        self._map = mmap.mmap(fd, size, offset=start)  # this arena's bytes only, not those before it
        self._used = 0
        self._held = 0  # how far pages may have been written: what MADV_REMOVE would give back

    @property
    def used(self) -> int:
        """How far this execution has filled it."""
        return self._used

    def reset(self) -> None:
        """Make room for the next execution; give back what the last one left unused (see KEPT_BYTES)."""
        last, self._used = self._used, 0
        self._held = max(self._held, last)
        remove = getattr(mmap, "MADV_REMOVE", None)  # Linux; elsewhere the pages stay
        if remove is None or self._held <= KEPT_BYTES or 2 * last >= self._held:
            return
        keep = -(-max(last, KEPT_BYTES) // mmap.PAGESIZE) * mmap.PAGESIZE
        if keep < self._held:
            self._map.madvise(remove, keep, self._held - keep)
        self._held = keep

    def put(self, array: np.ndarray) -> tuple[int, int] | None:
        """Copy ``array`` (C-contiguous) in; return (offset, nbytes), or None if it does not fit."""
        nbytes = array.nbytes
        offset = (self._used + 63) & ~63  # cache-line aligned (segments start page-aligned)
        if offset + nbytes > self.size:
            return None
        if nbytes >= _COPYTO_BYTES:
            into = np.frombuffer(self._map, np.uint8, nbytes, offset)
            np.copyto(into, raw_view(array).reshape(-1).view(np.uint8))
        elif nbytes:
            self._map[offset : offset + nbytes] = raw_view(array).data  # a slice copy: cheaper than copyto
        self._used = offset + nbytes
        return offset, nbytes

    def view(self, datatype: str, shape: tuple[int, ...], offset: int) -> np.ndarray:
        """A view of the arena; ValueError (or KeyError) where the description does not fit it."""
        if min(shape, default=0) < 0:  # numpy reads a count of -1 as "all the rest"
            raise ValueError(f"a tensor of shape {list(shape)}")
        if datatype == "BF16" and BF16 is None:
            raise ValueError(BF16_NEEDS)
        array = np.frombuffer(self._map, WIRE_TO_NUMPY[datatype], math.prod(shape), offset)
        return array if len(shape) == 1 else array.reshape(shape)

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:
            pass  # a view is still alive; the mapping goes when it does


def slot_arenas(fd: int, size: int, slots: int) -> list[Arena]:
    """The arenas of the segment open as ``fd``, one of ``size`` bytes per execution slot, back to
    back."""
    return [Arena(fd, size, slot * size) for slot in range(slots)]


def pack_tensors(tensors: dict[str, np.ndarray], arena: Arena | None) -> list[tuple[Any, ...]]:
    """Describe tensors for a frame: ("shm", name, datatype, shape, offset) or ("inline", name, array)."""
    packed: list[tuple[Any, ...]] = []
    for name, array in tensors.items():
        datatype = wire_datatype(array)
        if datatype != "BYTES" and arena is not None:
            if not array.flags.c_contiguous:
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

"""The shared-memory arenas Python models' tensors cross in: large enough for large tensors, holding
the memory a model's executions keep using and giving back what they stop using."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

from trt.server.backends.python.process import ARENA_BYTES
from trt.server.backends.python.stub import _ipc

MiB = 1 << 20


@pytest.fixture
def arena() -> Iterator[tuple[_ipc.Arena, int]]:
    fd = _ipc.new_segment("test_arena", ARENA_BYTES)
    arena = _ipc.Arena(fd, ARENA_BYTES)
    yield arena, fd
    arena.close()
    os.close(fd)


def _resident(fd: int) -> int:
    """Bytes of the segment that hold memory (written and not given back), in MiB."""
    return os.fstat(fd).st_blocks * 512 // MiB


def test_a_64_mb_tensor_crosses_in_the_arena_not_in_the_message(arena: tuple[_ipc.Arena, int]) -> None:
    """With 16 MiB arenas it travelled in the message: a 64 MB round trip took 576 ms against
    Triton's 36 (benchmarks/shared_memory_vs_triton.py)."""
    tensor = np.arange(16_000_000, dtype=np.float32)
    ((how, name, datatype, shape, offset),) = _ipc.pack_tensors({"X": tensor}, arena[0])
    assert (how, name, datatype, tuple(shape)) == ("shm", "X", "FP32", (16_000_000,))
    np.testing.assert_array_equal(
        _ipc.unpack_tensors([(how, name, datatype, shape, offset)], arena[0], True)["X"], tensor
    )


def test_an_arena_keeps_the_pages_its_executions_keep_using_and_gives_back_the_rest(
    arena: tuple[_ipc.Arena, int],
) -> None:
    memory, fd = arena
    seen = []
    for size in (64 * MiB, 64 * MiB, 40 * MiB, 4 * MiB, 1 * MiB):
        memory.reset()
        memory.put(np.ones(size, np.uint8))
        seen.append(_resident(fd))
    memory.reset()
    seen.append(_resident(fd))
    # 64 held while used; 40 of it still used (over half): kept; 4 of 64: back to the 16 kept always.
    assert seen == [64, 64, 64, 64, 16, 16]

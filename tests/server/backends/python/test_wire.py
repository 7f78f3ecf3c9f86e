"""``trt_pb_wire``: what crosses a named spill segment between the server and a model process. It
carries the messages' data both ways, and its decoder refuses anything else before allocating."""

from __future__ import annotations

import mmap
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trt.server.backends.python.stub import _ipc, trt_pb_wire
from trt.server.backends.python.stub.trt_pb_wire import WireError, decode, encode

MESSAGES: list[Any] = [
    (
        "execute",
        3,
        None,
        [("id", [("inline", "T", np.array([b"a", b"\x00b"], dtype=np.object_))], ("Y",), {}, 2**64 - 1, 1)],
    ),
    (
        "result",
        3,
        {"responses": [{"error": ("boom", 13), "outputs": [], "parameters": {"p": 1.5}}], "started_ns": 12},
    ),
    ("call", 1, "load_model", ("m", "", {"1/model.py": b"print()"})),
    (None, True, False, -(2**70), "caf\u00e9", b"", [], {}, ()),
]


@pytest.mark.parametrize("message", MESSAGES)
def test_messages_cross_unchanged(message: Any) -> None:
    assert _same(decode(encode(message)), message)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float16).reshape(3, 4),
        np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
        np.array(7, dtype=np.uint32),
        np.zeros((0, 5), dtype=np.int8),
        np.array([True, False]),
        np.array(["ab", "c"]),
        np.array([b"x", "y", 3], dtype=np.object_),
        np.array([b"ab"] * 6, dtype=np.object_).reshape(2, 3),
    ],
)
def test_arrays_cross_with_their_dtype_and_shape_and_arrive_writable(array: np.ndarray) -> None:
    received = decode(encode(array))
    assert received.dtype == array.dtype and received.shape == array.shape
    assert list(received.flat) == list(array.flat)
    assert received.flags.writeable


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "ends early"),
        (b"x", "unknown tag"),
        (b"NN", "after the message"),
        (b"s\xff\xff\xff\xff", "ends early"),  # a 4 GiB string in 5 bytes
        (b"l\xff\xff\xff\x7f", "ends early"),  # 2 billion items: refused before any list is made
        (b"a\x03<f4\x01" + (10**9).to_bytes(8, "little") + (4 * 10**9).to_bytes(8, "little"), "ends early"),
        (
            b"a\x03<f4\x01" + (4).to_bytes(8, "little") + (3).to_bytes(8, "little") + bytes(3),
            "bytes for an array",
        ),
        (b"a\x03|O8\x00" + bytes(8), "dtype"),  # object arrays only as the o/B forms
        (b"o\x01" + (10**9).to_bytes(8, "little"), "ends early"),
        (b"B\x01" + (1).to_bytes(8, "little") + (-5).to_bytes(8, "little", signed=True), "negative length"),
        (b"m\x01\x00\x00\x00l\x00\x00\x00\x00N", "dict key"),
        (b"t\x01\x00\x00\x00" * 100 + b"N", "too deep"),
        (b"I\x03\x00\x00\x001e9", "not one"),
    ],
)
def test_the_decoder_refuses_what_is_not_a_message(data: bytes, why: str) -> None:
    with pytest.raises(WireError, match=why):
        decode(data)


class _Planted:
    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(os.environ["TRT_TEST_MARKER"]),))


def test_a_pickle_in_a_spill_is_refused_and_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spills were named segments in /dev/shm that another process could write, and their reader
    unpickled them. Now they have no name; and should a peer write a pickle into one all the same,
    it is refused, never run."""
    marker = tmp_path / "ran"
    monkeypatch.setenv("TRT_TEST_MARKER", str(marker))
    spill_fd = _ipc.new_segment("trt_test_spill", 0)
    with mmap.mmap(-1, _ipc.Ring.bytes_needed(1024) + 8) as buffer:
        ring = _ipc.Ring(buffer, 0, 1024, _ipc.Spill(spill_fd, buffer, _ipc.Ring.bytes_needed(1024)))
        before = set(os.listdir("/dev/shm"))
        assert ring.put(("big", np.arange(1000, dtype=np.int64)))  # over max_message: a spill
        assert set(os.listdir("/dev/shm")) == before
        planted = pickle.dumps(("result", _Planted()))
        os.ftruncate(spill_fd, 0)
        os.pwrite(spill_fd, planted.ljust(os.fstat(spill_fd).st_size or len(planted), b"\x00"), 0)
        with pytest.raises(WireError):
            ring.get()
        assert not marker.exists()
        assert ring.get() is _ipc.EMPTY
        ring.close()
    os.close(spill_fd)


def test_a_pickle_naming_a_callable_is_refused_on_the_ring_and_the_socket_and_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ring messages and start-up frames are still pickles (the codec costs 22-28% more CPU per
    request), but their reader names only plain data's globals: a model process, or anything that
    writes where it does, cannot make the server call a function by unpickling."""
    marker = tmp_path / "ran"
    monkeypatch.setenv("TRT_TEST_MARKER", str(marker))
    spill_fd = _ipc.new_segment("trt_test_spill", 0)
    with mmap.mmap(-1, _ipc.Ring.bytes_needed(1024) + 8) as buffer:
        ring = _ipc.Ring(buffer, 0, 1024, _ipc.Spill(spill_fd, buffer, _ipc.Ring.bytes_needed(1024)))
        assert ring.put(("result", _Planted()))
        with pytest.raises(pickle.UnpicklingError, match="may not name pathlib"):
            ring.get()
        assert ring.put(MESSAGES[0])  # the ring goes on, and data still crosses
        assert repr(ring.get()) == repr(MESSAGES[0])
        ring.close()
    os.close(spill_fd)
    with pytest.raises(pickle.UnpicklingError):
        _ipc.FrameReader().feed(_ipc.encode_frame(("hello", _Planted())))
    assert not marker.exists()


def test_values_with_no_place_in_a_message_are_refused_when_sent() -> None:
    with pytest.raises(WireError, match="cannot cross"):
        encode(("result", object()))
    deep: Any = None
    for _ in range(trt_pb_wire.MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(WireError, match="too deep"):
        encode(deep)


def _same(received: Any, sent: Any) -> bool:
    if isinstance(sent, np.ndarray):
        return bool(
            received.dtype == sent.dtype
            and received.shape == sent.shape
            and list(received.flat) == list(sent.flat)
        )
    if isinstance(sent, (tuple, list)):
        return type(received) is type(sent) and len(received) == len(sent) and all(map(_same, received, sent))
    if isinstance(sent, dict):
        return (
            type(received) is dict
            and received.keys() == sent.keys()
            and all(_same(received[k], sent[k]) for k in sent)
        )
    return type(received) is type(sent) and bool(received == sent)

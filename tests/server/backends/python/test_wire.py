"""``trt_pb_wire``: every message between the server and a model process, on the rings, in spills
and on the start-up socket. It carries the messages' data both ways, its decoder refuses anything
else before allocating, and nothing a model process writes is ever unpickled."""

from __future__ import annotations

import json
import mmap
import os
import pickle
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.server.backends.python.wire_values import same
from trt.server.backends.python.stub import _ipc, trt_pb_wire
from trt.server.backends.python.stub.trt_pb_wire import Codec, WireError

TAG = "5b1c0f7e9a2d4c6b8e0f1a3c5d7e9f1b"
CODEC = Codec(TAG)

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
    (None, True, False, -(2**70), "caf\u00e9 \ud800", b"", bytearray(b"\xff"), [], {}, ()),
    ("nested bytes", [[b"x"] * 3, {"k": (b"y", np.float32(2.5), np.int64(-4))}]),
]


@pytest.mark.parametrize("message", MESSAGES)
def test_messages_cross_with_tuples_as_lists(message: Any) -> None:
    assert same(CODEC.decode(CODEC.encode(message)), message)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float16).reshape(3, 4),
        np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
        np.array(7, dtype=np.uint32),
        np.zeros((0, 5), dtype=np.int8),
        np.array([True, False]),
        np.array(["ab", "c"]),
        np.array([b"ab", b"c"]),
        np.array([b"x", "y", 3, [1, 2]], dtype=np.object_),
        np.array([b"ab"] * 6, dtype=np.object_).reshape(2, 3),
        np.array([], dtype=np.object_),
    ],
)
def test_arrays_cross_with_their_dtype_and_shape_and_arrive_writable(array: np.ndarray) -> None:
    received = CODEC.decode(CODEC.encode(array))
    assert received.dtype == array.dtype and received.shape == array.shape
    assert list(received.flat) == list(array.flat)
    assert received.flags.writeable


@pytest.mark.parametrize(
    "elements",
    [
        [b"ab\x00", b"\x00\x00\x00", b"xyz"],  # one length, NULs at the ends kept (cut in C)
        [b"same"] * 500,
        [b""] * 4,
        [b"q"],
        [b"a", b"bc", b"", b"def\x00"],  # lengths that differ (cut one by one)
        # Either side of where lengths stop being read by struct and start being read by numpy.
        [b"x" * (n % 7) for n in range(64)],
        [b"x" * (n % 7) for n in range(65)],
        [b"ab\x00", b"\x00\x00\x00", b"xyz"] * 30,  # many of one length: cut in C
    ],
)
def test_bytes_tensors_arrive_element_for_element_as_bytes(elements: list[bytes]) -> None:
    array = np.array(elements, dtype=np.object_).reshape(len(elements), 1)
    received = CODEC.decode(CODEC.encode(array))
    assert received.shape == array.shape and received.dtype == np.object_
    assert list(received.flat) == elements
    assert {type(element) for element in received.flat} == {bytes}


def test_a_dict_a_client_shaped_like_a_mark_crosses_as_a_dict() -> None:
    """Request parameters reach the model, and a model may echo them back: only the tag the server
    drew for that model process makes a mark, and no client knows it."""
    guessed = {"parameters": {"5" * 32: ["b", 0, 4]}, "data": b"abcd"}
    assert CODEC.decode(CODEC.encode(guessed)) == guessed


def _message(text: str, blobs: bytes = b"", marks: int = 1) -> bytes:
    data = text.encode()
    return struct.pack("<II", len(data), marks) + data + blobs


def _mark(spec: list[Any]) -> str:
    return json.dumps(["result", {TAG: spec}])


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "the message ends early"),
        (struct.pack("<II", 10, 0) + b"[]", "the message ends early"),
        (struct.pack("<II", 8, 0) + b'["caf\xe9"]', "the message's text is not ASCII"),
        (_message("[1,", marks=0), "the message's text is not JSON"),
        (_message("[1] [2]", marks=0), "4 characters after the message"),
        (_message("[1]", b"\x00", marks=0), "1 bytes after the message"),
        (_message("[" * 100_000 + "]" * 100_000, marks=0), "the message nests too deep"),
        (
            _message("1" * 5000, marks=0),
            "the message's text holds an integer too long to read",
        ),
        (_message(_mark(["a", "<f8", [2**40], 0]), bytes(8)), "a blob mark past the message's end"),
        (_message(_mark(["a", "|O8", [1], 0]), bytes(8)), "an array of dtype '|O8'"),
        (_message(_mark(["a", "<f4", [-1], 0]), bytes(8)), "an array shape that is not one"),
        (_message(_mark(["a", "<f4", [1] * 33, 0]), bytes(8)), "an array shape that is not one"),
        (_message(_mark(["a", "<f4", [1], True]), bytes(8)), "a blob mark that is not one"),
        (_message(_mark(["b", 4, 2]), bytes(8)), "a blob mark that is not one"),
        (_message(_mark(["b", 0, 9]), bytes(8)), "a blob mark past the message's end"),
        (
            _message(_mark(["B", [2], 0]), struct.pack("<2q", 1, -1) + b"ab"),
            "a BYTES tensor whose lengths do not fit its blob",
        ),
        (
            _message(_mark(["B", [1], 0]), struct.pack("<q", 2**62) + b"ab"),
            "a BYTES tensor whose lengths do not fit its blob",
        ),
        (  # the same two checks on a tensor too long for the few-items path
            _message(_mark(["B", [65], 0]), struct.pack("<65q", *[1] * 64, -1) + b"a" * 64),
            "a BYTES tensor whose lengths do not fit its blob",
        ),
        (
            _message(_mark(["B", [65], 0]), struct.pack("<65q", *[1] * 64, 2**62) + b"a" * 64),
            "a BYTES tensor whose lengths do not fit its blob",
        ),
        (_message(_mark(["B", [2**40], 0]), bytes(16)), "a blob mark past the message's end"),
        (_message(_mark(["o", [3], [1, 2]])), "an object array whose values do not fill its shape"),
        (_message(_mark(["o", [2**62], []])), "an object array whose values do not fill its shape"),
        (_message(_mark("b")), "a blob mark that is not one"),
        (_message(_mark(["x", 1, 2])), "a blob mark that is not one"),
    ],
)
def test_the_decoder_refuses_what_is_not_a_message(data: bytes, why: str) -> None:
    started = time.perf_counter()
    with pytest.raises(WireError) as refused:
        CODEC.decode(data)
    assert str(refused.value) == why
    assert time.perf_counter() - started < 1.0  # refused from the sizes, before building anything


def test_before_it_has_the_tag_a_codec_takes_no_marks_either_way() -> None:
    """The model process learns the tag from the server's first frame; until then neither side may
    send bytes or arrays."""
    untagged = Codec(None)
    assert untagged.decode(untagged.encode(("init", {"a": "b"}, [1, 2]))) == ["init", {"a": "b"}, [1, 2]]
    with pytest.raises(WireError, match="tag"):
        untagged.encode(("log", b"bytes"))
    with pytest.raises(WireError, match="tag"):
        untagged.decode(CODEC.encode(("log", b"bytes")))


def test_values_with_no_place_in_a_message_are_refused_when_sent() -> None:
    with pytest.raises(WireError, match="cannot cross"):
        CODEC.encode(("result", object()))
    with pytest.raises(WireError, match="cannot cross"):
        CODEC.encode(("result", {(1, 2): "a tuple key"}))
    with pytest.raises(WireError, match="cannot cross"):
        CODEC.encode(("result", np.array([1 + 2j], dtype=np.complex64).astype(np.dtype("V8"))))
    deep: Any = None
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(WireError, match="too deep"):
        CODEC.encode(deep)


class _Planted:
    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(os.environ["TRT_TEST_MARKER"]),))


def test_a_pickle_on_the_ring_in_a_spill_or_on_the_socket_is_refused_and_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ring messages used to be pickles, read by an unpickler that admitted plain data's globals
    (which still let a model process make the server build a frozenset of 2**26 numbers from 40
    bytes). Now nothing is unpickled: a pickle written where a message goes is refused as bytes that
    are not one, and the ring goes on."""
    marker = tmp_path / "ran"
    monkeypatch.setenv("TRT_TEST_MARKER", str(marker))
    planted = pickle.dumps(("result", _Planted()), protocol=5)
    spill_fd = _ipc.new_segment("trt_test_spill", 0)
    with mmap.mmap(-1, _ipc.Ring.bytes_needed(1024) + 8) as buffer:
        spill = _ipc.Spill(spill_fd, buffer, _ipc.Ring.bytes_needed(1024))
        ring = _ipc.Ring(buffer, 0, 1024, CODEC, spill)
        assert ring._put(len(planted), planted)
        with pytest.raises(WireError):
            ring.get()
        assert ring.put(MESSAGES[0])  # the ring goes on, and data still crosses
        assert same(ring.get(), MESSAGES[0])
        assert ring.put(("big", np.arange(1000, dtype=np.int64)))  # over max_message: a spill
        os.ftruncate(spill_fd, 0)
        os.pwrite(spill_fd, planted, 0)
        with pytest.raises(WireError):
            ring.get()
        assert ring.get() is _ipc.EMPTY
        ring.close()
    os.close(spill_fd)
    with pytest.raises(WireError):
        _ipc.FrameReader(CODEC).feed(struct.pack("<I", len(planted)) + planted)
    assert not marker.exists()


def test_a_spill_is_read_no_further_than_its_file_whatever_its_size_word_says() -> None:
    spill_fd = _ipc.new_segment("trt_test_spill", 0)
    with mmap.mmap(-1, 8) as buffer:
        spill = _ipc.Spill(spill_fd, buffer, 0)
        assert spill.write(b"12345678")
        spill._size.value = 2**62  # shared memory: the writer could put anything there
        assert spill.read() == b"12345678"
        spill.close()
    os.close(spill_fd)


def test_without_the_c_encoder_and_scanner_the_public_json_api_gives_thesame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The codec calls the C encoder and scanner of ``json`` directly (the public classes rebuild
    them on every call); a model's interpreter without them, or with another signature, gets the
    public API, which must give the same bytes and values."""
    expected = [(CODEC.encode(message), CODEC.decode(CODEC.encode(message))) for message in MESSAGES]
    monkeypatch.setattr(trt_pb_wire, "_c_make_encoder", None)
    monkeypatch.setattr(trt_pb_wire, "_c_make_scanner", None)
    monkeypatch.setattr(trt_pb_wire, "_encode_plain", trt_pb_wire._encoder(trt_pb_wire._plain_value))
    public = Codec(TAG)
    for message, (encoded, decoded) in zip(MESSAGES, expected, strict=True):
        assert public.encode(message) == encoded
        assert repr(public.decode(encoded)) == repr(decoded)

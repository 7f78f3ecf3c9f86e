"""The channel's codec: what a worker sends is read as hostile, so a frame that lies about a length
is refused before anything of that length is allocated, and a frame over the limit before it is kept."""

from __future__ import annotations

import struct
import tracemalloc

import pytest

from trt.server.frontend import codec
from trt.server.frontend import messages as m


def test_every_kind_of_message_round_trips_in_one_stream_cut_anywhere() -> None:
    sent = [
        m.HttpCall(
            1, "POST", "/v2/models/simple/infer", "a=1", [("content-type", "x"), ("é", "ü")], b"\0" * 9, 5, 6
        ),
        m.HttpAnswer(1, 200, [(b"content-type", b"application/json")], b"{}", False),
        m.GrpcFinish(2, 5, "Request for unknown model: 'x' is not found"),
        m.Chunk(3, b"data: {}\n\n"),
        m.Stop(1500),
    ]
    stream = b"".join(codec.encode(message) for message in sent)
    for cut in range(1, len(stream)):
        reader = codec.FrameReader(1 << 16)
        assert reader.feed(stream[:cut]) + reader.feed(stream[cut:]) == sent


def test_a_frame_over_the_limit_is_refused_from_its_head() -> None:
    reader = codec.FrameReader(1024)
    with pytest.raises(codec.ChannelError, match="a frame of 4294967295 bytes"):
        reader.feed(struct.pack("<IB", 0xFFFFFFFF, 1))


def test_a_field_longer_than_its_frame_is_refused_without_allocating_it() -> None:
    # A GrpcUnary (tag 2) whose path claims 2 GiB inside a frame of 13 bytes.
    body = struct.pack("<q", 7) + struct.pack("<I", 0x7FFFFFFF)
    frame = struct.pack("<IB", len(body) + 1, 2) + body
    tracemalloc.start()
    try:
        with pytest.raises(codec.ChannelError, match="runs past its frame"):
            codec.FrameReader(1 << 20).feed(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_a_pair_count_that_cannot_fit_is_refused_before_the_list_is_built() -> None:
    # An HttpCall whose header list claims 100 million pairs.
    body = struct.pack("<q", 1) + b"".join(struct.pack("<I", 0) for _ in range(3)) + struct.pack("<I", 10**8)
    frame = struct.pack("<IB", len(body) + 1, 1) + body
    with pytest.raises(codec.ChannelError, match="runs past its frame"):
        codec.FrameReader(1 << 20).feed(frame)


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        (struct.pack("<IB", 1, 200), "unknown message tag 200"),
        (struct.pack("<IB", 0, 0), "a frame of 0 bytes"),
        (struct.pack("<IB", 10, 6) + struct.pack("<q", 1) + b"x", "left over"),  # Cancel with a spare byte
        # GrpcFinish (tag 12) whose message claims 100 bytes, and one cut inside its code
        (struct.pack("<IB", 21, 12) + struct.pack("<qqI", 1, 0, 100), "runs past"),
        (struct.pack("<IB", 13, 12) + struct.pack("<qI", 1, 0), "runs past"),
    ],
)
def test_malformed_frames_are_refused(frame: bytes, error: str) -> None:
    with pytest.raises(codec.ChannelError, match=error):
        codec.FrameReader(1 << 20).feed(frame)


def test_text_that_is_not_utf8_is_refused() -> None:
    body = struct.pack("<q", 1) + struct.pack("<I", 2) + b"\xff\xfe"
    with pytest.raises(codec.ChannelError, match="not UTF-8"):
        codec.FrameReader(1 << 20).feed(struct.pack("<IB", len(body) + 1, 3) + body)  # GrpcOpen

"""The channel between a front-end worker and the core: any message of any kind comes out of the frame
reader as it went in, however the stream is cut; and any bytes at all come out as messages or as a
``ChannelError``, never as another exception, with no more than a frame's limit held.

A worker faces the network, so the core reads its channel as hostile (``frontend/codec.py``).
"""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from trt.server.frontend.codec import HEAD_SIZE, ChannelError, FrameReader, encode
from trt.server.frontend.messages import KINDS, Message

MAX_FRAME = 4096

_LATIN1 = st.text(st.characters(max_codepoint=255), max_size=24)
_FIELDS = {
    "int": st.integers(-(2**63), 2**63 - 1),
    "bool": st.booleans(),
    "str": st.text(max_size=24),
    "bytes": st.binary(max_size=64),
    "bytes | SplitBody": st.binary(max_size=64),  # sent whole here; split, see test_split_answers
    "list[tuple[str, str]]": st.lists(st.tuples(_LATIN1, _LATIN1), max_size=4),
    "list[tuple[bytes, bytes]]": st.lists(
        st.tuples(st.binary(max_size=16), st.binary(max_size=16)), max_size=4
    ),
}


def _message(kind: type[Message]) -> st.SearchStrategy[Message]:
    fields = {field.name: _FIELDS[str(field.type)] for field in dataclasses.fields(kind)}
    return st.builds(kind, **fields)


MESSAGES = st.one_of([_message(kind) for kind in KINDS])


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted(min(cut, len(data)) for cut in cuts)
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@given(st.lists(MESSAGES, max_size=6), st.lists(st.integers(0, 2000), max_size=5))
def test_any_messages_come_out_as_they_went_in_however_the_stream_is_cut(
    messages: list[Message], cuts: list[int]
) -> None:
    reader = FrameReader(1 << 20)
    received: list[Message] = []
    for piece in _cut(b"".join(encode(message) for message in messages), cuts):
        received += reader.feed(piece)
    assert received == messages


@given(
    st.lists(st.one_of(st.binary(max_size=64), MESSAGES.map(encode)), max_size=6),
    st.lists(st.integers(0, 500)),
)
def test_any_bytes_come_out_as_messages_or_a_channel_error(parts: list[bytes], cuts: list[int]) -> None:
    reader = FrameReader(MAX_FRAME)
    try:
        for piece in _cut(b"".join(parts), cuts):
            for message in reader.feed(piece):
                assert type(message) in KINDS
            assert len(reader._buffer) < HEAD_SIZE + MAX_FRAME
    except ChannelError:
        pass

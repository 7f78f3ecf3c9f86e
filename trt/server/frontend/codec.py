"""The channel's wire format: length-prefixed frames, a tag, then the message's fields in order.

A worker is another process facing the network, so the core reads what it sends as hostile: a frame's
length is checked against the reader's limit before any of it is kept, every length inside a frame
against the bytes the frame has left before anything is copied out, and a tag must name one of
``messages.KINDS``. Nothing is unpickled. A broken frame raises ``ChannelError``; the reader then
drops the channel (and with it the worker), since the stream cannot be trusted past it.

Frame: u32 length (of what follows), u8 tag, fields. int: i64; bool: u8; str: u32 length + UTF-8;
bytes: u32 length + bytes; a list of bytes pairs: u32 count + each pair as two bytes fields; a list of
str pairs (headers, latin-1): u32 count, the 2 x count u32 lengths, then the text. Little endian.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from trt.server.frontend.messages import KINDS, Message
from trt.server.http.messages import SplitBody

_HEAD = struct.Struct("<IB")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_BOOL = struct.Struct("<B")
HEAD_SIZE = _HEAD.size


class ChannelError(ValueError):
    """A frame that breaks the format or the reader's limit."""


# -- writing --------------------------------------------------------------------------------------


def _put_int(out: list[bytes], value: Any) -> None:
    out.append(_I64.pack(value))


def _put_bool(out: list[bytes], value: Any) -> None:
    out.append(_BOOL.pack(1 if value else 0))


def _put_bytes(out: list[bytes], value: Any) -> None:
    out.append(_U32.pack(len(value)))
    out.append(value)


def _put_body(out: list[bytes], value: Any) -> None:
    # An answer's body, whole or kept in pieces (``SplitBody``): its pieces join the frame's as they
    # are, so a large answer is copied once, into the frame, not first into a body of its own.
    if isinstance(value, SplitBody):
        out.append(_U32.pack(value.size))
        out.extend(value.parts)  # type: ignore[arg-type]  # memoryviews join as bytes do
    else:
        _put_bytes(out, value)


def _put_str(out: list[bytes], value: Any) -> None:
    data = value.encode("utf-8")
    out.append(_U32.pack(len(data)))
    out.append(data)


def _put_str_pairs(out: list[bytes], value: Any) -> None:
    # Header names and values: HTTP's are latin-1 text, so one byte per character, and a whole list
    # goes as its count, every length, then every byte (read back with one unpack and one decode).
    texts = [text.encode("latin-1") for pair in value for text in pair]
    out.append(_U32.pack(len(value)))
    out.append(struct.pack(f"<{len(texts)}I", *(len(text) for text in texts)))
    out.append(b"".join(texts))


def _put_bytes_pairs(out: list[bytes], value: Any) -> None:
    out.append(_U32.pack(len(value)))
    for name, data in value:
        _put_bytes(out, name)
        _put_bytes(out, data)


# -- reading: each returns (value, next offset) and checks lengths before it copies ---------------


def _need(data: memoryview, at: int, size: int) -> None:
    if size > len(data) - at:
        raise ChannelError(f"a field of {size} bytes at {at} runs past its frame of {len(data)}")


def _get_int(data: memoryview, at: int) -> tuple[Any, int]:
    if len(data) - at < 8:
        _need(data, at, 8)
    return _I64.unpack_from(data, at)[0], at + 8


def _get_bool(data: memoryview, at: int) -> tuple[Any, int]:
    _need(data, at, 1)
    return data[at] != 0, at + 1


def _span(data: memoryview, at: int) -> tuple[int, int]:
    """Where the field at ``at`` (u32 length, then that many bytes) starts and ends, checked."""
    if len(data) - at < 4:
        _need(data, at, 4)
    (size,) = _U32.unpack_from(data, at)
    at += 4
    end = at + size
    if end > len(data):
        _need(data, at, size)
    return at, end


def _get_bytes(data: memoryview, at: int) -> tuple[Any, int]:
    at, end = _span(data, at)
    return data[at:end].tobytes(), end


def _get_str(data: memoryview, at: int) -> tuple[Any, int]:
    at, end = _span(data, at)
    try:
        return str(data[at:end], "utf-8"), end
    except UnicodeDecodeError:
        raise ChannelError("a text field that is not UTF-8") from None


def _get_str_pairs(data: memoryview, at: int) -> tuple[Any, int]:
    _need(data, at, 4)
    (count,) = _U32.unpack_from(data, at)
    at += 4
    _need(data, at, count * 8)  # the lengths first: no list longer than the frame can describe
    lengths = struct.unpack_from(f"<{2 * count}I", data, at)
    at += count * 8
    total = sum(lengths)
    _need(data, at, total)
    text = str(data[at : at + total], "latin-1")
    pairs = []
    offset = 0
    for index in range(0, 2 * count, 2):
        middle = offset + lengths[index]
        end = middle + lengths[index + 1]
        pairs.append((text[offset:middle], text[middle:end]))
        offset = end
    return pairs, at + total


def _pairs_reader(
    get: Callable[[memoryview, int], tuple[Any, int]],
) -> Callable[[memoryview, int], tuple[Any, int]]:
    def read(data: memoryview, at: int) -> tuple[Any, int]:
        _need(data, at, 4)
        (count,) = _U32.unpack_from(data, at)
        at += 4
        _need(data, at, count * 8)  # each pair holds two 4-byte lengths at least: no huge list
        pairs = []
        for _ in range(count):
            first, at = get(data, at)
            second, at = get(data, at)
            pairs.append((first, second))
        return pairs, at

    return read


_KINDS_OF_FIELD: dict[
    str, tuple[Callable[[list[bytes], Any], None], Callable[[memoryview, int], tuple[Any, int]]]
] = {
    "int": (_put_int, _get_int),
    "bool": (_put_bool, _get_bool),
    "str": (_put_str, _get_str),
    "bytes": (_put_bytes, _get_bytes),
    "bytes | SplitBody": (_put_body, _get_bytes),  # read back whole
    "list[tuple[str, str]]": (_put_str_pairs, _get_str_pairs),
    "list[tuple[bytes, bytes]]": (_put_bytes_pairs, _pairs_reader(_get_bytes)),
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Layout:
    tag: int
    kind: type[Message]
    names: tuple[str, ...]
    writers: tuple[Callable[[list[bytes], Any], None], ...]
    readers: tuple[Callable[[memoryview, int], tuple[Any, int]], ...]


def _layout(tag: int, kind: type[Message]) -> _Layout:
    fields = dataclasses.fields(kind)
    pairs = [_KINDS_OF_FIELD[str(field.type)] for field in fields]  # a KeyError here: a new field kind
    return _Layout(
        tag,
        kind,
        tuple(field.name for field in fields),
        tuple(w for w, _ in pairs),
        tuple(r for _, r in pairs),
    )


_LAYOUTS = [_layout(tag, kind) for tag, kind in enumerate(KINDS)]
_BY_KIND = {layout.kind: layout for layout in _LAYOUTS}


def encode(message: Message) -> bytes:
    """One frame."""
    layout = _BY_KIND[type(message)]
    out: list[bytes] = [b""]
    for name, write in zip(layout.names, layout.writers, strict=True):
        write(out, getattr(message, name))
    size = sum(map(len, out)) + 1
    out[0] = _HEAD.pack(size, layout.tag)
    return b"".join(out)


def decode_frame(tag: int, body: memoryview) -> Message:
    """The message of one frame's body (what follows its head)."""
    if tag >= len(_LAYOUTS):
        raise ChannelError(f"unknown message tag {tag}")
    layout = _LAYOUTS[tag]
    values = []
    at = 0
    for read in layout.readers:
        value, at = read(body, at)
        values.append(value)
    if at != len(body):
        raise ChannelError(f"{len(body) - at} bytes left over after a {layout.kind.__name__}")
    return layout.kind(*values)


class FrameReader:
    """Frames out of a byte stream; at most ``max_frame`` bytes of one frame are ever held."""

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        if self._buffer:
            self._buffer += data
            source: bytes | bytearray = self._buffer
        else:
            source = data  # the common case: whole frames in one read, parsed without a copy
        messages = []
        at, end = 0, len(source)
        with memoryview(source) as view:
            while end - at >= HEAD_SIZE:
                size, tag = _HEAD.unpack_from(view, at)
                if size > self.max_frame or size < 1:
                    raise ChannelError(f"a frame of {size} bytes (the limit is {self.max_frame})")
                if end - at < 4 + size:
                    break
                messages.append(decode_frame(tag, view[at + HEAD_SIZE : at + 4 + size]))
                at += 4 + size
        if source is self._buffer:
            del self._buffer[:at]
        elif at < end:
            self._buffer += data[at:]
        return messages

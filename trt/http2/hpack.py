"""HPACK (RFC 7541): a strict decoder for the header blocks a peer sends, and the literal encodings we send.

The decoder refuses everything RFC 7541 calls a decoding error (index 0 or past the tables, a table
size update above the ceiling or after the first field, a truncated integer or string, an integer
past 32 bits, Huffman padding that is not a short run of ones, the EOS symbol), so a connection can
treat ``HpackError`` as HTTP/2's COMPRESSION_ERROR. It counts the decoded header list as RFC 9113
6.5.2 does and, past the limit it was given, finishes the block (the dynamic table must stay in step
with the peer's) before raising ``HeaderListTooLarge``.

``generation`` changes whenever the dynamic table does, so a caller may remember what it made of a
block that left the table as it found it (gRPC clients send the same indexed block call after call).

We never index what we send: responses carry a few short literals, and an encoder that indexes must
track the peer's table size settings for little gain.
"""

from __future__ import annotations

from collections import deque

from trt.http2.hpack_tables import HUFFMAN_CODES, STATIC_TABLE

ENTRY_OVERHEAD = 32  # RFC 7541 4.1: an entry's size is its name and value lengths plus 32
_STATIC_COUNT = len(STATIC_TABLE)

Header = tuple[str, str]


class HpackError(Exception):
    """The header block cannot be decoded (HTTP/2 COMPRESSION_ERROR): the connection must end."""


class HeaderListTooLarge(Exception):
    """The decoded header list is over the limit; the block was decoded, the table is in step."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the header list is {size} bytes, over the limit of {limit}")
        self.size, self.limit = size, limit


# -- Huffman decoding, four bits at a time ----------------------------------------------------------
# The code's binary tree has 256 inner nodes; a nibble walks at most one symbol's end (the shortest
# code is 5 bits), so each (inner node, nibble) pair has one next node and at most one symbol.


def _huffman_tables() -> tuple[list[int], list[int], list[bool]]:
    children: list[list[int]] = [[-1, -1]]
    symbol_of: dict[int, int] = {}
    for symbol, (code, length) in enumerate(HUFFMAN_CODES):
        node = 0
        for shift in range(length - 1, -1, -1):
            bit = (code >> shift) & 1
            if children[node][bit] < 0:
                children.append([-1, -1])
                children[node][bit] = len(children) - 1
            node = children[node][bit]
        symbol_of[node] = symbol
    inner = [node for node in range(len(children)) if node not in symbol_of]
    state = {node: index for index, node in enumerate(inner)}  # the root is state 0
    depth = {0: 0}
    all_ones = {0: True}
    for node in inner:  # parents come before children in creation order
        for bit in (0, 1):
            child = children[node][bit]
            depth[child] = depth[node] + 1
            all_ones[child] = all_ones[node] and bit == 1
    next_state = [-1] * (len(inner) * 16)
    emitted = [-1] * (len(inner) * 16)
    for node in inner:
        for nibble in range(16):
            at, symbol = node, -1
            for shift in (3, 2, 1, 0):
                at = children[at][(nibble >> shift) & 1]
                if at in symbol_of:
                    symbol = symbol_of[at]
                    at = 0
                    if symbol == 256:  # EOS inside a string is an error
                        break
            slot = state[node] * 16 + nibble
            if symbol != 256:
                next_state[slot], emitted[slot] = state[at], symbol
    # A string may end at the root, or in a run of at most 7 one-bits (the padding: EOS's prefix).
    ends = [node == 0 or (all_ones[node] and depth[node] <= 7) for node in inner]
    return next_state, emitted, ends


_NEXT, _EMIT, _ENDS = _huffman_tables()


def huffman_decode(data: bytes | memoryview) -> bytes:
    out = bytearray()
    state = 0
    next_state, emitted = _NEXT, _EMIT
    for byte in data:
        slot = (state << 4) | (byte >> 4)
        state = next_state[slot]
        if state < 0:
            raise HpackError("HPACK: the EOS symbol inside a Huffman string")
        if emitted[slot] >= 0:
            out.append(emitted[slot])
        slot = (state << 4) | (byte & 0x0F)
        state = next_state[slot]
        if state < 0:
            raise HpackError("HPACK: the EOS symbol inside a Huffman string")
        if emitted[slot] >= 0:
            out.append(emitted[slot])
    if not _ENDS[state]:
        raise HpackError("HPACK: invalid Huffman padding")
    return bytes(out)


def huffman_encode(data: bytes) -> bytes:
    bits = length = 0
    for byte in data:
        code, size = HUFFMAN_CODES[byte]
        bits, length = (bits << size) | code, length + size
    padding = -length % 8
    bits, length = (bits << padding) | ((1 << padding) - 1), length + padding
    return bits.to_bytes(length // 8, "big")


# -- primitives --------------------------------------------------------------------------------------


def _integer(data: bytes, at: int, prefix_bits: int) -> tuple[int, int]:
    """RFC 7541 5.1: (value, index after it); values past 32 bits are refused."""
    mask = (1 << prefix_bits) - 1
    value = data[at] & mask
    at += 1
    if value < mask:
        return value, at
    shift = 0
    end = len(data)
    while True:
        if at >= end:
            raise HpackError("HPACK: truncated integer")
        byte = data[at]
        at += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at
        if shift > 28:
            raise HpackError("HPACK: integer past 32 bits")


def _string(data: bytes, at: int) -> tuple[str, int]:
    if at >= len(data):
        raise HpackError("HPACK: truncated string")
    huffman = data[at] & 0x80
    length, at = _integer(data, at, 7)
    end = at + length
    if end > len(data):
        raise HpackError("HPACK: truncated string")
    raw = data[at:end]
    return (huffman_decode(raw) if huffman else raw).decode("latin-1"), end


def encode_integer(value: int, prefix_bits: int, flags: int) -> bytes:
    mask = (1 << prefix_bits) - 1
    if value < mask:
        return bytes([flags | value])
    out = bytearray([flags | mask])
    value -= mask
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_string(text: bytes) -> bytes:
    return encode_integer(len(text), 7, 0) + text


def encode_literal(name: str, value: str) -> bytes:
    """A literal field without indexing and with a literal name (RFC 7541 6.2.2), no Huffman."""
    return b"\x00" + _encode_string(name.encode("latin-1")) + _encode_string(value.encode("latin-1"))


_STATIC_FIELD = {field: index + 1 for index, field in reversed(list(enumerate(STATIC_TABLE)))}
_STATIC_NAME = {name: index + 1 for index, (name, _) in reversed(list(enumerate(STATIC_TABLE)))}


def encode_header(name: str, value: str) -> bytes:
    """A field as the static table allows: indexed when it holds the pair, an indexed name when it holds
    the name, else a literal name; never added to the peer's dynamic table."""
    index = _STATIC_FIELD.get((name, value))
    if index is not None:
        return encode_integer(index, 7, 0x80)
    index = _STATIC_NAME.get(name)
    if index is None:
        return encode_literal(name, value)
    return encode_integer(index, 4, 0x00) + _encode_string(value.encode("latin-1"))


# -- decoding ----------------------------------------------------------------------------------------


class HpackDecoder:
    """Decodes header blocks in the order the peer sent them (the dynamic table depends on it).

    ``max_table_size`` is the ceiling we announced (SETTINGS_HEADER_TABLE_SIZE); the peer may lower the
    table below it with a size update. ``max_header_list_size`` (None: no limit) bounds the decoded
    list. ``generation`` changes whenever the dynamic table does.
    """

    def __init__(self, max_table_size: int = 4096, max_header_list_size: int | None = None) -> None:
        self.ceiling = max_table_size
        self.max_table_size = max_table_size
        self.max_header_list_size = max_header_list_size
        self.generation = 0
        self._table: deque[Header] = deque()
        self._size = 0

    def _entry(self, index: int) -> Header:
        if 0 < index <= _STATIC_COUNT:
            return STATIC_TABLE[index - 1]
        offset = index - _STATIC_COUNT - 1
        if 0 <= offset < len(self._table):
            return self._table[offset]
        raise HpackError(f"HPACK: header index {index} is not in the table")

    def _evict(self, limit: int) -> None:
        while self._size > limit and self._table:
            name, value = self._table.pop()
            self._size -= len(name) + len(value) + ENTRY_OVERHEAD

    def _add(self, name: str, value: str) -> None:
        size = len(name) + len(value) + ENTRY_OVERHEAD
        self._evict(self.max_table_size - size)
        if size <= self.max_table_size:
            self._table.appendleft((name, value))
            self._size += size
        self.generation += 1

    def decode(self, data: bytes) -> list[Header]:
        headers: list[Header] = []
        at, end = 0, len(data)
        list_size = 0
        while at < end:
            byte = data[at]
            if byte & 0x80:  # indexed field
                index, at = _integer(data, at, 7)
                if index == 0:
                    raise HpackError("HPACK: header index 0")
                field = self._entry(index)
                headers.append(field)
                list_size += len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
                continue
            if byte & 0xE0 == 0x20:  # dynamic table size update: only before the first field
                if headers:
                    raise HpackError("HPACK: a table size update after a header field")
                size, at = _integer(data, at, 5)
                if size > self.ceiling:
                    raise HpackError(f"HPACK: table size {size} above the {self.ceiling} allowed")
                if size != self.max_table_size:
                    self.max_table_size = size
                    self._evict(size)
                    self.generation += 1
                continue
            indexing = byte & 0xC0 == 0x40
            index, at = _integer(data, at, 6 if indexing else 4)
            if index:
                name = self._entry(index)[0]
            else:
                name, at = _string(data, at)
            value, at = _string(data, at)
            headers.append((name, value))
            list_size += len(name) + len(value) + ENTRY_OVERHEAD
            if indexing:
                self._add(name, value)
        limit = self.max_header_list_size
        if limit is not None and list_size > limit:
            raise HeaderListTooLarge(list_size, limit)
        return headers

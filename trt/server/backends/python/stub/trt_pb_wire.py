"""The encoding of the messages between the server and a Python model's process: a small tagged
binary format whose decoder builds nothing but plain data, instead of pickle, whose loader runs
whatever code the bytes name.

The decoder treats its input as hostile: every length is checked against the bytes left before
anything is allocated, nesting is bounded, array dtypes come from a fixed set, and any fault is a
``WireError`` (a ValueError). What it builds: None, bool, int, float, str, bytes, tuple, list, dict
and numpy arrays (numeric, fixed-width text, and object arrays of the other values, as BYTES
tensors are). Like ``_ipc``, it needs nothing but the standard library and numpy.

Each value is a one-byte tag, then::

    N T F              None, True, False
    i <q> / I <len> d  int: 8 bytes, or its decimal digits when it does not fit
    d <d>              float
    s <len> utf-8      str
    b <len> bytes      bytes
    t / l <count> ...  tuple / list
    m <count> k v ...  dict
    a <dtype> <ndim> <shape q...> <nbytes q> bytes   numeric or fixed-width array, C order
    o <ndim> <shape q...> values                     object array, its values one by one
    B <ndim> <shape q...> <lengths q...> bytes       object array of bytes only (a BYTES tensor)
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any

import numpy as np

MAX_DEPTH = 64
_MAX_DIMS = 32
_MAX_INT_DIGITS = 4300  # Python's own limit on int(str)
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_DTYPE = re.compile(r"[<>|][biufc][1-9][0-9]?|[<>|][SU][0-9]{1,6}")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class WireError(ValueError):
    """Bytes that are not a message this format describes."""


def encode(message: Any) -> bytes:
    out = bytearray()
    _put(out, message, 0)
    return bytes(out)


def _put(out: bytearray, value: Any, depth: int) -> None:
    kind = type(value)
    if kind is str:
        data = value.encode("utf-8", "surrogatepass")
        out += b"s"
        out += _U32.pack(len(data))
        out += data
    elif kind is int:
        if _INT64_MIN <= value <= _INT64_MAX:
            out += b"i"
            out += _I64.pack(value)
        else:
            digits = str(value).encode()
            out += b"I"
            out += _U32.pack(len(digits))
            out += digits
    elif kind is tuple or kind is list:
        if depth >= MAX_DEPTH:
            raise WireError("the message nests too deep")
        out += b"t" if kind is tuple else b"l"
        out += _U32.pack(len(value))
        for item in value:
            _put(out, item, depth + 1)
    elif kind is dict:
        if depth >= MAX_DEPTH:
            raise WireError("the message nests too deep")
        out += b"m"
        out += _U32.pack(len(value))
        for key, item in value.items():
            _put(out, key, depth + 1)
            _put(out, item, depth + 1)
    elif value is None:
        out += b"N"
    elif kind is bool:
        out += b"T" if value else b"F"
    elif kind is float:
        out += b"d"
        out += _F64.pack(value)
    elif kind is bytes or kind is bytearray or kind is memoryview:
        out += b"b"
        out += _U32.pack(len(value))
        out += value
    elif kind is np.ndarray:
        _put_array(out, value, depth)
    elif isinstance(value, np.generic):
        _put(out, value.item(), depth)
    elif isinstance(value, (str, int, float, tuple, list, dict, bytes)):  # subclasses: as the base
        base: type[Any] = next(
            t for t in (bool, str, int, float, tuple, list, dict, bytes) if isinstance(value, t)
        )
        _put(out, base(value), depth)
    else:
        raise WireError(f"a {kind.__name__} cannot cross to or from a model process")


def _put_array(out: bytearray, array: np.ndarray, depth: int) -> None:
    if array.ndim > _MAX_DIMS:
        raise WireError(f"an array of {array.ndim} dimensions cannot cross")
    shape = b"".join(_I64.pack(n) for n in array.shape)
    if array.dtype.kind == "O":
        items = array.ravel().tolist()
        if all(type(item) is bytes for item in items):  # a BYTES tensor: the lengths, then the bytes
            out += b"B"
            out += bytes((array.ndim,))
            out += shape
            out += np.fromiter(map(len, items), dtype="<i8", count=len(items)).tobytes()
            out += b"".join(items)
            return
        out += b"o"
        out += bytes((array.ndim,))
        out += shape
        for item in items:
            _put(out, item, depth + 1)
        return
    dtype = array.dtype.str.encode()
    if not _DTYPE.fullmatch(array.dtype.str):
        raise WireError(f"an array of {array.dtype} cannot cross")
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # the same shape (it is not 0-d: those are contiguous)
    out += b"a"
    out += bytes((len(dtype),))
    out += dtype
    out += bytes((array.ndim,))
    out += shape
    out += _I64.pack(array.nbytes)
    if array.nbytes:
        out += array.data.cast("B")


def decode(data: bytes | bytearray | memoryview) -> Any:
    """The message ``data`` holds, all of it; ``WireError`` if it holds anything else."""
    data = data if type(data) is bytes else bytes(data)  # indexed and sliced faster than a view
    value, position = _Reader(data).value(0, 0)
    if position != len(data):
        raise WireError(f"{len(data) - position} bytes after the message")
    return value


class _Reader:
    __slots__ = ("_data", "_end")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._end = len(data)

    def _take(self, position: int, size: int) -> int:
        """The end of ``size`` bytes from ``position``, which must all be there."""
        end = position + size
        if size < 0 or end > self._end:
            raise WireError("the message ends early")
        return end

    def _u32(self, position: int) -> tuple[int, int]:
        end = self._take(position, 4)
        return _U32.unpack_from(self._data, position)[0], end

    def value(self, position: int, depth: int) -> tuple[Any, int]:
        if depth > MAX_DEPTH:
            raise WireError("the message nests too deep")
        data = self._data
        end = self._take(position, 1)
        tag = data[position]
        position = end
        if tag == 0x73:  # s
            size, position = self._u32(position)
            end = self._take(position, size)
            try:
                return str(data[position:end], "utf-8", "surrogatepass"), end
            except UnicodeDecodeError:
                raise WireError("a string that is not UTF-8") from None
        if tag == 0x69:  # i
            end = self._take(position, 8)
            return _I64.unpack_from(data, position)[0], end
        if tag == 0x74 or tag == 0x6C:  # t, l
            count, position = self._u32(position)
            self._take(position, count)  # each item takes a byte at least
            items = []
            for _ in range(count):
                item, position = self.value(position, depth + 1)
                items.append(item)
            return (tuple(items) if tag == 0x74 else items), position
        if tag == 0x6D:  # m
            count, position = self._u32(position)
            self._take(position, 2 * count)
            mapping: dict[Any, Any] = {}
            for _ in range(count):
                key, position = self.value(position, depth + 1)
                item, position = self.value(position, depth + 1)
                try:
                    mapping[key] = item
                except TypeError:
                    raise WireError("a dict key that cannot be one") from None
            return mapping, position
        if tag == 0x4E:  # N
            return None, position
        if tag == 0x54:  # T
            return True, position
        if tag == 0x46:  # F
            return False, position
        if tag == 0x64:  # d
            end = self._take(position, 8)
            return _F64.unpack_from(data, position)[0], end
        if tag == 0x62:  # b
            size, position = self._u32(position)
            end = self._take(position, size)
            return data[position:end], end
        if tag == 0x61:  # a
            return self._array(position)
        if tag == 0x6F:  # o
            return self._object_array(position, depth)
        if tag == 0x42:  # B
            return self._bytes_array(position)
        if tag == 0x49:  # I
            size, position = self._u32(position)
            end = self._take(position, size)
            digits = data[position:end]
            if size > _MAX_INT_DIGITS or not re.fullmatch(rb"-?[0-9]+", digits):
                raise WireError("an integer that is not one")
            return int(digits), end
        raise WireError(f"unknown tag {tag:#x}")

    def _shape(self, position: int) -> tuple[tuple[int, ...], int]:
        end = self._take(position, 1)
        ndim = self._data[position]
        if ndim > _MAX_DIMS:
            raise WireError(f"an array of {ndim} dimensions")
        position, end = end, self._take(end, 8 * ndim)
        shape = struct.unpack_from(f"<{ndim}q", self._data, position)
        if any(n < 0 for n in shape):
            raise WireError("a negative dimension")
        return shape, end

    def _array(self, position: int) -> tuple[np.ndarray, int]:
        end = self._take(position, 1)
        size = self._data[position]
        position, end = end, self._take(end, size)
        name = str(self._data[position:end], "ascii", "replace")
        if not _DTYPE.fullmatch(name):
            raise WireError(f"an array of dtype '{name}'")
        dtype = np.dtype(name)
        shape, position = self._shape(end)
        end = self._take(position, 8)
        (nbytes,) = _I64.unpack_from(self._data, position)
        if nbytes != math.prod(shape) * dtype.itemsize:
            raise WireError(f"{nbytes} bytes for an array of shape {list(shape)} and dtype '{name}'")
        position, end = end, self._take(end, nbytes)  # before allocating
        array = np.empty(shape, dtype)
        if nbytes:
            array.data.cast("B")[:] = self._data[position:end]
        return array, end

    def _object_array(self, position: int, depth: int) -> tuple[np.ndarray, int]:
        shape, position = self._shape(position)
        count = math.prod(shape)
        self._take(position, count)  # each value takes a byte at least: before allocating
        array = np.empty(count, dtype=np.object_)
        for index in range(count):
            array[index], position = self.value(position, depth + 1)
        return array.reshape(shape), position

    def _bytes_array(self, position: int) -> tuple[np.ndarray, int]:
        shape, position = self._shape(position)
        count = math.prod(shape)
        end = self._take(position, 8 * count)  # before allocating
        lengths = np.frombuffer(self._data, dtype="<i8", count=count, offset=position)
        if count and int(lengths.min()) < 0:
            raise WireError("a negative length")
        if count and int(lengths.max()) > self._end - end:  # also keeps the sum from overflowing
            raise WireError("the message ends early")
        total = int(lengths.sum()) if count else 0
        self._take(end, total)
        offsets = np.full(count + 1, end, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        offsets[1:] += end
        data = self._data
        array = np.empty(count, dtype=np.object_)
        array[:] = [data[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
        return array.reshape(shape), end + total

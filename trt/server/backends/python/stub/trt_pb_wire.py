"""The encoding of every message between the server and a Python model's process, both ways: JSON
text for the structure, parsed by the standard library's C parser, and the bytes of arrays and
bytes values after it. No pickle: whoever wrote the bytes, a reader builds nothing but plain data.

A message is::

    <u32 text length> <u32 number of marks> <the JSON text, ASCII> <blob bytes>

Tuples arrive as lists, dict keys as strings (JSON has neither tuples nor other keys) and numpy
scalars as Python numbers. A bytes value or a numpy array is written as a *mark*: a JSON object
whose only key is the codec's ``tag`` and whose value says what to build, mostly from blob bytes::

    ["b", start, end]               bytes
    ["a", dtype, shape, start]      numeric or fixed-width text array, C order
    ["B", shape, start]             object array of bytes only (a BYTES tensor): int64 lengths,
                                    then the bytes
    ["o", shape, [values...]]       object array of any other values

The server draws the tag for each model process and tells it at start-up, so that no dict a client
sends (request parameters) and a model echoes back can be read as a mark; before that the tag is
None and a message with marks is refused. The decoder treats its input as hostile: every mark is
checked against the blob bytes there are before anything is allocated, array dtypes come from a
fixed set, nesting is bounded by the parser's recursion limit, and any fault is a ``WireError`` (a
ValueError). Like ``_ipc``, this needs nothing but the standard library and numpy, so it runs under
the interpreter of the model's ``EXECUTION_ENV_PATH`` too.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import struct
from collections.abc import Callable
from json import decoder as json_decoder
from json import encoder as json_encoder
from json import scanner as json_scanner
from typing import Any

import numpy as np

_HEAD = struct.Struct("<II")
# Kinds of message that carry their tensors inline (a BLS call, its answer, a decoupled model's
# response): they go straight to the encoder with marks, where trying the plain one first took
# 3-10 us before it met the first array (any kind is still encoded right either way).
_INLINE_TENSOR_KINDS = frozenset({"answer", "bls", "bls_stream", "response"})
# A BYTES tensor of up to this many items has its lengths written and read by struct, and is cut in
# Python: numpy's reductions cost about 5 us each, so one item (an LLM's text, a prompt) took 23 us to
# read against 2.4, and 16 items 27 us against 4.5.
_FEW_ITEMS = 64
_ITEM_LENGTHS = [struct.Struct(f"<{count}q") for count in range(_FEW_ITEMS + 1)]
_MAX_DIMS = 32
_DTYPE = re.compile(r"[<>|][biufc][1-9][0-9]?|[<>|][SU][0-9]{1,6}")
_DTYPES: dict[str, np.dtype[Any]] = {}  # the dtypes built so far, by name (a small, fixed set)
_BFLOAT16_NAME = "bfloat16"  # ml_dtypes' bfloat16, whose dtype.str ("<V2") says only "two bytes"
BF16_NEEDS = "BF16 tensors need ml_dtypes in the model's environment (pip install ml_dtypes)"


def _bfloat16() -> np.dtype[Any] | None:
    """ml_dtypes' bfloat16 where this interpreter has it (the server's does; a model's own
    execution environment may not, and then cannot take BF16 tensors)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    dtype: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return dtype


BF16 = _bfloat16()


def is_bfloat16(dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype`` is ml_dtypes' bfloat16. Asked of every tensor a model touches: numpy
    builds ``dtype.name`` in Python (about 3 us), ``kind`` is a field, and bfloat16's is "V"."""
    return dtype.kind == "V" and dtype == BF16


# The C encoder and scanner of the standard library's json, called directly: the public classes
# build the same objects again on every call. Other interpreters fall back to the public API.
_c_make_encoder = getattr(json_encoder, "c_make_encoder", None)
_c_make_scanner = getattr(json_scanner, "c_make_scanner", None)


class WireError(ValueError):
    """Bytes that are not a message this format describes, or a value that cannot be sent."""


class Codec:
    """Encodes and decodes messages whose blob marks carry ``tag`` (None: messages with none)."""

    def __init__(self, tag: str | None) -> None:
        self.tag = tag
        self._scan_plain = _scanner(None)  # for messages without marks: no hook to call

    # -- encoding ------------------------------------------------------------------------------

    def encode(self, message: Any) -> bytes:
        if (
            type(message) is tuple
            and message
            and type(message[0]) is str
            and message[0] in _INLINE_TENSOR_KINDS
        ):
            return self._encode_with_marks(message)
        try:  # most messages hold no bytes or arrays: one encoder for all of them, made once
            text = _text(_encode_plain, message)
        except _HasMarks:
            return self._encode_with_marks(message)
        return _HEAD.pack(len(text), 0) + text

    def _encode_with_marks(self, message: Any) -> bytes:
        blobs: list[bytes] = []
        tag, size, marks = self.tag, 0, 0

        def mark(value: Any) -> Any:
            nonlocal marks
            is_array = type(value) is np.ndarray
            if not is_array and not isinstance(value, (bytes, bytearray, memoryview)):
                return _plain_value(value)  # a numpy scalar, or refused
            if tag is None:
                raise WireError("bytes and arrays cannot cross before the codec has its tag")
            marks += 1
            return {tag: _array_mark(value, mark_bytes) if is_array else mark_bytes(value)}

        def mark_bytes(value: bytes | bytearray | memoryview) -> list[Any]:
            nonlocal size
            data = value if type(value) is bytes else bytes(value)
            blobs.append(data)
            start, size = size, size + len(data)
            return ["b", start, size]

        text = _text(_encoder(mark), message)
        return b"".join((_HEAD.pack(len(text), marks), text, *blobs))

    # -- decoding ------------------------------------------------------------------------------

    def decode(self, data: bytes | bytearray | memoryview) -> Any:
        """The message ``data`` holds, all of it; ``WireError`` if it holds anything else."""
        data = data if type(data) is bytes else bytes(data)
        if len(data) < _HEAD.size:
            raise WireError("the message ends early")
        length, marks = _HEAD.unpack_from(data)
        end = _HEAD.size + length
        if end > len(data):
            raise WireError("the message ends early")
        try:
            text = str(data[_HEAD.size : end], "ascii")
        except UnicodeDecodeError:
            raise WireError("the message's text is not ASCII") from None
        if marks and self.tag is None:
            raise WireError("a message with blobs before the codec has its tag")
        if marks:
            scan = _scanner(_BlobReader(self.tag, data, end).hook)
        elif end != len(data):
            raise WireError(f"{len(data) - end} bytes after the message")
        else:
            scan = self._scan_plain
        try:
            value, position = scan(text, 0)
        except WireError:  # from a mark
            raise
        except StopIteration:
            raise WireError("the message's text is not JSON") from None
        except json_decoder.JSONDecodeError as exc:
            raise WireError(f"the message's text is not JSON: {exc.msg}") from None
        except RecursionError:
            raise WireError("the message nests too deep") from None
        except ValueError:  # an integer of more digits than Python reads (int_max_str_digits)
            raise WireError("the message's text holds an integer too long to read") from None
        if position != len(text):
            raise WireError(f"{len(text) - position} characters after the message")
        return value


def _text(encode: Callable[[Any], str], message: Any) -> bytes:
    """The JSON text of ``message``, its faults as ``WireError`` (``_HasMarks`` passes through)."""
    try:
        return encode(message).encode("ascii")
    except RecursionError:
        raise WireError("the message nests too deep") from None
    except (TypeError, ValueError) as exc:  # a dict key JSON cannot have, a circular list
        if isinstance(exc, WireError):
            raise
        raise WireError(f"the message cannot cross: {exc}") from None


class _HasMarks(Exception):
    """The message holds bytes or an array: it takes the encoder that writes marks."""


def _plain_value(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if type(value) is np.ndarray or isinstance(value, (bytes, bytearray, memoryview)):
        raise _HasMarks
    raise WireError(f"a {type(value).__name__} cannot cross to or from a model process")


def _encoder(default: Callable[[Any], Any]) -> Callable[[Any], str]:
    if _c_make_encoder is not None:
        try:
            make = _c_make_encoder(
                None, default, json_encoder.encode_basestring_ascii, None, ":", ",", False, False, True
            )
        except TypeError:  # another interpreter's private signature: the public API below
            pass
        else:
            return lambda message: "".join(make(message, 0))
    return json.JSONEncoder(separators=(",", ":"), check_circular=False, default=default).encode


class _Context:
    """What the C scanner reads its settings from (a JSONDecoder carries the same)."""

    __slots__ = (
        "memo",
        "object_hook",
        "object_pairs_hook",
        "parse_constant",
        "parse_float",
        "parse_int",
        "strict",
    )

    def __init__(self, object_hook: Callable[[dict[str, Any]], Any] | None) -> None:
        self.strict = True
        self.object_hook = object_hook
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = _CONSTANTS.__getitem__
        self.memo: dict[str, str] = {}


_CONSTANTS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _scanner(object_hook: Callable[[dict[str, Any]], Any] | None) -> Callable[[str, int], tuple[Any, int]]:
    if _c_make_scanner is not None:
        return _c_make_scanner(_Context(object_hook))  # type: ignore[no-any-return]
    return json_decoder.JSONDecoder(object_hook=object_hook).scan_once  # type: ignore[attr-defined,no-any-return]


# -- arrays --------------------------------------------------------------------------------------


def _array_mark(array: np.ndarray, mark_bytes: Callable[[bytes | memoryview], list[Any]]) -> list[Any]:
    if array.ndim > _MAX_DIMS:
        raise WireError(f"an array of {array.ndim} dimensions cannot cross")
    shape = list(array.shape)
    if array.dtype.kind == "O":
        items = array.ravel().tolist()
        if set(map(type, items)) <= {bytes}:  # a BYTES tensor: the lengths, then the bytes
            if len(items) <= _FEW_ITEMS:
                lengths = _ITEM_LENGTHS[len(items)].pack(*map(len, items))
            else:
                lengths = np.fromiter(map(len, items), dtype="<i8", count=len(items)).tobytes()
            start = mark_bytes(lengths + b"".join(items))[1]
            return ["B", shape, start]
        return ["o", shape, items]
    name = _BFLOAT16_NAME if is_bfloat16(array.dtype) else array.dtype.str
    if name != _BFLOAT16_NAME and not _DTYPE.fullmatch(name):
        raise WireError(f"an array of {array.dtype} cannot cross")
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # the same shape (it is not 0-d: those are contiguous)
    bits = array.view(np.uint16) if name == _BFLOAT16_NAME else array  # bfloat16 exports no buffer
    start = mark_bytes(bits.data.cast("B") if array.nbytes else b"")[1]
    return ["a", name, shape, start]


class _BlobReader:
    """Builds the values that blob marks stand for, from the blob bytes after the text."""

    __slots__ = ("_data", "_start", "_tag")

    def __init__(self, tag: str | None, data: bytes, start: int) -> None:
        self._tag = tag
        self._data = data
        self._start = start

    def hook(self, mapping: dict[str, Any]) -> Any:
        if len(mapping) != 1 or self._tag not in mapping:
            return mapping
        spec = mapping[self._tag]
        if type(spec) is not list or not spec:
            raise WireError("a blob mark that is not one")
        kind = spec[0]
        if kind == "b" and len(spec) == 3:
            start, end = self._span(spec[1], spec[2])
            return self._data[start:end]
        if kind == "a" and len(spec) == 4:
            return self._array(spec[1], _shape(spec[2]), spec[3])
        if kind == "B" and len(spec) == 3:
            return self._bytes_array(_shape(spec[1]), spec[2])
        if kind == "o" and len(spec) == 3:
            return _object_array(_shape(spec[1]), spec[2])
        raise WireError("a blob mark that is not one")

    def _span(self, start: Any, end: Any) -> tuple[int, int]:
        """Blob offsets as offsets into the message, checked to lie within its blob bytes."""
        if type(start) is not int or type(end) is not int or not 0 <= start <= end:
            raise WireError("a blob mark that is not one")
        start, end = self._start + start, self._start + end
        if end > len(self._data):
            raise WireError("a blob mark past the message's end")
        return start, end

    def _array(self, name: Any, shape: tuple[int, ...], start: Any) -> np.ndarray:
        dtype = _DTYPES.get(name) if type(name) is str else None
        if dtype is None:
            if name == _BFLOAT16_NAME:
                if BF16 is None:
                    raise WireError(BF16_NEEDS)
                dtype = _DTYPES[name] = BF16
            elif type(name) is not str or not _DTYPE.fullmatch(name):
                raise WireError(f"an array of dtype {name!r}")
            else:
                dtype = _DTYPES[name] = np.dtype(name)
        count = math.prod(shape)
        begin, end = self._span(start, start + count * dtype.itemsize if type(start) is int else None)
        array = np.empty(shape, dtype)  # after the check: its bytes are all there
        if end > begin:
            bits = array.view(np.uint16) if name == _BFLOAT16_NAME else array
            bits.data.cast("B")[:] = memoryview(self._data)[begin:end]
        return array

    def _bytes_array(self, shape: tuple[int, ...], start: Any) -> np.ndarray:
        count = math.prod(shape)
        begin, end = self._span(start, start + 8 * count if type(start) is int else None)
        if not count:
            return np.empty(shape, dtype=np.object_)
        data = self._data
        if count <= _FEW_ITEMS:
            return self._few_bytes(shape, count, begin, end)
        lengths = np.frombuffer(data, "<i8", count, begin)  # all there: checked above
        shortest, longest, room = int(lengths.min()), int(lengths.max()), len(data) - end
        # Where every length fits but gigabytes of them might pass int64's range, Python's integers
        # check the total first: then no running sum of the int64 ones below can wrap round.
        if shortest < 0 or longest > room or (count * longest > 2**62 and sum(lengths.tolist()) > room):
            raise WireError("a BYTES tensor whose lengths do not fit its blob")
        stops = np.cumsum(lengths)
        if int(stops[-1]) > room:
            raise WireError("a BYTES tensor whose lengths do not fit its blob")
        if shortest == longest and 0 < longest < 2**31:  # one length (ids, hashes): cut in C
            array = np.frombuffer(data, f"V{longest}", count, end).astype(np.object_)
        else:
            bounds = [end, *(stops + end).tolist()]
            array = np.empty(count, dtype=np.object_)
            array[:] = [data[a:b] for a, b in itertools.pairwise(bounds)]
        return array.reshape(shape)

    def _few_bytes(self, shape: tuple[int, ...], count: int, begin: int, end: int) -> np.ndarray:
        data = self._data
        items = []
        for length in _ITEM_LENGTHS[count].unpack_from(data, begin):  # all there: checked by the caller
            stop = end + length
            if length < 0 or stop > len(data):
                raise WireError("a BYTES tensor whose lengths do not fit its blob")
            items.append(data[end:stop])
            end = stop
        array = np.empty(count, dtype=np.object_)
        array[:] = items
        return array.reshape(shape)


def _shape(value: Any) -> tuple[int, ...]:
    if type(value) is not list or len(value) > _MAX_DIMS or any(type(n) is not int or n < 0 for n in value):
        raise WireError("an array shape that is not one")
    return tuple(value)


def _object_array(shape: tuple[int, ...], items: Any) -> np.ndarray:
    if type(items) is not list or len(items) != math.prod(shape):
        raise WireError("an object array whose values do not fill its shape")
    array = np.empty(len(items), dtype=np.object_)
    for index, item in enumerate(items):  # one by one: a list value must not be broadcast
        array[index] = item
    return array.reshape(shape)


_encode_plain = _encoder(_plain_value)

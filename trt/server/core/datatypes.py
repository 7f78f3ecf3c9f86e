"""Triton's tensor data types: wire names, config enum names, numpy dtypes and byte layouts.

BYTES tensors are numpy object arrays of ``bytes``; on the wire each element is a 4-byte
little-endian length followed by its bytes (the HTTP binary extension, gRPC raw contents and
shared memory all use this layout).
"""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np

from trt.server.core.errors import InvalidInput, request_label

# numpy has no bfloat16; ml_dtypes adds one (as tritonclient, JAX and TensorFlow use). Its arrays
# cannot export a buffer, so their bytes are read and written through a uint16 view.
BF16_DTYPE = np.dtype(ml_dtypes.bfloat16)

# Wire datatype name -> numpy dtype.
_WIRE_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": BF16_DTYPE,
    "BYTES": np.dtype(np.object_),
}
_NUMPY_TO_WIRE: dict[np.dtype, str] = {dt: name for name, dt in _WIRE_TO_NUMPY.items()}

WIRE_DATATYPES: frozenset[str] = frozenset(_WIRE_TO_NUMPY)
# Triton's name for a datatype it does not know. Its gRPC front end hands such an input on under this
# name, and the core refuses it against the model's input in its own words ("inference input 'X'
# data-type is '<invalid>', but model 'M' expects 'FP32'"); trt's gRPC decoder does the same.
INVALID_DATATYPE = "<invalid>"
# The data an input of that datatype carries to the core: ``tensor_from_bytes`` gives it for any
# bytes. It is never read: no model declares the datatype, so the model's checks refuse the input in
# Triton's words ("inference input 'X' data-type is '<invalid>', but model 'M' expects 'FP32'").
UNDECODED = np.empty(0, np.uint8)
UNDECODED.flags.writeable = False
# The numpy dtype of each datatype whose elements have a fixed size (all but BYTES).
FIXED_SIZE_DTYPES: dict[str, np.dtype] = {name: dt for name, dt in _WIRE_TO_NUMPY.items() if name != "BYTES"}


def wire_to_numpy(datatype: str) -> np.dtype:
    """numpy dtype for a wire datatype name such as ``"FP32"``."""
    try:
        return _WIRE_TO_NUMPY[datatype]
    except KeyError:
        raise InvalidInput(f"unsupported datatype '{datatype}'") from None


def numpy_to_wire(dtype: np.dtype) -> str:
    """Wire datatype name for a numpy dtype; unicode and bytes arrays are BYTES."""
    if dtype.kind in ("U", "S", "O"):
        return "BYTES"
    try:
        return _NUMPY_TO_WIRE[np.dtype(dtype)]
    except KeyError:
        raise InvalidInput(f"unsupported numpy dtype {dtype}") from None


def config_to_wire(config_type: str) -> str:
    """``TYPE_FP32`` -> ``FP32``; ``TYPE_STRING`` -> ``BYTES``."""
    name = config_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def wire_to_config(datatype: str) -> str:
    """``FP32`` -> ``TYPE_FP32``; ``BYTES`` -> ``TYPE_STRING``."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def element_size(datatype: str) -> int:
    """Bytes per element of a fixed-size datatype (0 for BYTES, whose elements vary)."""
    if datatype == "BYTES":
        return 0
    return _WIRE_TO_NUMPY[datatype].itemsize


MAX_DIMENSIONS = 64  # numpy's limit on the number of dimensions of an array


_MAX_ARRAY_BYTES = 2**63 - 1  # numpy's bound on an array's size in bytes (8-byte elements at most)


def check_shape(name: str, shape: tuple[int, ...]) -> None:
    """Refuse, as a bad request, shapes no tensor can have: negative sizes, too many dimensions, or
    sizes numpy cannot even describe (a zero-element tensor with a huge dimension among them)."""
    if len(shape) > MAX_DIMENSIONS:
        raise InvalidInput(
            f"input '{name}': shape has {len(shape)} dimensions; at most {MAX_DIMENSIONS} are supported"
        )
    product = 8
    for dim in shape:
        if dim < 0:
            raise InvalidInput(f"input '{name}': shape {list(shape)} has a negative dimension")
        if dim:
            product *= dim
    if product > _MAX_ARRAY_BYTES:
        raise InvalidInput(f"input '{name}': shape {list(shape)} is larger than any tensor can be")


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


_LENGTH = struct.Struct("<I")


def serialize_bytes_tensor(array: np.ndarray) -> bytes:
    """Length-prefixed encoding of a BYTES tensor, row-major."""
    parts: list[bytes] = []
    pack = _LENGTH.pack
    for item in array.reshape(-1):
        if isinstance(item, str):
            data = item.encode("utf-8")
        elif isinstance(item, bytes | bytearray | memoryview):
            data = bytes(item)
        else:
            data = str(item).encode("utf-8")
        parts.append(pack(len(data)))
        parts.append(data)
    return b"".join(parts)


# BYTES elements one tensor may have (--max-bytes-elements): each becomes a Python object, and
# decoding costs about 0.5 us of the event loop per element, so a body of tiny strings is the costliest
# per byte a client can send. Process-wide: both transports decode through this module.
DEFAULT_MAX_BYTES_ELEMENTS = 1 << 20
_limits = {"bytes_elements": DEFAULT_MAX_BYTES_ELEMENTS}


def set_max_bytes_elements(count: int) -> None:
    """The largest BYTES tensor (in elements) a request may carry; 0 lifts the bound."""
    _limits["bytes_elements"] = max(0, count)


def check_bytes_elements(name: str, count: int) -> None:
    limit = _limits["bytes_elements"]
    if limit and count > limit:
        raise InvalidInput(
            f"input '{name}': a BYTES tensor of {count} elements is over the server's limit of {limit} "
            "(--max-bytes-elements)"
        )


def deserialize_bytes_tensor(buffer: bytes | memoryview, count: int, name: str) -> np.ndarray:
    """Decode ``count`` length-prefixed elements; reject buffers that are short or too long.

    The count a request declares is checked against the bytes it sent before anything is allocated:
    every element takes at least its 4-byte length."""
    total = len(buffer)
    if count * 4 > total:
        raise InvalidInput(
            f"input '{name}': BYTES data of {total} bytes cannot hold the {count} elements its shape "
            "declares (each takes at least 4 bytes)"
        )
    check_bytes_elements(name, count)
    raw = buffer if isinstance(buffer, bytes) else bytes(buffer)  # slicing bytes copies once, not twice
    unpack = _LENGTH.unpack_from
    items: list[bytes] = []
    append = items.append
    offset = 0
    for index in range(count):
        if offset + 4 > total:
            raise InvalidInput(
                f"input '{name}': BYTES data holds fewer elements than its shape requires "
                f"(expected {count}, found {index})"
            )
        (length,) = unpack(raw, offset)
        offset += 4
        if offset + length > total:
            raise InvalidInput(
                f"input '{name}': BYTES element {index} claims {length} bytes but only "
                f"{total - offset} remain"
            )
        append(raw[offset : offset + length])
        offset += length
    if offset != total:
        raise InvalidInput(
            f"input '{name}': BYTES data has {total - offset} bytes beyond the {count} elements of its shape"
        )
    out = np.empty(count, dtype=np.object_)
    out[:] = items
    return out


def tensor_to_bytes(array: np.ndarray, datatype: str) -> bytes | memoryview:
    """Raw little-endian bytes of a tensor (a view where possible)."""
    if datatype == "BYTES":
        return serialize_bytes_tensor(array)
    if array.size == 0:
        return b""  # memoryview cannot cast a view with a zero in its shape
    contiguous = np.ascontiguousarray(array)
    if contiguous.dtype == BF16_DTYPE:
        contiguous = contiguous.view(np.uint16)
    elif contiguous.dtype.byteorder == ">":
        contiguous = contiguous.astype(contiguous.dtype.newbyteorder("<"))
    return memoryview(contiguous.data).cast("B")


def tensor_from_bytes(
    buffer: bytes | memoryview,
    datatype: str,
    shape: tuple[int, ...],
    name: str,
    model_name: str = "",
    request_id: str = "",
) -> np.ndarray:
    """View ``buffer`` as a tensor of ``shape``; the byte count must match exactly. The model and the
    request it is an input of name them in the error, as Triton's does."""
    count = element_count(shape)
    if datatype == "BYTES":
        return deserialize_bytes_tensor(buffer, count, name).reshape(shape)
    dtype = _WIRE_TO_NUMPY.get(datatype)
    if dtype is None:
        if datatype == INVALID_DATATYPE:
            return UNDECODED  # the model's checks refuse the input before anything reads it
        raise InvalidInput(f"unsupported datatype '{datatype}'")
    expected = count * dtype.itemsize
    if len(buffer) != expected:
        raise byte_size_mismatch(name, model_name, request_id, expected, len(buffer))
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def byte_size_mismatch(name: str, model_name: str, request_id: str, expected: int, got: int) -> InvalidInput:
    """An input's data is not the size its shape and datatype make, in Triton's words."""
    return InvalidInput(
        f"{request_label(request_id)}input byte size mismatch for input '{name}' for model "
        f"'{model_name}'. Expected {expected}, got {got}"
    )

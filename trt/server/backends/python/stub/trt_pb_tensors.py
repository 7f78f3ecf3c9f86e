"""``pb_utils.Tensor`` and Triton's data types: the type tables and conversions, and the
length-prefixed layout of BYTES tensors."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from trt_pb_errors import TritonModelException
from trt_pb_wire import BF16, BF16_NEEDS, is_bfloat16

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16, "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8, "TYPE_INT16": np.int16, "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64, "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}  # fmt: skip
_TRITON_TYPE_CODES = {
    1: "TYPE_BOOL", 2: "TYPE_UINT8", 3: "TYPE_UINT16", 4: "TYPE_UINT32", 5: "TYPE_UINT64", 6: "TYPE_INT8",
    7: "TYPE_INT16", 8: "TYPE_INT32", 9: "TYPE_INT64", 10: "TYPE_FP16", 11: "TYPE_FP32", 12: "TYPE_FP64",
    13: "TYPE_STRING",
}  # fmt: skip
TYPE_BF16 = 14
# Triton's words: a BF16 tensor has no numpy array in a Python model, only DLPack.
_BF16_AS_NUMPY = (
    "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead."
)


class Tensor:
    _name: str
    _data: np.ndarray

    def __init__(self, name: str, data: Any) -> None:
        if not isinstance(data, np.ndarray):
            raise TritonModelException(
                f"Tensor '{name}': data must be a numpy array, got {type(data).__name__}"
            )
        if data.dtype.kind in ("U", "S"):
            data = data.astype(np.object_)
        self._name = name
        self._data = data

    @classmethod
    def _wrap(cls, name: str, data: np.ndarray) -> Tensor:
        """A tensor around an array the model process received (no checks: it is one already)."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._data = data
        return tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        if _is_bf16(self._data):
            raise TritonModelException(_BF16_AS_NUMPY)
        return self._data

    def shape(self) -> list[int]:
        return list(self._data.shape)

    def triton_dtype(self) -> int:
        return TYPE_BF16 if _is_bf16(self._data) else numpy_to_triton_type(self._data.dtype)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        return _torch().utils.dlpack.to_dlpack(self._torch_tensor())

    def __dlpack__(self, stream: Any = None) -> Any:
        if _is_bf16(self._data):  # numpy exports no bfloat16; torch does
            return self._torch_tensor().__dlpack__()
        return self._writable().__dlpack__()

    def _torch_tensor(self) -> Any:
        torch = _torch()
        if _is_bf16(self._data):  # the same bits, reinterpreted
            return torch.from_numpy(self._writable().view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(self._writable())

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        torch = _torch()
        tensor = torch.utils.dlpack.from_dlpack(capsule).cpu()
        if tensor.dtype == torch.bfloat16:
            if BF16 is None:
                raise TritonModelException(BF16_NEEDS)
            return Tensor(name, tensor.view(torch.int16).numpy().view(BF16))
        return Tensor(name, tensor.numpy())

    def _writable(self) -> np.ndarray:
        return self._data if self._data.flags.writeable else self._data.copy()

    def __repr__(self) -> str:
        return f"Tensor(name={self._name!r}, shape={self.shape()}, dtype={self._data.dtype})"


def _is_bf16(data: np.ndarray) -> bool:
    bf16: bool = is_bfloat16(data.dtype)  # the stub's modules import one another untyped
    return bf16


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise TritonModelException("DLPack conversion needs torch in the model's environment") from None
    return torch


def triton_string_to_numpy(triton_type_string: str) -> Any:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    return TRITON_STRING_TO_NUMPY[_TRITON_TYPE_CODES[data_type]]


def numpy_to_triton_type(data_type: Any) -> int:
    dtype = np.dtype(data_type)
    if dtype.kind in ("O", "S", "U"):
        return 13
    for code, name in _TRITON_TYPE_CODES.items():
        if name != "TYPE_STRING" and np.dtype(TRITON_STRING_TO_NUMPY[name]) == dtype:
            return code
    raise TritonModelException(f"no Triton type for numpy dtype {dtype}")


def numpy_to_triton_string(data_type: Any) -> str:
    return _TRITON_TYPE_CODES[numpy_to_triton_type(data_type)]


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray:
    """Length-prefixed bytes of a BYTES tensor, as a uint8 array (Triton's layout)."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.uint8)
    parts = []
    for item in input_tensor.reshape(-1):
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(data)) + data)
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    items = []
    offset = 0
    view = memoryview(encoded_tensor)
    while offset < len(view):
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        items.append(bytes(view[offset : offset + length]))
        offset += length
    return np.array(items, dtype=np.object_)

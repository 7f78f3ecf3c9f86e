"""``NAME:TYPE:DIMS`` as ``trt repo add --input/--output`` take it, e.g. ``INPUT__0:FP32:3,224,224``.

TYPE is a Triton data type in any of its spellings (``FP32``, ``TYPE_FP32``) or a numpy/torch name
(``float32``, ``float``, ``int64``, ``long``, ``bool``, ``string``); DIMS leave out the batch
dimension when the model batches, as config.pbtxt does, and ``-1`` marks a variable size.
"""

from __future__ import annotations

from dataclasses import dataclass

from trt.protos import model_config_pb2
from trt.server.core.errors import InvalidArgument

_ALIASES = {
    "FLOAT": "FP32", "FLOAT32": "FP32", "HALF": "FP16", "FLOAT16": "FP16", "DOUBLE": "FP64",
    "FLOAT64": "FP64", "LONG": "INT64", "INT": "INT32", "SHORT": "INT16", "BYTE": "INT8",
    "STRING": "STRING", "BYTES": "STRING", "STR": "STRING", "BFLOAT16": "BF16",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    data_type: str  # a config type name, e.g. "TYPE_FP32"
    dims: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> TensorSpec:
        parts = text.split(":")
        if len(parts) != 3 or not parts[0]:
            raise InvalidArgument(f"'{text}': give a tensor as NAME:TYPE:DIMS, e.g. INPUT__0:FP32:3,224,224")
        name, type_text, dims_text = parts
        return cls(name, config_type(type_text), parse_dims(dims_text, text))

    def describe(self) -> str:
        return f"{self.name}:{self.data_type.removeprefix('TYPE_')}:{','.join(map(str, self.dims))}"


def config_type(text: str) -> str:
    key = text.strip().upper().removeprefix("TYPE_")
    key = _ALIASES.get(key, key)
    candidate = f"TYPE_{key}"
    names = [value.name for value in model_config_pb2.DataType.DESCRIPTOR.values if value.number != 0]
    if candidate not in names:
        known = ", ".join(name.removeprefix("TYPE_") for name in names)
        raise InvalidArgument(f"unknown data type '{text}'; use one of {known}")
    return candidate


def parse_dims(text: str, whole: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise InvalidArgument(f"'{whole}': dims must be integers separated by commas") from None
    if not dims or any(d < -1 or d == 0 for d in dims):
        raise InvalidArgument(f"'{whole}': give at least one dimension, each 1 or more or -1 (variable)")
    return dims

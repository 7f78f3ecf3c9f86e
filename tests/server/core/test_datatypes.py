"""Byte layouts of tensors: what the binary extension, gRPC raw contents and shared memory share."""

from __future__ import annotations

import numpy as np
import pytest

from trt.server.core.datatypes import (
    config_to_wire,
    deserialize_bytes_tensor,
    serialize_bytes_tensor,
    tensor_from_bytes,
    tensor_to_bytes,
    wire_to_config,
)
from trt.server.core.errors import InvalidInput


def test_bytes_tensor_round_trip_keeps_binary_and_empty_elements() -> None:
    values = np.array([b"he\x00llo", b"", "caf\u00e9".encode()], dtype=np.object_)
    encoded = serialize_bytes_tensor(values)
    assert encoded[:4] == (6).to_bytes(4, "little")
    decoded = deserialize_bytes_tensor(encoded, 3, "x")
    assert list(decoded) == list(values)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ((5).to_bytes(4, "little") + b"abc", "claims 5 bytes"),
        ((1).to_bytes(4, "little") + b"a", "fewer elements"),
        ((1).to_bytes(4, "little") + b"ab" + (0).to_bytes(4, "little") * 2, "beyond"),
    ],
)
def test_malformed_bytes_tensors_are_rejected(payload: bytes, message: str) -> None:
    count = 2 if "fewer" in message else 1
    with pytest.raises(InvalidInput, match=message):
        deserialize_bytes_tensor(payload, count, "x")


def test_fixed_size_tensor_is_a_view_and_size_is_checked() -> None:
    data = np.arange(6, dtype=np.float32).tobytes()
    tensor = tensor_from_bytes(data, "FP32", (2, 3), "x")
    assert tensor.shape == (2, 3) and tensor[1, 2] == 5.0
    assert not tensor.flags.owndata
    with pytest.raises(InvalidInput, match="expected 24 bytes"):
        tensor_from_bytes(data[:-1], "FP32", (2, 3), "x")


def test_tensor_to_bytes_is_little_endian_row_major() -> None:
    array = np.array([[1, 2], [3, 4]], dtype=">i4")
    assert bytes(tensor_to_bytes(array, "INT32")) == np.array([1, 2, 3, 4], "<i4").tobytes()


def test_config_and_wire_names() -> None:
    assert config_to_wire("TYPE_STRING") == "BYTES"
    assert config_to_wire("TYPE_FP16") == "FP16"
    assert wire_to_config("BYTES") == "TYPE_STRING"

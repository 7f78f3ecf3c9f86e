"""Byte layouts of tensors: what the binary extension, gRPC raw contents and shared memory share."""

from __future__ import annotations

import numpy as np
import pytest

from trt.server.core.datatypes import (
    DEFAULT_MAX_BYTES_ELEMENTS,
    check_shape,
    config_to_wire,
    deserialize_bytes_tensor,
    serialize_bytes_tensor,
    set_max_bytes_elements,
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
        ((1).to_bytes(4, "little") + b"a" + b"xyz", "fewer elements"),
        ((1).to_bytes(4, "little") + b"ab" + (0).to_bytes(4, "little") * 2, "beyond"),
    ],
)
def test_malformed_bytes_tensors_are_rejected(payload: bytes, message: str) -> None:
    count = 2 if "fewer" in message else 1
    with pytest.raises(InvalidInput, match=message):
        deserialize_bytes_tensor(payload, count, "x")


def test_a_declared_bytes_count_the_data_cannot_hold_is_refused_before_allocating() -> None:
    """Shape [200000000] with 5 bytes of data allocated 1.6 GB of object pointers before its 400."""
    payload = (1).to_bytes(4, "little") + b"a"
    with pytest.raises(InvalidInput, match="cannot hold the 200000000 elements"):
        deserialize_bytes_tensor(payload, 200_000_000, "x")
    with pytest.raises(InvalidInput, match="cannot hold the 20000000000 elements"):
        tensor_from_bytes(payload, "BYTES", (20_000_000_000,), "x")  # [2e10]: was a 500 (MemoryError)


def test_bytes_tensors_over_the_element_limit_are_refused() -> None:
    elements = np.array([b"a"] * 8, dtype=np.object_)
    payload = serialize_bytes_tensor(elements)
    try:
        set_max_bytes_elements(4)
        with pytest.raises(InvalidInput, match="8 elements is over the server's limit of 4"):
            deserialize_bytes_tensor(payload, 8, "x")
        set_max_bytes_elements(0)  # no bound
        assert list(deserialize_bytes_tensor(payload, 8, "x")) == list(elements)
    finally:
        set_max_bytes_elements(DEFAULT_MAX_BYTES_ELEMENTS)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((1, -16), "negative dimension"),
        ((0, 2**62), "larger than any tensor can be"),  # no elements, yet numpy cannot describe it
        ((2**40, 2**40), "larger than any tensor can be"),
        ((1,) * 65, "at most 64"),
    ],
)
def test_shapes_no_tensor_can_have_are_refused(shape: tuple[int, ...], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        check_shape("x", shape)
    check_shape("x", (0, 2**40))  # large but describable: the data must still match it


def test_fixed_size_tensor_is_a_view_and_size_is_checked() -> None:
    data = np.arange(6, dtype=np.float32).tobytes()
    tensor = tensor_from_bytes(data, "FP32", (2, 3), "x")
    assert tensor.shape == (2, 3) and tensor[1, 2] == 5.0
    assert not tensor.flags.owndata
    with pytest.raises(InvalidInput) as error:
        tensor_from_bytes(data[:-1], "FP32", (2, 3), "x", "m", "7")
    assert (
        error.value.message
        == "[request id: 7] input byte size mismatch for input 'x' for model 'm'. Expected 24, got 23"
    )


def test_tensor_to_bytes_is_little_endian_row_major() -> None:
    array = np.array([[1, 2], [3, 4]], dtype=">i4")
    assert bytes(tensor_to_bytes(array, "INT32")) == np.array([1, 2, 3, 4], "<i4").tobytes()


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3)])
def test_an_empty_tensor_is_no_bytes(shape: tuple[int, ...]) -> None:
    """A model may answer an output with no elements; its raw form is empty (memoryview refuses to
    cast such an array, and the response failed with a TypeError before)."""
    assert bytes(tensor_to_bytes(np.zeros(shape, np.float32), "FP32")) == b""


def test_config_and_wire_names() -> None:
    assert config_to_wire("TYPE_STRING") == "BYTES"
    assert config_to_wire("TYPE_FP16") == "FP16"
    assert wire_to_config("BYTES") == "TYPE_STRING"

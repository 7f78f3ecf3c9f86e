"""``fp32_contents`` and ``fp64_contents`` are read from their packed bytes at once (before: value by value,
45 ms a million on the event loop); every typed field reads to the values the parsed field holds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from trt.protos import grpc_service_pb2 as pb
from trt.server.core.errors import InvalidInput
from trt.server.grpc.codec import decode_infer_message
from trt.server.grpc.packed_contents import packed_values
from trt.server.grpc.varints import varint

INT32 = np.iinfo(np.int32)
INT64 = np.iinfo(np.int64)
VALUES: dict[str, tuple[str, list[Any]]] = {
    "BOOL": ("bool_contents", [True, False, True, True]),
    "INT8": ("int_contents", [-128, 127, 0, -1]),
    "INT16": ("int_contents", [-32768, 32767, 5, -7]),
    "INT32": ("int_contents", [INT32.min, INT32.max, 0, -1]),
    "INT64": ("int64_contents", [INT64.min, INT64.max, 1 << 40, -(1 << 40)]),
    "UINT8": ("uint_contents", [0, 255, 1, 128]),
    "UINT16": ("uint_contents", [0, 65535, 1, 300]),
    "UINT32": ("uint_contents", [0, (1 << 32) - 1, 1, 1 << 31]),
    "UINT64": ("uint64_contents", [0, (1 << 64) - 1, 1, 1 << 63]),
    "FP32": ("fp32_contents", [1.5, -0.0, float("inf"), 3.4e38]),
    "FP64": ("fp64_contents", [1e-308, -2.5, float("-inf"), 1.7976931348623157e308]),
}


def _request(datatype: str, field: str, values: list[Any], shape: list[int] | None = None) -> bytes:
    request = pb.ModelInferRequest(model_name="m", id="r")
    tensor = request.inputs.add(name="X", datatype=datatype, shape=shape or [len(values)])
    getattr(tensor.contents, field).extend(values)
    return request.SerializeToString()


def _decoded(data: bytes) -> np.ndarray:
    (tensor,) = decode_infer_message(data).inputs
    assert tensor.data is not None
    return tensor.data


@pytest.mark.parametrize("datatype", list(VALUES))
def test_every_typed_field_reads_to_the_values_and_dtype_it_holds(datatype: str) -> None:
    field, values = VALUES[datatype]
    data = _request(datatype, field, values * 1000, [2, 2000])
    parsed = getattr(pb.ModelInferRequest.FromString(data).inputs[0].contents, field)
    expected = np.array(list(parsed), dtype=_numpy(datatype)).reshape(2, 2000)
    decoded = _decoded(data)
    assert decoded.dtype == expected.dtype and decoded.shape == (2, 2000)
    np.testing.assert_array_equal(decoded, expected)
    read_at_once = packed_values(pb.ModelInferRequest.FromString(data).inputs[0].contents, field, 4000)
    assert (read_at_once is not None) == (datatype in ("FP32", "FP64"))


def _numpy(datatype: str) -> np.dtype[Any]:
    return np.dtype({"BOOL": "bool", "FP32": "float32", "FP64": "float64"}.get(datatype, datatype.lower()))


def test_a_32_bit_field_given_a_wider_varint_is_cut_to_32_bits_as_the_parser_cuts_it() -> None:
    # int_contents = 2, packed: 2**40 + 5 and -1 written as a 5-byte varint (not sign-extended).
    run = varint((1 << 40) + 5) + varint(0xFFFFFFFF)
    contents = bytes([2 << 3 | 2]) + varint(len(run)) + run
    tensor = pb.ModelInferRequest.InferInputTensor(name="X", datatype="INT32", shape=[2])
    tensor.contents.MergeFromString(contents)
    assert list(tensor.contents.int_contents) == [5, -1]
    request = pb.ModelInferRequest(model_name="m", inputs=[tensor])
    np.testing.assert_array_equal(_decoded(request.SerializeToString()), np.array([5, -1], np.int32))


def test_contents_sent_unpacked_read_the_same() -> None:
    # fp32_contents = 6 as separate 32-bit entries: parsers take both forms.
    floats = np.arange(100, dtype=np.float32)
    contents = b"".join(bytes([6 << 3 | 5]) + value.tobytes() for value in floats)
    tensor = pb.ModelInferRequest.InferInputTensor(name="X", datatype="FP32", shape=[100])
    tensor.contents.MergeFromString(contents)
    assert packed_values(tensor.contents, "fp32_contents", 100) is not None  # written again, packed
    request = pb.ModelInferRequest(model_name="m", inputs=[tensor])
    np.testing.assert_array_equal(_decoded(request.SerializeToString()), floats)


def test_a_narrow_integer_out_of_its_range_is_still_refused() -> None:
    with pytest.raises(InvalidInput, match=r"outside the range of INT8 \[-128, 127\]"):
        _decoded(_request("INT8", "int_contents", [1, 200]))


RUN = bytes([6 << 3 | 2]) + varint(256) + np.arange(64, dtype="<f4").tobytes()  # 64 floats, packed


class _Serialized:
    """Contents whose bytes are given: what ``packed_values`` reads."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:
        return self.data


@pytest.mark.parametrize(
    "data",
    [
        RUN[:-1],  # a run shorter than its length says
        RUN + RUN,  # the field twice
        bytes([6 << 3 | 5]) + b"\x00" * 4,  # unpacked
        bytes([6 << 3 | 2]) + b"\xff" * 11,  # a length that never ends
        bytes([6 << 3 | 2]) + varint(260) + b"\x00" * 260,  # 65 values where 64 were counted
        bytes([7 << 3 | 2]) + varint(512) + b"\x00" * 512,  # another field
    ],
    ids=["short", "twice", "unpacked", "endless-length", "miscounted", "other-field"],
)
def test_bytes_not_as_expected_are_left_to_the_value_by_value_reading(data: bytes) -> None:
    assert packed_values(_Serialized(RUN), "fp32_contents", 64) is not None
    assert packed_values(_Serialized(data), "fp32_contents", 64) is None

"""Large ModelInferRequests (at least ``LARGE_MESSAGE`` bytes) have their raw inputs read in place by
trt's own field scan: it must agree with protobuf, refuse what is malformed as INVALID_ARGUMENT, and
stay bounded on messages packed with tiny fields (hostile bytes from the network)."""

from __future__ import annotations

import numpy as np
import pytest

from trt.protos import grpc_service_pb2 as pb
from trt.server.core.errors import InvalidArgument
from trt.server.grpc import codec


def _large_request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple", id="big")
    values = np.arange(codec.LARGE_MESSAGE // 4 + 16, dtype=np.int32)
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32")
        tensor.shape.extend([1, values.size])
        request.raw_input_contents.append(values.tobytes())
    return request


def test_a_large_request_decodes_to_views_with_protobufs_values() -> None:
    data = _large_request().SerializeToString()
    decoded = codec.decode_infer_message(data)
    expected = np.arange(codec.LARGE_MESSAGE // 4 + 16, dtype=np.int32).reshape(1, -1)
    assert decoded.model_name == "simple" and decoded.id == "big"
    assert [tensor.name for tensor in decoded.inputs] == ["INPUT0", "INPUT1"]
    for tensor in decoded.inputs:
        np.testing.assert_array_equal(tensor.data, expected)
        assert not tensor.data.flags.owndata  # read in place, not copied


def test_a_large_request_packed_with_tiny_fields_is_left_to_protobuf() -> None:
    """2-byte fields past the scan's bound: the scan stops there, and protobuf's parse gives the
    same request (the last model_version wins, as protobuf says)."""
    request = _large_request()
    padding = b"\x12\x00" * (codec.MAX_SCANNED_FIELDS + 10)  # model_version = "" again and again
    data = request.SerializeToString() + padding + b"\x12\x012"  # and finally "2"
    assert codec.split_raw_inputs(memoryview(data)) is None
    decoded = codec.decode_infer_message(data)
    assert decoded.model_version == "2"
    assert [tensor.name for tensor in decoded.inputs] == ["INPUT0", "INPUT1"]
    assert decoded.inputs[0].data.shape == (1, codec.LARGE_MESSAGE // 4 + 16)


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"\x0a\xff\xff\xff\x7f", id="a field longer than the message"),
        pytest.param(b"\x0a" + b"\xff" * 11, id="a varint of more than 10 bytes"),
        pytest.param(b"\x0a", id="a length cut off"),
        pytest.param(b"\x0b", id="wire type 3 (a group)"),
        pytest.param(b"\x09\x01\x02", id="a fixed64 cut off"),
    ],
)
def test_a_malformed_large_request_is_invalid_argument(tail: bytes) -> None:
    data = _large_request().SerializeToString() + tail
    assert len(data) >= codec.LARGE_MESSAGE
    with pytest.raises(InvalidArgument, match="malformed ModelInferRequest"):
        codec.decode_infer_message(data)

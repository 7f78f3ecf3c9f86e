"""ModelInferResponses serialized from cached pieces must be protobuf's own bytes, whatever the
response holds, and leave to protobuf what they do not cover (parameters)."""

from __future__ import annotations

import numpy as np
import pytest

from trt.protos import grpc_service_pb2 as pb
from trt.server.core.datatypes import serialize_bytes_tensor
from trt.server.core.types import InferenceResponse, OutputTensor
from trt.server.grpc import codec, response_wire


def _output(name: str, data: np.ndarray | None, datatype: str = "FP32") -> OutputTensor:
    shape = (2, 3) if data is None else tuple(data.shape)
    return OutputTensor(name, datatype, shape, data)


def _protobufs(response: InferenceResponse) -> bytes:
    return codec.encode_infer_response(response).SerializeToString()


RESPONSES = {
    "no id": InferenceResponse("add_sub", "1", "", [_output("OUTPUT0", np.arange(16, dtype=np.float32))]),
    "an id": InferenceResponse(
        "add_sub", "1", "request-7", [_output("OUT", np.ones((1, 4), np.int64), "INT64")]
    ),
    "an id of 300 non-ASCII bytes": InferenceResponse(
        "m", "", "é" * 150, [_output("O", np.zeros(3, np.uint8), "UINT8")]
    ),
    "no outputs": InferenceResponse("m", "3", "x", []),
    "an empty tensor": InferenceResponse("m", "1", "", [_output("O", np.zeros((0, 4), np.float32))]),
    "BYTES": InferenceResponse(
        "m", "1", "", [_output("O", np.array([b"ab", b""], dtype=np.object_), "BYTES")]
    ),
    "an output in shared memory": InferenceResponse(
        "m", "1", "", [_output("A", None), _output("B", np.ones(2, np.float64), "FP64")]
    ),
    "a long name and a long output": InferenceResponse(
        "n" * 200, "12", "", [_output("O" * 130, np.arange(20000, dtype=np.float32).reshape(100, 200))]
    ),
}


@pytest.mark.parametrize("response", RESPONSES.values(), ids=RESPONSES.keys())
def test_the_cached_pieces_join_into_protobufs_bytes(response: InferenceResponse) -> None:
    for _ in range(2):  # the first builds the cached pieces, the second reuses them
        assert codec.encode_infer_parts(response) == [_protobufs(response)]


def test_a_large_response_keeps_its_outputs_as_views_and_parses_back() -> None:
    data = np.arange(codec.LARGE_MESSAGE // 4 + 8, dtype=np.float32)
    response = InferenceResponse("m", "1", "big", [_output("OUTPUT0", data)])
    parts = codec.encode_infer_parts(response)
    assert len(parts) > 1 and any(isinstance(part, memoryview) for part in parts)
    joined = b"".join(parts)
    assert joined == _protobufs(response)
    parsed = pb.ModelInferResponse.FromString(joined)
    np.testing.assert_array_equal(np.frombuffer(parsed.raw_output_contents[0], np.float32), data)


@pytest.mark.parametrize("where", ["response", "output"])
def test_parameters_are_left_to_protobuf(where: str) -> None:
    output = _output("O", np.arange(4, dtype=np.int32), "INT32")
    response = InferenceResponse("m", "1", "", [output])
    if where == "response":
        response.parameters = {"sequence_id": 5}
    else:
        output.parameters = {"binary_data_size": 16}
    assert response_wire.plain_response_parts(response) is None
    assert codec.encode_infer_parts(response) == [_protobufs(response)]


def test_more_signatures_than_the_cache_holds_still_serialize_exactly() -> None:
    for index in range(300):
        response = InferenceResponse(
            f"model{index}", "1", "", [_output("O", np.full(index % 7, index, np.int32), "INT32")]
        )
        assert codec.encode_infer_parts(response) == [_protobufs(response)]


def test_bytes_outputs_match_their_wire_form() -> None:
    array = np.array([b"hello", b"w"], dtype=np.object_)
    response = InferenceResponse("m", "1", "", [_output("O", array, "BYTES")])
    parsed = pb.ModelInferResponse.FromString(codec.encode_infer_parts(response)[0])
    assert parsed.raw_output_contents[0] == serialize_bytes_tensor(array)


def _stream_protobufs(response: InferenceResponse, final: bool) -> bytes:
    reply = pb.ModelStreamInferResponse()
    codec.encode_infer_response(response, reply.infer_response)
    reply.infer_response.parameters["triton_final_response"].bool_param = final
    return reply.SerializeToString()


@pytest.mark.parametrize("final", [False, True])
@pytest.mark.parametrize("response", RESPONSES.values(), ids=RESPONSES.keys())
def test_a_stream_answer_is_protobufs_bytes_with_its_final_flag(
    response: InferenceResponse, final: bool
) -> None:
    serialized = response_wire.stream_response(response, final)
    assert serialized == _stream_protobufs(response, final)
    parsed = pb.ModelStreamInferResponse.FromString(serialized)
    assert parsed.infer_response.parameters["triton_final_response"].bool_param is final


def test_a_stream_answer_with_parameters_of_its_own_is_left_to_protobuf() -> None:
    response = InferenceResponse("m", "1", "", [_output("O", np.arange(2, dtype=np.int32), "INT32")])
    response.parameters = {"sequence_id": 5}
    assert response_wire.stream_response(response, True) is None

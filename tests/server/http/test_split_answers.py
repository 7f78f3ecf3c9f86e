"""A binary answer whose tensors are large leaves in pieces: the JSON header, then each output's own
buffer, never joined into one bytes object on the event loop (64 MB: 42 ms of copying into fresh
pages). What reaches the client must be byte for byte what the joined body was, over a plain
connection, compressed, and through front-end workers."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from tests.support import ServerProcess, save_onnx
from trt.server.core.types import InferenceResponse, OutputTensor
from trt.server.frontend import codec as channel_codec
from trt.server.frontend import messages as m
from trt.server.http import codec
from trt.server.http.compression import compress
from trt.server.http.messages import SPLIT_BODY_BYTES, SplitBody

LARGE = (SPLIT_BODY_BYTES - 8) // 4 + 1  # FP32 elements that, with N's 8 bytes, are just past the split


def _response(elements: int, request_id: str = "") -> InferenceResponse:
    big = np.arange(elements, dtype=np.float32)
    small = np.array([elements], dtype=np.int64)
    outputs = [OutputTensor("BIG", "FP32", big.shape, big), OutputTensor("N", "INT64", (1,), small)]
    return InferenceResponse("m", "1", request_id, outputs)


@pytest.mark.parametrize("request_id", ["", "req-7"], ids=["cached header", "general encoder"])
def test_a_large_binary_answer_is_kept_as_the_outputs_own_buffers(request_id: str) -> None:
    response = _response(LARGE, request_id)
    body, json_length = codec.encode_response(response, {}, True)
    assert isinstance(body, SplitBody)
    header, big, small = body.parts
    assert json_length == len(header)
    assert np.shares_memory(np.frombuffer(big, np.uint8), response.outputs[0].data)  # not a copy
    assert bytes(big) == np.arange(LARGE, dtype=np.float32).tobytes()
    assert bytes(small) == np.int64(LARGE).tobytes()
    assert len(body) == len(bytes(body)) == len(header) + 4 * LARGE + 8
    document = orjson.loads(header)
    assert [o["parameters"]["binary_data_size"] for o in document["outputs"]] == [4 * LARGE, 8]


def test_a_small_binary_answer_is_one_bytes_object() -> None:
    body, json_length = codec.encode_response(_response(LARGE - 1), {}, True)
    assert type(body) is bytes and json_length is not None
    tensors = np.arange(LARGE - 1, dtype=np.float32).tobytes() + np.int64(LARGE - 1).tobytes()
    assert body[json_length:] == tensors


def test_an_answer_with_a_json_output_keeps_the_binary_ones_apart() -> None:
    elements = SPLIT_BODY_BYTES // 4 + 1  # BIG alone past the split
    body, json_length = codec.encode_response(_response(elements), {"N": False}, True)
    assert isinstance(body, SplitBody) and json_length is not None
    header, big = body.parts
    assert orjson.loads(header)["outputs"][1]["data"] == [elements]
    assert bytes(big) == np.arange(elements, dtype=np.float32).tobytes()


@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", 31), ("deflate", zlib.MAX_WBITS)])
def test_a_split_answer_compresses_to_the_joined_bytes(encoding: str, wbits: int) -> None:
    body, _ = codec.encode_response(_response(LARGE), {}, True)
    assert isinstance(body, SplitBody)
    compressed, headers = compress(body, [], encoding)
    assert type(compressed) is bytes and headers == [(b"content-encoding", encoding.encode())]
    assert zlib.decompress(compressed, wbits) == bytes(body)


def test_a_split_answer_crosses_to_a_front_end_worker_as_the_joined_bytes_would() -> None:
    body, json_length = codec.encode_response(_response(LARGE), {}, True)
    assert isinstance(body, SplitBody) and json_length is not None
    split = channel_codec.encode(m.InferAnswer(3, json_length, "", body))
    assert split == channel_codec.encode(m.InferAnswer(3, json_length, "", bytes(body)))
    reader = channel_codec.FrameReader(len(split))
    assert reader.feed(split) == [m.InferAnswer(3, json_length, "", bytes(body))]


# -- served -------------------------------------------------------------------------------------

CONFIG = """
platform: "onnxruntime_onnx"
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "BIG" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "N" data_type: TYPE_INT64 dims: [ 1 ] }
]
"""


@pytest.fixture(scope="module", params=[[], ["--frontend-workers=1"]], ids=["core", "front-end worker"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    from onnx import TensorProto, helper

    repo = tmp_path_factory.mktemp("split_repo")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["BIG"]), helper.make_node("Shape", ["X"], ["N"])], "split",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("BIG", TensorProto.FLOAT, ["n"]),
         helper.make_tensor_value_info("N", TensorProto.INT64, [1])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    save_onnx(model, repo / "split" / "1" / "model.onnx")
    (repo / "split" / "config.pbtxt").write_text(CONFIG)
    proc = ServerProcess([repo], request.param).start(tmp_path_factory.mktemp("split_logs"))
    yield proc
    proc.stop()


@pytest.mark.parametrize("elements", [LARGE - 1, LARGE, 4_000_000], ids=["joined", "split", "16 MB"])
@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("n_binary", [True, False], ids=["all binary", "N as JSON"])
def test_answers_reach_tritonclient_whole(
    server: ServerProcess, elements: int, compression: str | None, n_binary: bool
) -> None:
    data = np.random.default_rng(elements).random(elements, dtype=np.float32)
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    tensor = httpclient.InferInput("X", [elements], "FP32")
    tensor.set_data_from_numpy(data)
    requested = httpclient.InferRequestedOutput
    outputs = [requested("N", binary_data=n_binary), requested("BIG")]
    for _ in range(2):  # the second on the same connection, after a split answer
        result = client.infer("split", [tensor], outputs=outputs, response_compression_algorithm=compression)
        assert np.array_equal(result.as_numpy("BIG"), data)
        assert result.as_numpy("N").tolist() == [elements]

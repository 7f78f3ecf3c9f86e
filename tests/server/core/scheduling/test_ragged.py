"""Triton's ragged batching: requests of different lengths batch together, the model gets a ragged
input's elements end to end with the batch inputs that say where each request's end, and a batch
output is cut back to each request's shape. Served by ONNX Runtime (an ONNX model that sums each
request's elements from the accumulated counts), reached with tritonclient over HTTP; the batch
inputs' values checked against the examples of Triton's docs."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from tests.support import SIMPLE_CONFIG, ServerProcess, save_onnx, write_simple
from trt.server.core.errors import ModelConfigError
from trt.server.core.models.config import parse_config_text
from trt.server.core.models.config_rules import config_problems
from trt.server.core.scheduling.ragged import RaggedBatching


def _segment_sum_model() -> object:
    """SUM[i] = the sum of request i's elements of INPUT (INDEX: the accumulated element counts);
    COUNTS[i] = ELEMENTS[i]; DOUBLED = 2 x INPUT, element for element."""
    const = helper.make_tensor
    nodes = [
        helper.make_node("Constant", [], ["axis"], value=const("axis", TensorProto.INT64, [], [0])),
        helper.make_node("Constant", [], ["one"], value=const("one", TensorProto.INT64, [1], [1])),
        helper.make_node("Constant", [], ["zero"], value=const("zero", TensorProto.FLOAT, [1], [0.0])),
        helper.make_node("Constant", [], ["two"], value=const("two", TensorProto.FLOAT, [1], [2.0])),
        helper.make_node("Constant", [], ["column"], value=const("column", TensorProto.INT64, [2], [-1, 1])),
        helper.make_node("Constant", [], ["begin"], value=const("begin", TensorProto.INT64, [1], [0])),
        helper.make_node("Constant", [], ["last"], value=const("last", TensorProto.INT64, [1], [-1])),
        helper.make_node("CumSum", ["INPUT", "axis"], ["running"]),
        helper.make_node("Cast", ["INDEX"], ["index64"], to=TensorProto.INT64),
        helper.make_node("Sub", ["index64", "one"], ["end_positions"]),
        helper.make_node("Gather", ["running", "end_positions"], ["ends"]),
        helper.make_node("Slice", ["ends", "begin", "last"], ["ends_but_last"]),
        helper.make_node("Concat", ["zero", "ends_but_last"], ["starts"], axis=0),
        helper.make_node("Sub", ["ends", "starts"], ["sums"]),
        helper.make_node("Reshape", ["sums", "column"], ["SUM"]),
        helper.make_node("Cast", ["ELEMENTS"], ["elements"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["elements", "column"], ["COUNTS"]),
        helper.make_node("Mul", ["INPUT", "two"], ["DOUBLED"]),
    ]
    graph = helper.make_graph(
        nodes,
        "segment_sum",
        [
            helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["elements"]),
            helper.make_tensor_value_info("INDEX", TensorProto.INT32, ["requests"]),
            helper.make_tensor_value_info("ELEMENTS", TensorProto.INT32, ["requests"]),
        ],
        [
            helper.make_tensor_value_info("SUM", TensorProto.FLOAT, ["requests", 1]),
            helper.make_tensor_value_info("COUNTS", TensorProto.FLOAT, ["requests", 1]),
            helper.make_tensor_value_info("DOUBLED", TensorProto.FLOAT, ["elements"]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


RAGGED_CONFIG = """
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" data_type: TYPE_INT32 source_input: "INPUT" },
  { kind: BATCH_ELEMENT_COUNT target_name: "ELEMENTS" data_type: TYPE_INT32 source_input: "INPUT" }
]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "COUNTS" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] }
]
batch_output [ { target_name: "DOUBLED" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ragged")
    for name, extra in (
        # a long delay: requests sent together are batched together
        ("ragged", "dynamic_batching { max_queue_delay_microseconds: 500000 }\n"),
        ("ragged_direct", ""),  # no dynamic batcher: each request alone, still flattened
    ):
        save_onnx(_segment_sum_model(), repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(RAGGED_CONFIG + extra)
    # add_sub's INPUT0 is [batch, 16] in the model: it cannot take a ragged input end to end
    write_simple(
        repo,
        "ragged_2d",
        SIMPLE_CONFIG.replace("dims: [ 16 ] }", "dims: [ 16 ] allow_ragged_batch: true }", 1),
    )
    server = ServerProcess([repo], ["--exit-on-error=false"]).start(repo)
    try:
        yield server
    finally:
        server.stop()


def _request(length: int, start: float) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("INPUT", [1, length], "FP32")
    tensor.set_data_from_numpy(np.arange(start, start + length, dtype=np.float32).reshape(1, length))
    return [tensor]


def _executions(server: ServerProcess, model: str) -> tuple[int, int]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats") as answer:
        stats = json.load(answer)["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


def test_requests_of_different_lengths_batch_together_and_each_gets_its_own_answer(
    server: ServerProcess,
) -> None:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=3)
    lengths = (3, 4, 5)  # the example of Triton's ragged batching docs
    sent = [client.async_infer("ragged", _request(length, 10.0 * length)) for length in lengths]
    results = [request.get_result() for request in sent]
    for length, result in zip(lengths, results, strict=True):
        values = np.arange(10.0 * length, 10.0 * length + length, dtype=np.float32)
        np.testing.assert_allclose(result.as_numpy("SUM"), [[values.sum()]])
        np.testing.assert_array_equal(result.as_numpy("COUNTS"), [[length]])
        np.testing.assert_array_equal(result.as_numpy("DOUBLED"), 2 * values.reshape(1, length))
    assert _executions(server, "ragged") == (3, 1)  # one execution for the three


def test_without_a_dynamic_batcher_a_request_is_still_flattened_with_its_batch_inputs(
    server: ServerProcess,
) -> None:
    result = httpclient.InferenceServerClient(server.http_url).infer("ragged_direct", _request(6, 1.0))
    np.testing.assert_allclose(result.as_numpy("SUM"), [[21.0]])
    assert result.as_numpy("DOUBLED").shape == (1, 6)


def test_a_model_that_cannot_take_a_ragged_input_flat_is_refused_at_load(server: ServerProcess) -> None:
    index = {
        row["name"]: row
        for row in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    }
    assert index["ragged_2d"]["state"] == "UNAVAILABLE"
    assert (
        "input 'INPUT0' has allow_ragged_batch, so the model must take it as one dimension"
        in index["ragged_2d"]["reason"]
    )


def _batching(kind: str, dtype: str = "TYPE_INT32") -> RaggedBatching:
    config = parse_config_text(
        'max_batch_size: 8 input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, -1 ]'
        " allow_ragged_batch: true } ]\n"
        f'batch_input [ {{ kind: {kind} target_name: "B" data_type: {dtype} source_input: "X" }} ]'
    )
    batching = RaggedBatching.from_config(config)
    assert batching is not None
    return batching


def test_each_batch_input_kind_as_tritons_docs_describe_it() -> None:
    # One batch-2 request of items [3, 1] and a batch-1 request of an item [2, 2] (the docs' example)
    requests = [{"X": np.zeros((2, 3, 1), np.float32)}, {"X": np.zeros((1, 2, 2), np.float32)}]
    expected = {
        "BATCH_ELEMENT_COUNT": [6, 4],
        "BATCH_ACCUMULATED_ELEMENT_COUNT": [6, 10],
        "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO": [0, 6, 10],
        "BATCH_ITEM_SHAPE": [[3, 1], [3, 1], [2, 2]],
        "BATCH_ITEM_SHAPE_FLATTEN": [3, 1, 3, 1, 2, 2],
    }
    for kind, value in expected.items():
        feeds = _batching(kind).feeds(requests)
        np.testing.assert_array_equal(feeds["B"], value)
        assert feeds["B"].dtype == np.int32
        assert feeds["X"].shape == (10,)  # the ragged input, end to end
    shaped = _batching("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", "TYPE_FP32").feeds(requests)["B"]
    assert shaped.shape == (6,) and shaped.dtype == np.float32


def test_a_batch_input_must_name_a_config_input_and_a_type_triton_allows() -> None:
    with pytest.raises(ModelConfigError, match="must name one source_input"):
        RaggedBatching.from_config(
            parse_config_text(
                'max_batch_size: 8 input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_INT32'
                ' source_input: "Y" } ]'
            )
        )
    with pytest.raises(ModelConfigError, match="TYPE_INT32 or TYPE_FP32"):
        _batching("BATCH_ELEMENT_COUNT", "TYPE_INT64")
    with pytest.raises(ModelConfigError, match=r"max_batch_size > 0"):
        RaggedBatching.from_config(
            parse_config_text(
                'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]'
            )
        )


def test_ragged_fields_with_a_sequence_batcher_fail_rather_than_being_ignored() -> None:
    config = parse_config_text(
        'max_batch_size: 8 sequence_batching {} input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ]'
        ' allow_ragged_batch: true } ] output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]'
    )
    problems = [problem.message for problem in config_problems(config)]
    assert any("not with sequence_batching" in message for message in problems), problems
    # A Python model takes each request whole and ignores them, as Triton's Python backend does
    config.backend = "python"
    assert not [p for p in config_problems(config) if "ragged" in p.message or "batch_input" in p.message]
